package vendors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Request is what a vendor rule sees of an outbound request.
type Request struct {
	Method string
	// Path is the vendor API path, e.g. /v1/payment_intents.
	Path string
	// Query is the raw query string, without the '?'.
	Query  string
	Header http.Header
	Body   []byte
}

// Effect is a request classified as a side effect.
type Effect struct {
	// EffectType is the vendor-neutral type of a money-moving call
	// (payment.charge, payment.refund, …; taxonomy.go), else Operation.
	EffectType string
	// Operation is the vendor's own operation,
	// <vendor>.<resource>.<action>, e.g. stripe.refunds.create.
	Operation string
	// FollowUp is true for a step of a payment created before (confirm,
	// capture, cancel), which moves no money its create did not declare:
	// it counts zero (taxonomy.go, "Counting").
	FollowUp bool
	// Money is what the request moves, when the vendor's format says so.
	Money *Money
	// CostMicros is a fixed estimated cost in micro-USD that a declared
	// vendor's route names for a call that moves no amount (an email
	// send), so that ceilings count calls; nil for none.
	CostMicros *int64
	// Counterparty is who the money goes to or comes from (a customer,
	// destination account, shopper reference), when present.
	Counterparty string
	// CallerKey is the idempotency key the caller already put in the
	// request, in the vendor's own place, if any.
	CallerKey string
	// KeyFromSDK is true when CallerKey is one an SDK mints afresh for
	// every call (stripe-go's, stripe-node's retry keys): it says only
	// that the SDK's own retries of one call are the same call, nothing
	// about two calls the application makes.
	KeyFromSDK bool
	// KeyMinted is when an SDK minted CallerKey, when the key says so
	// (stripe-go's carry the time): the proxy keys such a call in the
	// dedupe window that time falls in. Zero otherwise.
	KeyMinted time.Time
	// Scope names the account the request acts for when a header says so
	// (Stripe-Account, Stripe-Context, PayPal-Auth-Assertion): identical
	// requests for two accounts are different actions.
	Scope string
	// Merchant names the merchant a body field selects (Adyen's
	// merchantAccount, Square's location, Checkout.com's processing
	// channel). It is in the content already; keys derived from the
	// caller's key are scoped by it too.
	Merchant string
	// Credential is the stable part of the caller's credentials, which
	// scopes derived keys: a static secret (a Stripe or Checkout.com secret
	// key, an Adyen API key, HTTP Basic credentials), whether or not a
	// Merchant is named (a static key does not refresh, and another
	// company's key naming the same merchant is another caller). It is
	// empty for OAuth bearer tokens, which are refreshed: a retry with a
	// fresh token is the same call.
	Credential string
	// Owner is the OAuth bearer credential when it alone says whose call
	// it is: no account header, merchant field or static credential does
	// (PayPal without PayPal-Auth-Assertion, Checkout.com without
	// processing_channel_id, Square without location_id). It does not
	// scope the key, so a retry with a refreshed token still finds a
	// blocked or in-flight call; but a stored answer is replayed only to
	// the credential that made the call, and another one makes its own
	// call (the proxy's rule).
	Owner string
	// Refuse, when set, is why the request must not be sent: it can be
	// read two ways (a repeated header or form field, a duplicate JSON
	// key, a body that does not parse), so what Ratchet costs and scopes
	// could differ from what the vendor acts on. The proxy answers 400 in
	// the vendor's shape and records nothing.
	Refuse string
	// Key says where this endpoint takes an idempotency key; Location is
	// empty for endpoints that take none (the request is gated but not
	// stamped).
	Key KeyRule
	// Form is the body as url.ParseQuery parsed it, when the rules read it
	// as a form and it parsed (Stripe's v1): the proxy's fingerprint of a
	// form body is made from these fields rather than from a second
	// parse. Nil otherwise. Read only: the fingerprint is made from it.
	// It is the raw request (card fields included): never log, persist or
	// return an Effect whole.
	Form url.Values
}

// RefuseFor sets Refuse to why unless a reason is already set: the first
// reason found is the one the caller sees.
func (e *Effect) RefuseFor(why string) {
	if e.Refuse == "" {
		e.Refuse = why
	}
}

// mutating reports whether an HTTP method can change vendor state.
func Mutating(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// segments splits a path into its non-empty parts.
func Segments(path string) []string {
	var out []string
	for _, p := range strings.Split(path, "/") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// part makes one path segment safe for an effect type: lowercase, with
// anything outside [a-z0-9_] as '_'.
func Part(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			b[i] = '_'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	if len(b) == 0 || b[0] == '_' {
		return "x" + string(b)
	}
	return string(b)
}

// restType names a REST call from its resource path: collection POST is
// create, item POST/PUT/PATCH is update, item DELETE is delete, and a verb
// after an item is that verb (…/{id}/capture → capture). ids are the
// segments at odd positions. Nested collections join the resource name:
// /customers/{id}/sources → customers.sources.create.
func RestType(vendor, method string, parts []string) string {
	names := []string{Part(vendor)}
	for i := 0; i < len(parts); i += 2 {
		names = append(names, Part(parts[i]))
	}
	var action string
	switch {
	case len(parts)%2 == 1 && len(parts) > 1 && method == http.MethodPost && len(names) > 2:
		// …/{id}/verb: the last "resource" is the verb.
		action = names[len(names)-1]
		names = names[:len(names)-1]
		if looksLikeCollection(action) {
			names, action = append(names, action), "create"
		}
	case len(parts)%2 == 1:
		action = "create"
	case method == http.MethodDelete:
		action = "delete"
	default:
		action = "update"
	}
	if len(names) > 5 {
		names = names[:5]
	}
	t := strings.Join(append(names, action), ".")
	if len(t) > 128 { // the ledger's limit: keep vendor, resource and action
		t = strings.Join([]string{names[0], names[1], action}, ".")
	}
	return t
}

// looksLikeCollection tells a nested collection (refunds, captures,
// sources) from a verb (capture, confirm): collections end in s.
func looksLikeCollection(s string) bool {
	return strings.HasSuffix(s, "s") && !strings.HasSuffix(s, "ss")
}

// jsonObject decodes a JSON object body, or nil.
func JSONObject(body []byte) map[string]any {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil
	}
	return m
}

// get walks nested objects and arrays ("purchase_units", "0", "amount").
func Get(v any, path ...string) any {
	for _, p := range path {
		switch t := v.(type) {
		case map[string]any:
			v = t[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(t) {
				return nil
			}
			v = t[i]
		default:
			return nil
		}
	}
	return v
}

// str returns a string at path, or "".
func Str(v any, path ...string) string {
	s, _ := Get(v, path...).(string)
	return s
}

// integer returns a whole number at path.
func Integer(v any, path ...string) (int64, bool) {
	switch n := Get(v, path...).(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case string: // form values
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// minorMoney reads an integer minor-unit amount and its currency.
func MinorMoney(v any, amount, currency []string) *Money {
	n, ok := Integer(v, amount...)
	c := Str(v, currency...)
	if !ok || n < 0 || len(c) != 3 {
		return nil
	}
	return &Money{Minor: n, Currency: strings.ToUpper(c)}
}

// MinorAmount reads an integer minor-unit amount and its currency, as
// MinorMoney does, and says why the request is refused when the amount is
// there but not a whole number (1000.0, 1e3, "ten", true, an object), or
// its currency is there but not a three-letter code: the vendor may read it
// all the same, and the money would pass every ceiling uncounted (a
// declared vendor's routes refuse the same, declared.go). An absent or null
// amount is no cost, as before; so is an absent currency (a refund or a
// capture names an amount in its payment's currency), and a negative
// amount, which the vendor refuses. The message names the field, never its
// value.
func MinorAmount(v any, amount, currency []string) (*Money, string) {
	val := Get(v, amount...)
	if val == nil {
		return nil, ""
	}
	field := strings.Join(amount, ".")
	amt := scalarText(val)
	if amt == "" {
		return nil, "the " + field + " field is not an amount; send a whole number of minor units"
	}
	if _, err := strconv.ParseInt(amt, 10, 64); err != nil {
		return nil, "the " + field + " field is not a whole number of minor units (e.g. 1000)"
	}
	if c := Get(v, currency...); c != nil && !currencyCodeRe.MatchString(scalarText(c)) {
		return nil, "the amount in " + field + " comes with a currency that is not a three-letter code"
	}
	return MinorMoney(v, amount, currency), ""
}

// DecimalAmount reads a major-unit decimal amount object ({"value":
// "10.00", "currency_code": "USD"}, PayPal's) and says why the request is
// refused when its value is there but not a plain decimal with the
// currency's digits, or comes without a three-letter currency code, as
// MinorAmount does for minor units.
func DecimalAmount(v any, value, currency string) (*Money, string) {
	val := Get(v, value)
	if val == nil {
		return nil, ""
	}
	cur := scalarText(Get(v, currency))
	if !currencyCodeRe.MatchString(cur) {
		return nil, "the amount comes without a three-letter " + currency
	}
	m, err := ParseDecimal(scalarText(val), cur)
	if err != nil {
		return nil, "the amount's " + value + " field is not a plain decimal in major units with the currency's digits (e.g. 10.00)"
	}
	return &m, ""
}

// scalarText is a JSON string or number as text, else "".
func scalarText(val any) string {
	switch x := val.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	return ""
}

// firstString returns the first non-empty string among paths.
func FirstString(v any, paths ...[]string) string {
	for _, p := range paths {
		if s := Str(v, p...); s != "" {
			return s
		}
	}
	return ""
}

// singleHeaders returns why a request is refused if one of the named
// headers (those that say whose call it is, or carry its key) comes more
// than once: Ratchet would scope by one value and forward them all.
func SingleHeaders(h http.Header, names ...string) string {
	for _, n := range names {
		if len(h.Values(n)) > 1 {
			return "the " + n + " header is sent more than once; send it once"
		}
	}
	return ""
}

// scopeOf names the account headers select, injectively: one header with
// one value is the value itself (as it always was, so keys made before
// stay the same); anything else starts with a newline, which no header
// value holds, and quotes each name and value.
func ScopeOf(h http.Header, names ...string) string {
	var parts []string
	for _, n := range names {
		for _, v := range h.Values(n) {
			parts = append(parts, n+"="+strconv.Quote(v))
		}
	}
	if len(parts) == 1 && len(h.Values(names[0])) == 1 && !strings.ContainsAny(h.Get(names[0]), "\r\n") {
		return h.Get(names[0])
	}
	if len(parts) == 0 {
		return ""
	}
	return "\n" + strings.Join(parts, "\n")
}

// bearerToken returns the token of an Authorization header with the
// Bearer scheme, which is case-insensitive (RFC 9110 11.1).
func BearerToken(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// isBasic reports whether an Authorization header uses the Basic scheme.
func IsBasic(authorization string) bool {
	scheme, _, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	return ok && strings.EqualFold(scheme, "basic")
}

// strictJSON returns why a JSON body is refused, or "": an empty body is
// fine; anything else must be exactly one JSON value with no object
// holding the same key twice, at any depth, compared as case-insensitive
// decoders compare them (Go's, .NET's). Parsers disagree about duplicates
// (the first wins, the last wins, or an error) and some are lenient about
// malformed JSON, so either would let Ratchet cost and scope one request
// while the vendor acts on another.
func StrictJSON(body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := strictValue(dec, "$"); err != "" {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "the JSON body has data after its value"
	}
	return ""
}

// strictValue reads one JSON value, refusing duplicate keys.
func strictValue(dec *json.Decoder, at string) string {
	tok, err := dec.Token()
	if err != nil {
		return "the body is not valid JSON"
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			name, ok := k.(string)
			if err != nil || !ok {
				return "the body is not valid JSON"
			}
			if f := foldKey(name); seen[f] {
				return fmt.Sprintf("the JSON body has the key %q twice in %s; send each key once", name, at)
			} else {
				seen[f] = true
			}
			if e := strictValue(dec, at+"."+name); e != "" {
				return e
			}
		}
		if _, err := dec.Token(); err != nil {
			return "the body is not valid JSON"
		}
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if e := strictValue(dec, at+"["+strconv.Itoa(i)+"]"); e != "" {
				return e
			}
		}
		if _, err := dec.Token(); err != nil {
			return "the body is not valid JSON"
		}
	}
	return ""
}

// foldKey maps a key to one spelling per case-insensitive class (each
// rune to the smallest of its Unicode simple folds, so K, k and the Kelvin
// sign are one).
func foldKey(s string) string {
	return strings.Map(func(r rune) rune {
		min := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f < min {
				min = f
			}
		}
		return min
	}, s)
}

// AddMoney adds m to total, for a request that moves money in more than one
// field (Square's tip_money on top of amount_money, PayPal's purchase
// units), and says why the request is refused when the two are in
// different currencies or their sum does not fit: counting one of them only
// would let the rest pass every ceiling uncounted. A nil m adds nothing.
func AddMoney(total, m *Money, field string) (*Money, string) {
	switch {
	case m == nil:
		return total, ""
	case total == nil:
		return m, ""
	case total.Currency != m.Currency:
		return nil, "the amount in " + field + " is in another currency than the request's other amounts; send one currency"
	case m.Minor > math.MaxInt64-total.Minor:
		return nil, "the amounts up to " + field + " add up to more than Ratchet can count"
	}
	return &Money{Minor: total.Minor + m.Minor, Currency: total.Currency}, ""
}
