// Package stripe is what Ratchet knows about Stripe: where it takes an
// idempotency key, which requests are effects and what they cost, how its
// answers read, its error shape, what the adapters ask of it, and how its
// signed webhooks verify and read (webhook.go).
package stripe

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Vendor is Stripe: api.stripe.com.
//
// Sources: https://docs.stripe.com/api/idempotent_requests — header
// Idempotency-Key on every POST (on GET and DELETE it "has no effect"), at
// most 255 characters, keys may be pruned once at least 24 hours old, a
// replay returns the saved response with Idempotent-Replayed: true; 409
// idempotency_key_in_use while the first request is in progress.
// https://docs.stripe.com/error-handling — 429 and most 400s are answered
// before anything executes; 402 is a processed request that failed (a
// decline); 5xx and network errors are ambiguous. v1 bodies are
// form-encoded; v2 (/v2/...) bodies are JSON and also take the key on DELETE.
// A key reused on another endpoint is an error
// (https://docs.stripe.com/changelog/2015-09-03), so keys are not per
// endpoint. The account a call acts for is the API key's, or the connected
// account named by Stripe-Account or Stripe-Context
// (https://docs.stripe.com/context); Stripe-Account alone scopes as its
// value, anything else (Stripe-Context, or a header twice) by an injective
// encoding of every value (scopeOf). The API key always scopes: it is
// static (a rolled key starts a new scope). stripe-go sends a key it
// mints for every POST (NewIdempotencyKey: UnixNano, "_", six base64url
// characters) and stripe-node one prefixed stripe-node-retry- when retries
// are on; such keys say nothing about two calls being one (KeyFromSDK), so
// the call is keyed by content, but a stripe-go key carries the time it
// was minted (KeyMinted) and the proxy keys it in the window that
// time falls in: the SDK's retries of one call, and an application's own
// retry with a key it minted that way and kept, are that call however
// late they come, while a new call (a new key) for identical content
// within the window is still a duplicate. Rack, Stripe's form parser,
// keeps the last value of a repeated field and merges a POST's query
// string into its parameters: a repeated field that is not an array
// (name[]), a form that does not parse, a query string on a POST, and a
// repeated Stripe-Account, Stripe-Context, Authorization or
// Idempotency-Key header are refused (Effect.Refuse), never costed or
// scoped by one reading and sent for another. SDKs honour
// Stripe-Should-Retry: false, which Ratchet sends where a retry can only
// be refused again.
type Vendor struct{}

var _ vendors.Vendor = Vendor{}

// Name implements Vendor.
func (Vendor) Name() string { return "stripe" }

// Hosts implements Vendor.
func (Vendor) Hosts() []string { return []string{"api.stripe.com"} }

// KeyRule implements Vendor.
func (Vendor) KeyRule() vendors.KeyRule {
	return vendors.KeyRule{Location: vendors.InHeader, Name: "Idempotency-Key", MaxLen: 255, Enforced: true, RetentionHours: 24}
}

// stripeGoKey is the shape of the key stripe-go mints for a call.
var stripeGoKey = regexp.MustCompile(`^[0-9]{19}_[A-Za-z0-9_-]{6}$`)

// stripeKeyFromSDK reports whether an Idempotency-Key is one a Stripe SDK
// minted for a single call.
func stripeKeyFromSDK(k string) bool {
	return strings.HasPrefix(k, "stripe-node-retry-") || stripeGoKey.MatchString(k)
}

// stripeScope names the account a request acts for beyond the API key's:
// Stripe-Account alone as it always was; with Stripe-Context, or either
// repeated, an injective encoding of every value (scopeOf), so that no two
// selections of accounts share a scope.
func stripeScope(h http.Header) string {
	return vendors.ScopeOf(h, "Stripe-Account", "Stripe-Context")
}

// KeyMinted returns the time a stripe-go key (NewIdempotencyKey:
// UnixNano, "_", six characters) was minted, which it carries.
func KeyMinted(k string) (time.Time, bool) {
	if !stripeGoKey.MatchString(k) {
		return time.Time{}, false
	}
	n, err := strconv.ParseInt(k[:19], 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// stripeNamespaces are path prefixes that group resources
// (/v1/checkout/sessions); the resource is namespace_resource.
var stripeNamespaces = map[string]bool{
	"apps": true, "billing": true, "billing_portal": true, "checkout": true, "climate": true,
	"entitlements": true, "financial_connections": true, "forwarding": true, "identity": true,
	"issuing": true, "radar": true, "reporting": true, "tax": true, "terminal": true,
	"test_helpers": true, "treasury": true,
}

// Classify implements Vendor.
func (s Vendor) Classify(r *vendors.Request) (vendors.Effect, bool) {
	return vendors.Typed(s.classify(r))
}

func (s Vendor) classify(r *vendors.Request) (vendors.Effect, bool) {
	parts := vendors.Segments(r.Path)
	if !vendors.Mutating(r.Method) || len(parts) < 2 || (parts[0] != "v1" && parts[0] != "v2") {
		return vendors.Effect{}, false
	}
	v2 := parts[0] == "v2"
	res := parts[1:]
	if (v2 || stripeNamespaces[res[0]]) && len(res) > 1 {
		res = append([]string{res[0] + "_" + res[1]}, res[2:]...)
	}
	e := vendors.Effect{Operation: vendors.RestType("stripe", r.Method, res), CallerKey: r.Header.Get("Idempotency-Key"),
		Scope: stripeScope(r.Header), Credential: r.Header.Get("Authorization"),
		Refuse: vendors.SingleHeaders(r.Header, "Stripe-Account", "Stripe-Context", "Authorization", "Idempotency-Key")}
	e.KeyFromSDK = stripeKeyFromSDK(e.CallerKey)
	e.KeyMinted, _ = KeyMinted(e.CallerKey)
	if r.Method == http.MethodPost || (v2 && r.Method == http.MethodDelete) {
		e.Key = s.KeyRule()
	}
	var body any
	if v2 {
		if e.Refuse == "" {
			e.Refuse = vendors.StrictJSON(r.Body)
		}
		body = vendors.JSONObject(r.Body)
		money, refuse := vendors.MinorAmount(body, []string{"amount", "value"}, []string{"amount", "currency"})
		e.Money = money
		e.RefuseFor(refuse)
		e.Counterparty = vendors.FirstString(body, []string{"to", "recipient"}, []string{"customer"})
		return e, true
	}
	form, err := url.ParseQuery(string(r.Body))
	if err != nil && e.Refuse == "" {
		// Rack reads what Go does not (a ';' separator, a bad escape):
		// nothing could be costed as Stripe would read it.
		e.Refuse = "the form body does not parse: " + err.Error()
	}
	if err == nil {
		e.Form = form
	}
	if e.Refuse == "" {
		e.Refuse = repeatedFormField(form)
	}
	if e.Refuse == "" && r.Query != "" && r.Method == http.MethodPost {
		// Rack merges query parameters into a POST's: an amount there
		// would be charged and not costed. (The SDKs put a DELETE's
		// parameters in the query; a POST's always in the body.)
		e.Refuse = "a POST carries its parameters in the body, not the query string"
	}
	body = formMap(form)
	money, refuse := vendors.MinorAmount(body, []string{"amount"}, []string{"currency"})
	e.Money = money
	e.RefuseFor(refuse)
	e.Counterparty = vendors.FirstString(body, []string{"transfer_data[destination]"}, []string{"destination"},
		[]string{"customer"}, []string{"on_behalf_of"})
	return e, true
}

// formMap turns form values into the map shape get reads: the last value
// of a repeated field, as Stripe's parser (Rack) keeps it.
func formMap(form url.Values) map[string]any {
	m := make(map[string]any, len(form))
	for k, v := range form {
		if len(v) > 0 {
			m[k] = v[len(v)-1]
		}
	}
	return m
}

// repeatedFormField returns why a form body is refused when a field other
// than an array ("expand[]") comes twice: amount=100&amount=6000000 is
// one amount to one parser and another to the next, so it is never
// costed, scoped or sent.
func repeatedFormField(form url.Values) string {
	var names []string
	for k, v := range form {
		if len(v) > 1 && !strings.HasSuffix(k, "[]") {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	return fmt.Sprintf("the form field %q is sent more than once; a field that is not an array (name[]) must be sent once", names[0])
}

// outcomeFields are what Outcome reads of an answer: the object's id, the
// error's code and type, and a declined payment's id.
var outcomeFields = [][]string{{"id"}, {"error", "code"}, {"error", "type"}, {"error", "payment_intent", "id"}}

// Outcome implements Vendor.
func (Vendor) Outcome(r *vendors.Response) vendors.Outcome {
	body := vendors.ReadFields(r.Body, outcomeFields...)
	o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: body.Str(0)}
	code := body.First(1, 2)
	switch {
	case o.Result == vendors.Succeeded && strings.EqualFold(r.Header.Get("Idempotent-Replayed"), "true"):
		o.Reason = "replayed by Stripe"
	case r.Status == http.StatusConflict:
		o.Reason = "a request with this key is in progress at Stripe (" + code + ")"
	case o.Result != vendors.Succeeded:
		o.Reason = code
		if id := body.Str(3); id != "" {
			o.VendorReference = id
		}
	}
	return o
}

// Refusal implements Vendor: Stripe's {"error": {type, code, message}},
// which stripe-go turns into a *stripe.Error (a conflict into a
// *stripe.IdempotencyError, as Stripe's own). stripe-go and stripe-node
// retry a 409 and a 5xx unless told Stripe-Should-Retry: false, which a
// blocked call, one performed already and one whose outcome is unknown
// get: their retries could only be refused again.
func (Vendor) Refusal(status int, code, message string) vendors.Reply {
	typ := "invalid_request_error"
	if code == vendors.RefusalConflict {
		typ = "idempotency_error"
	}
	r := vendors.Reply{Status: status, Body: vendors.ErrorJSON(map[string]any{"error": map[string]any{
		"type": typ, "code": code, "message": message,
	}})}
	switch code {
	case vendors.RefusalBlocked, vendors.RefusalDuplicate, vendors.RefusalUnknown:
		r.Header = http.Header{"Stripe-Should-Retry": {"false"}}
	}
	return r
}

// StoredFailure implements Recoverable. Stripe keeps "the status code and
// body of the first request made with a given idempotency key after
// endpoint execution begins", not a request that failed validation or
// conflicted, and its rate limiters and authentication run before the
// idempotency layer (https://docs.stripe.com/api/idempotent_requests,
// https://docs.stripe.com/error-low-level). So a 4xx is the key's result
// when Stripe says it replayed it (Idempotent-Replayed: true), or when it
// is a 402, "the parameters were valid but the request failed" (a
// decline): an executed request under this key, which is either the first
// one's (then replayed) or the only one.
func (Vendor) StoredFailure(r *vendors.Response) bool {
	replayed := strings.EqualFold(r.Header.Get("Idempotent-Replayed"), "true")
	return r.Status >= 400 && r.Status < 500 && (replayed || r.Status == http.StatusPaymentRequired)
}

// RequestIDHeader implements Recoverable.
func (Vendor) RequestIDHeader() string { return "Request-Id" }

// Upstream implements Upstreamer.
func (Vendor) Upstream() string { return "https://api.stripe.com" }
