package vendors

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Declared vendors. A Definition is a vendor the config file describes
// (the vendors: section, docs/proxy.md "Declared vendors"): any HTTP API
// that takes an idempotency key. Compile checks it and returns a Vendor
// that the ledger, the proxy, recovery and `ratchet policy explain` use as
// they use a built-in one. The YAML field names are part of Ratchet's
// interface: added, never renamed.
type Definition struct {
	// Name is what agents pass as "vendor" and the reverse proxy's path
	// prefix (/<name>/...): lowercase [a-z0-9_-], not a built-in's name.
	Name string `yaml:"name"`
	// Hosts are the API hosts the forward and transparent proxies
	// intercept (none: reverse mode only).
	Hosts []string `yaml:"hosts"`
	// Upstream is where the proxy sends the vendor's calls; a
	// proxy.upstreams entry of the same name overrides it.
	Upstream string       `yaml:"upstream"`
	Key      DefinedKey   `yaml:"key"`
	Account  *Account     `yaml:"account"`
	Routes   []Route      `yaml:"routes"`
	Outcome  OutcomeRules `yaml:"outcome"`
	Refusal  RefusalShape `yaml:"refusal"`
}

// DefinedKey says where a declared vendor takes its idempotency key.
type DefinedKey struct {
	// In is header or body (a top-level field of a JSON object body).
	In string `yaml:"in"`
	// Name is the header name or the body field.
	Name string `yaml:"name"`
	// MaxLength is the longest key the vendor accepts (at least 32:
	// Ratchet's keys are 32 or 36 characters).
	MaxLength int `yaml:"max_length"`
	// Alphabet lists the characters the vendor accepts, as ranges and
	// single characters ("A-Za-z0-9-"; a '-' first or last is itself);
	// empty: any. Ratchet's key is a UUID when it fits, else 32 hex digits.
	Alphabet string `yaml:"alphabet"`
	// Enforced: the vendor itself replays or refuses a reused key.
	Enforced bool `yaml:"enforced"`
	// Retention is how long the vendor keeps keys, in whole hours ("24h";
	// empty or 0: not published).
	Retention string `yaml:"retention"`
	// PerEndpoint: a key names a call on one endpoint only.
	PerEndpoint bool `yaml:"per_endpoint"`
}

// Account is what scopes a key to an account: a header or a body field
// (one of the two).
type Account struct {
	Header string `yaml:"header"`
	Field  string `yaml:"field"`
}

// Route maps a method and a path pattern to an effect.
type Route struct {
	Method string `yaml:"method"`
	// Path is a pattern: literal segments and {name}, which matches one
	// segment (/v2/payments/{id}/refunds).
	Path string `yaml:"path"`
	// EffectType is the type rules match (payment.charge, email.send...).
	EffectType string `yaml:"effect_type"`
	// Operation is the vendor's own name of the call (default: derived
	// from the path, as for built-in vendors); <name>. is prefixed when
	// missing.
	Operation string `yaml:"operation"`
	// FollowUp: a step of a payment created before, counted zero.
	FollowUp bool `yaml:"follow_up"`
	// Amount and Currency are where the body names what the call moves.
	Amount   *AmountField `yaml:"amount"`
	Currency *Field       `yaml:"currency"`
	// CostMicros is a fixed estimated cost per call in micro-USD, for a
	// call whose body names no amount (an email send): ceilings then
	// count calls.
	CostMicros *int64 `yaml:"cost_micros"`
	// Counterparty is the body field naming who the money goes to.
	Counterparty *Field `yaml:"counterparty"`
}

// Field names a JSON body field by a dotted path (amount.value; a number
// selects an array element: lines.0.amount), or a fixed value.
type Field struct {
	Field string `yaml:"field"`
	Value string `yaml:"value"`
}

// AmountField is an amount's field and unit: major (10.00, as a decimal
// string or a number) or minor (1000, an integer).
type AmountField struct {
	Field string `yaml:"field"`
	Unit  string `yaml:"unit"`
}

// OutcomeRules say how an upstream answer reads: statuses ("201") and
// classes ("2xx"); an exact status wins over a class, and a status none
// lists is unknown. A list left out takes its default: succeeded 2xx;
// unknown 408, 409, 425, 5xx; failed 4xx.
type OutcomeRules struct {
	Succeeded []string `yaml:"succeeded"`
	Unknown   []string `yaml:"unknown"`
	Failed    []string `yaml:"failed"`
	// ObjectID is the JSON field of a success body naming the object.
	ObjectID string `yaml:"object_id"`
	// Reason is the JSON field of an error body naming the error.
	Reason string `yaml:"reason"`
}

// RefusalShape is the vendor's error shape for Ratchet's refusals: a JSON
// template with {{status}}, {{code}} and {{message}} (JSON-string-escaped
// text, to be put inside quotes).
type RefusalShape struct {
	ContentType string `yaml:"content_type"`
	Body        string `yaml:"body"`
}

// FieldError is a problem in a definition, at a field path relative to
// the definition ("routes[1].path").
type FieldError struct {
	Path    string
	Message string
}

var (
	declaredNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	// effectNameRe is the ledger's rule for effect types and operations.
	effectNameRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*){1,5}$`)
	headerTokenRe = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	bodyFieldRe   = regexp.MustCompile(`^[A-Za-z0-9_$-]+$`)
	dottedRe      = regexp.MustCompile(`^[A-Za-z0-9_$-]+(\.[A-Za-z0-9_$-]+)*$`)
	segmentRe     = regexp.MustCompile(`^([A-Za-z0-9._~:@!$&'()*+,;=-]+|\{[a-z_][a-z0-9_]*\})$`)
	statusRe      = regexp.MustCompile(`^([1-5]xx|[1-5][0-9][0-9])$`)
	placeholderRe = regexp.MustCompile(`\{\{\s*([^}]*?)\s*\}\}`)
)

// Declared is a vendor compiled from a Definition.
type Declared struct {
	def     Definition
	rule    KeyRule
	routes  []route
	status  map[string]Result // "201", "2xx" → result
	uuid    bool              // the key is a UUID; else 32 hex digits
	upper   bool              // the key's hex digits are uppercase
	refusal string
	ctype   string
}

type route struct {
	Route
	method string
	parts  []string // "" for a {name} segment
}

var _ Vendor = (*Declared)(nil)

// Compile checks d and builds its vendor. builtin names the vendors the
// code knows (a declared one may take none of their names or hosts).
func Compile(d Definition, builtin *Registry) (*Declared, []FieldError) {
	var errs []FieldError
	add := func(path, format string, args ...any) {
		errs = append(errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	v := &Declared{def: d}
	switch _, known := builtin.Lookup(d.Name); {
	case d.Name == "":
		add("name", "is required")
	case len(d.Name) > 32 || !declaredNameRe.MatchString(d.Name):
		add("name", "%q must be lowercase letters, digits, '_' and '-' (at most 32)", d.Name)
	case known || d.Name == (Generic{}).Name():
		add("name", "%q is a built-in vendor's name; a declared vendor needs a name of its own", d.Name)
	}
	for i, h := range d.Hosts {
		p := fmt.Sprintf("hosts[%d]", i)
		if !IsHostName(h) {
			add(p, "%q is not a lowercase host name (no scheme, port or wildcard)", h)
		} else if o, ok := builtin.ForHost(h); ok {
			add(p, "%q is %s's host already", h, o.Name())
		}
	}
	if d.Upstream == "" {
		add("upstream", "is required: the vendor's API base URL (e.g. https://api.example.com)")
	} else if !isHTTPURL(d.Upstream) {
		add("upstream", "%q is not an http(s) URL", d.Upstream)
	}
	v.compileKey(add)
	if a := d.Account; a != nil {
		switch {
		case (a.Header == "") == (a.Field == ""):
			add("account", "needs exactly one of header and field")
		case a.Header != "" && !headerTokenRe.MatchString(a.Header):
			add("account.header", "%q is not a header name", a.Header)
		case a.Field != "" && !dottedRe.MatchString(a.Field):
			add("account.field", "%q is not a dotted JSON field path (e.g. account.id)", a.Field)
		}
	}
	v.compileRoutes(add)
	v.compileOutcome(add)
	v.compileRefusal(add)
	if len(errs) > 0 {
		return nil, errs
	}
	return v, nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Host != "" && (u.Scheme == "http" || u.Scheme == "https")
}

func (v *Declared) compileKey(add func(path, format string, args ...any)) {
	k := v.def.Key
	v.rule = KeyRule{Name: k.Name, MaxLen: k.MaxLength, Enforced: k.Enforced, PerEndpoint: k.PerEndpoint}
	switch k.In {
	case "header":
		v.rule.Location = InHeader
		if !headerTokenRe.MatchString(k.Name) {
			add("key.name", "%q is not a header name", k.Name)
		} else if reservedHeader(k.Name) {
			add("key.name", "%q cannot carry the key: the proxy strips it (hop-by-hop or Ratchet's own) or it carries the credentials or the body's framing, "+
				"so the vendor would get the call without Ratchet's key", k.Name)
		}
	case "body":
		v.rule.Location = InBody
		if !bodyFieldRe.MatchString(k.Name) {
			add("key.name", "%q is not a top-level JSON field name (the key is written at the top of the body)", k.Name)
		}
	default:
		add("key.in", "%q must be header or body", k.In)
	}
	if k.MaxLength < 32 || k.MaxLength > 4096 {
		add("key.max_length", "%d must be between 32 and 4096: Ratchet's keys are 32 or 36 characters", k.MaxLength)
	}
	allowed, err := parseAlphabet(k.Alphabet)
	if err != "" {
		add("key.alphabet", "%s", err)
	}
	digits := allowed.all("0123456789")
	lower, upper := allowed.all("abcdef"), allowed.all("ABCDEF")
	if err == "" && (!digits || (!lower && !upper)) {
		add("key.alphabet", "%q must allow the digits and a-f or A-F: Ratchet's keys are hex digits (a UUID where '-' is allowed too)", k.Alphabet)
	}
	v.upper = !lower && upper
	v.uuid = !v.upper && allowed.all("-") && k.MaxLength >= 36
	if k.Retention != "" && k.Retention != "0" {
		d, err := time.ParseDuration(k.Retention)
		if err != nil || d < 0 || d%time.Hour != 0 {
			add("key.retention", "%q must be a whole number of hours (e.g. 24h), or 0 when the vendor publishes none", k.Retention)
		} else {
			v.rule.RetentionHours = int(d / time.Hour)
		}
	}
}

// reservedHeader reports whether a header cannot carry a key: the
// hop-by-hop ones (RFC 9110 7.6.1, which httputil.ReverseProxy drops after
// the stamp), Ratchet's own (never forwarded), and those whose value is
// the request's credentials, host or framing.
func reservedHeader(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding",
		"Upgrade", "Authorization", "Host", "Content-Length", "Content-Type", "Content-Encoding", "Cookie":
		return true
	}
	return strings.HasPrefix(http.CanonicalHeaderKey(name), "Ratchet-")
}

// alphabet is a set of ASCII characters; nil allows every character.
type alphabet []bool

func (a alphabet) all(s string) bool {
	for i := 0; i < len(s); i++ {
		if a != nil && !a[s[i]] {
			return false
		}
	}
	return true
}

// parseAlphabet reads "A-Za-z0-9-": ranges and single printable ASCII
// characters; a '-' first or last stands for itself.
func parseAlphabet(s string) (alphabet, string) {
	if s == "" {
		return nil, ""
	}
	a := make(alphabet, 128)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f {
			return nil, fmt.Sprintf("%q: only printable ASCII characters and ranges (A-Z) may be listed", s)
		}
		if i+2 < len(s) && s[i+1] == '-' {
			hi := s[i+2]
			if hi < c || hi >= 0x7f {
				return nil, fmt.Sprintf("%q: the range %c-%c is backwards", s, c, hi)
			}
			for x := c; x <= hi; x++ {
				a[x] = true
			}
			i += 2
			continue
		}
		a[c] = true
	}
	return a, ""
}

func (v *Declared) compileRoutes(add func(path, format string, args ...any)) {
	seen := map[string]int{}
	for i, r := range v.def.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		rt := route{Route: r, method: strings.ToUpper(r.Method)}
		if !Mutating(rt.method) {
			add(p+".method", "%q must be POST, PUT, PATCH or DELETE (reads are never effects)", r.Method)
		}
		badPath := false
		if !strings.HasPrefix(r.Path, "/") {
			add(p+".path", "%q must start with /", r.Path)
			badPath = true
		} else {
			for _, s := range strings.Split(strings.TrimPrefix(r.Path, "/"), "/") {
				if !segmentRe.MatchString(s) {
					add(p+".path", "%q: the segment %q is not a literal path segment or {name}", r.Path, s)
					badPath = true
					break
				}
				if strings.HasPrefix(s, "{") {
					s = ""
				}
				rt.parts = append(rt.parts, s)
			}
		}
		// A bad path (cut short at its bad segment) is no route to compare.
		if sig := rt.method + " " + strings.ToLower(strings.Join(rt.parts, "/")); !badPath { // paths match in any case
			if j, dup := seen[sig]; dup {
				add(p+".path", "%s %s is routes[%d]'s already", rt.method, r.Path, j)
			}
			seen[sig] = i
		}
		if r.EffectType == "" {
			add(p+".effect_type", "is required (payment.charge, email.send, ...)")
		} else if len(r.EffectType) > 128 || !effectNameRe.MatchString(r.EffectType) {
			add(p+".effect_type", "%q must be dot-separated lowercase words, e.g. payment.charge", r.EffectType)
		}
		if r.Operation != "" {
			if !strings.HasPrefix(r.Operation, v.def.Name+".") {
				rt.Operation = v.def.Name + "." + r.Operation
			}
			if len(rt.Operation) > 128 || !effectNameRe.MatchString(rt.Operation) {
				add(p+".operation", "%q must be dot-separated lowercase words, e.g. payments.create", r.Operation)
			}
		}
		if a := r.Amount; a != nil {
			if !dottedRe.MatchString(a.Field) {
				add(p+".amount.field", "%q is not a dotted JSON field path (e.g. amount.value)", a.Field)
			}
			if a.Unit != "major" && a.Unit != "minor" {
				add(p+".amount.unit", "%q must be major (10.00) or minor (1000)", a.Unit)
			}
			if r.Currency == nil {
				add(p+".currency", "is required with amount")
			}
			if r.CostMicros != nil {
				add(p+".cost_micros", "is for calls without an amount; give one of amount and cost_micros")
			}
		}
		checkField := func(path string, f *Field, fixedOK bool) {
			switch {
			case f == nil:
			case (f.Field == "") == (f.Value == ""):
				add(path, "needs exactly one of field and value")
			case f.Value != "" && !fixedOK:
				add(path, "takes a field, not a value")
			case f.Field != "" && !dottedRe.MatchString(f.Field):
				add(path+".field", "%q is not a dotted JSON field path", f.Field)
			}
		}
		checkField(p+".currency", r.Currency, true)
		if c := r.Currency; c != nil && c.Value != "" && !regexp.MustCompile(`^[A-Za-z]{3}$`).MatchString(c.Value) {
			add(p+".currency.value", "%q is not a three-letter currency code", c.Value)
		}
		if r.Currency != nil && r.Amount == nil {
			add(p+".amount", "is required with currency")
		}
		checkField(p+".counterparty", r.Counterparty, false)
		if c := r.CostMicros; c != nil && *c < 0 {
			add(p+".cost_micros", "must be >= 0")
		}
		v.routes = append(v.routes, rt)
	}
}

func (v *Declared) compileOutcome(add func(path, format string, args ...any)) {
	o := v.def.Outcome
	lists := []struct {
		name string
		vals []string
		def  []string
		r    Result
	}{
		{"succeeded", o.Succeeded, []string{"2xx"}, Succeeded},
		{"unknown", o.Unknown, []string{"408", "409", "425", "5xx"}, Unknown},
		{"failed", o.Failed, []string{"4xx"}, Failed},
	}
	v.status = map[string]Result{}
	where := map[string]string{}
	for _, l := range lists {
		vals := l.vals
		if vals == nil {
			vals = l.def
		}
		for i, s := range vals {
			p := fmt.Sprintf("outcome.%s[%d]", l.name, i)
			s = strings.ToLower(s)
			if !statusRe.MatchString(s) {
				add(p, "%q is not a status (201) or a class (2xx)", s)
				continue
			}
			if w, dup := where[s]; dup {
				add(p, "%q is listed under %s already", s, w)
				continue
			}
			if l.r == Failed && s[0] == '5' {
				// failed frees the key for a new attempt, which a vendor
				// that acted before its 5xx would perform again.
				add(p, "%q cannot be failed: a 5xx answer may come after the vendor acted, and a failed call is one a retry performs again; "+
					"list it under unknown (or succeeded, where the vendor documents it as done)", s)
				continue
			}
			where[s], v.status[s] = l.name, l.r
		}
	}
	if o.ObjectID != "" && !dottedRe.MatchString(o.ObjectID) {
		add("outcome.object_id", "%q is not a dotted JSON field path", o.ObjectID)
	}
	if o.Reason != "" && !dottedRe.MatchString(o.Reason) {
		add("outcome.reason", "%q is not a dotted JSON field path", o.Reason)
	}
}

func (v *Declared) compileRefusal(add func(path, format string, args ...any)) {
	r := v.def.Refusal
	v.ctype = r.ContentType
	if v.ctype == "" {
		v.ctype = "application/json"
	}
	if strings.ContainsAny(v.ctype, "\r\n") || !strings.Contains(v.ctype, "/") {
		add("refusal.content_type", "%q is not a media type", r.ContentType)
	}
	v.refusal = r.Body
	if v.refusal == "" {
		v.refusal = `{"error": {"code": "{{code}}", "message": "{{message}}"}}`
	}
	for _, m := range placeholderRe.FindAllStringSubmatch(v.refusal, -1) {
		switch m[1] {
		case "status", "code", "message":
		default:
			add("refusal.body", "{{%s}} is not a placeholder: use {{status}}, {{code}} and {{message}}", m[1])
			return
		}
	}
	if sample := v.render(409, RefusalBlocked, "a \"quoted\"\nmessage \\ <tag>"); !json.Valid(sample) {
		add("refusal.body", "is not valid JSON once filled in (put {{code}} and {{message}} inside quotes, {{status}} outside): %s", sample)
	}
}

// render fills the refusal template.
func (v *Declared) render(status int, code, message string) []byte {
	esc := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b[1 : len(b)-1])
	}
	return []byte(placeholderRe.ReplaceAllStringFunc(v.refusal, func(m string) string {
		switch placeholderRe.FindStringSubmatch(m)[1] {
		case "status":
			return strconv.Itoa(status)
		case "code":
			return esc(code)
		case "message":
			return esc(message)
		}
		return m
	}))
}

// Definition returns what v was compiled from.
func (v *Declared) Definition() Definition { return v.def }

// Name implements Vendor.
func (v *Declared) Name() string { return v.def.Name }

// Hosts implements Vendor.
func (v *Declared) Hosts() []string { return v.def.Hosts }

// KeyRule implements Vendor.
func (v *Declared) KeyRule() KeyRule { return v.rule }

// Upstream is the vendor's default upstream (Upstreamer).
func (v *Declared) Upstream() string { return v.def.Upstream }

// ShapeKey implements KeyShaper: a UUID where the vendor's alphabet and
// length allow one, else 32 hex digits in the case it allows.
func (v *Declared) ShapeKey(digest []byte) string {
	u := uuidV8(digest)
	if v.uuid {
		return u
	}
	h := strings.ReplaceAll(u, "-", "")
	if v.upper {
		h = strings.ToUpper(h)
	}
	return h
}

// Classify implements Vendor: a mutating request is an effect; a listed
// route names its type, amount and counterparty, any other call is typed
// by its path as a built-in vendor's unlisted calls are.
func (v *Declared) Classify(r *Request) (Effect, bool) {
	if !Mutating(r.Method) {
		return Effect{}, false
	}
	parts := Segments(r.Path)
	e := Effect{Key: v.rule, Credential: r.Header.Get("Authorization"),
		Refuse: SingleHeaders(r.Header, "Authorization", v.rule.Name)}
	if a := v.def.Account; a != nil && a.Header != "" {
		e.Scope = ScopeOf(r.Header, a.Header)
		if e.Refuse == "" {
			e.Refuse = SingleHeaders(r.Header, a.Header)
		}
	}
	if e.Refuse == "" {
		e.Refuse = SingleHeaders(r.Header, "Content-Type")
	}
	if e.Refuse == "" {
		e.Refuse = jsonTyped(r.Header.Get("Content-Type"), r.Body)
	}
	if e.Refuse == "" {
		e.Refuse = StrictJSON(r.Body)
	}
	body := JSONObject(r.Body)
	if v.rule.Location == InHeader {
		e.CallerKey = r.Header.Get(v.rule.Name)
	} else {
		e.CallerKey = Str(body, v.rule.Name)
		if name, ok := foldMember(body, v.rule.Name); ok && name != v.rule.Name && e.Refuse == "" {
			// A vendor whose decoder matches names in any case reads it
			// as its key, after the one Ratchet stamps.
			e.Refuse = fmt.Sprintf("the body names its idempotency key %q; send it as %q", name, v.rule.Name)
		}
	}
	if a := v.def.Account; a != nil && a.Field != "" {
		e.Merchant = fieldString(body, a.Field)
	}
	rt, ok := v.match(r.Method, parts)
	if e.Refuse == "" {
		e.Refuse = queryNamesBodyField(r.Query, v.bodyFields(rt, ok))
	}
	if !ok {
		e.Operation = RestType(v.def.Name, r.Method, unversioned(parts))
		e.EffectType = e.Operation
		return e, true
	}
	e.Operation = rt.Operation
	if e.Operation == "" {
		e.Operation = RestType(v.def.Name, r.Method, unversioned(parts))
	}
	e.EffectType, e.FollowUp = rt.EffectType, rt.FollowUp
	if rt.Amount != nil {
		e.Money = declaredMoney(body, rt.Amount, rt.Currency)
		if e.Refuse == "" {
			e.Refuse = amountProblem(body, rt.Amount, rt.Currency)
		}
	}
	if rt.CostMicros != nil {
		c := *rt.CostMicros
		e.CostMicros = &c
	}
	if rt.Counterparty != nil {
		e.Counterparty = fieldString(body, rt.Counterparty.Field)
	}
	return e, true
}

// versionRe is an API version path segment (v2, v1.1).
var versionRe = regexp.MustCompile(`^v[0-9]+(\.[0-9]+)?$`)

// unversioned drops a leading version segment, which names no resource.
func unversioned(parts []string) []string {
	if len(parts) > 1 && versionRe.MatchString(parts[0]) {
		return parts[1:]
	}
	return parts
}

// match finds the first route for method and path. A literal segment
// matches in any case, and the last one with a format suffix too
// (/payments.json): servers that read paths so (Express by default; Rails
// takes .json as the format) would otherwise act on a call Ratchet types
// by its path only, outside the route's effect type and its ceilings. A
// server that does not only answers 404 to what Ratchet counted.
func (v *Declared) match(method string, parts []string) (route, bool) {
	for _, rt := range v.routes {
		if rt.method != method || len(rt.parts) != len(parts) {
			continue
		}
		ok := true
		for i, s := range rt.parts {
			if s != "" && !segmentMatches(s, parts[i], i == len(parts)-1) {
				ok = false
				break
			}
		}
		if ok {
			return rt, true
		}
	}
	return route{}, false
}

func segmentMatches(literal, seg string, last bool) bool {
	if strings.EqualFold(literal, seg) {
		return true
	}
	return last && len(seg) > len(literal)+1 && seg[len(literal)] == '.' && strings.EqualFold(seg[:len(literal)], literal)
}

// jsonTyped returns why a body is refused for its Content-Type: a
// declared vendor's routes read JSON, and a body sent as a form, or with
// no type (Rack reads an untyped POST as a form), can be JSON to Ratchet
// (a JSON string "x&amount=1500&y", or an object with such a string in it)
// and a form naming an amount to the vendor's server.
func jsonTyped(ctype string, body []byte) string {
	if len(bytes.TrimSpace(body)) == 0 {
		return ""
	}
	if ctype == "" {
		return "the body comes without a Content-Type; send it as application/json"
	}
	mt, _, err := mime.ParseMediaType(ctype)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return "the body is sent as " + strconv.Quote(printableType(ctype)) + "; this vendor's calls are read as JSON: send application/json"
	}
	return ""
}

// printableType shortens a caller's Content-Type for a message.
func printableType(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

// bodyFields are the top-level body fields Ratchet reads for a call: the
// key (in the body), the account field, and the matched route's amount,
// currency and counterparty.
func (v *Declared) bodyFields(rt route, matched bool) []string {
	var out []string
	top := func(path string) {
		if path != "" {
			out = append(out, strings.Split(path, ".")[0])
		}
	}
	if v.rule.Location == InBody {
		top(v.rule.Name)
	}
	if a := v.def.Account; a != nil {
		top(a.Field)
	}
	if matched {
		if rt.Amount != nil {
			top(rt.Amount.Field)
		}
		for _, f := range []*Field{rt.Currency, rt.Counterparty} {
			if f != nil {
				top(f.Field)
			}
		}
	}
	return out
}

// queryNamesBodyField returns why a request is refused when its query
// string names a field Ratchet reads from the body (amount, amount[value],
// amount.value, in any case): Rack and Laravel merge a POST's query
// parameters into its body's, so the vendor would act on an amount,
// account or key Ratchet never read.
func queryNamesBodyField(query string, fields []string) string {
	if query == "" || len(fields) == 0 {
		return ""
	}
	for _, pair := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(pair, "=")
		if u, err := url.QueryUnescape(name); err == nil {
			name = u
		}
		if i := strings.IndexAny(name, "[."); i >= 0 {
			name = name[:i]
		}
		for _, f := range fields {
			if foldKey(name) == foldKey(f) {
				return "the query string names " + strconv.Quote(f) + ", which Ratchet reads from the body; send it in the body only"
			}
		}
	}
	return ""
}

// foldMember returns the name of m's member that equals name in any case
// (StrictJSON has refused a body with two).
func foldMember(m map[string]any, name string) (string, bool) {
	if _, ok := m[name]; ok {
		return name, true
	}
	f := foldKey(name)
	for k := range m {
		if foldKey(k) == f {
			return k, true
		}
	}
	return "", false
}

// getField walks a dotted path as Get does, matching each object member's
// name in any case when no member has it exactly: a vendor whose decoder
// matches names in any case (Go's, ASP.NET's) reads {"Amount": ...} as
// the amount, which would otherwise pass uncounted.
func getField(body any, path string) any {
	v := body
	for _, p := range strings.Split(path, ".") {
		if m, ok := v.(map[string]any); ok {
			name, found := foldMember(m, p)
			if !found {
				return nil
			}
			v = m[name]
			continue
		}
		v = Get(v, p)
	}
	return v
}

// fieldString reads a dotted path as a string (a number as its text).
func fieldString(body any, path string) string {
	return scalarText(getField(body, path))
}

// declaredMoney reads an amount in its unit; nil when it is absent or not
// an amount (then no cost is declared, as for a built-in vendor).
func declaredMoney(body any, a *AmountField, c *Field) *Money {
	cur := c.Value
	if c.Field != "" {
		cur = fieldString(body, c.Field)
	}
	amt := fieldString(body, a.Field)
	if len(cur) != 3 || amt == "" {
		return nil
	}
	if a.Unit == "minor" {
		n, err := strconv.ParseInt(amt, 10, 64)
		if err != nil || n < 0 {
			return nil
		}
		return &Money{Minor: n, Currency: strings.ToUpper(cur)}
	}
	m, err := ParseDecimal(amt, cur)
	if err != nil {
		return nil
	}
	return &m
}

// amountProblem says why a route's amount is refused: it is there but not
// in a form Ratchet reads (25000.0 or 2.5e4 minor units, " 10.00" or "1e1"
// major ones, a currency that is not a code, or none). The vendor may read
// it all the same (many parsers take 25000.0 for 25000), and the money
// would then pass every ceiling uncounted. A call that names no amount
// (the field absent or null) and a negative minor amount (a debit, as
// Increase's ACH transfers take) are not refused: they declare no cost, as
// before. The message names the field, never its value.
func amountProblem(body any, a *AmountField, c *Field) string {
	if getField(body, a.Field) == nil {
		return ""
	}
	amt := fieldString(body, a.Field)
	if amt == "" {
		return "the " + a.Field + " field is not an amount; send a number or a decimal string"
	}
	cur := c.Value
	if c.Field != "" {
		cur = fieldString(body, c.Field)
	}
	if !currencyCodeRe.MatchString(cur) {
		return "the amount in " + a.Field + " comes without a three-letter currency code"
	}
	if a.Unit == "minor" {
		if _, err := strconv.ParseInt(amt, 10, 64); err != nil {
			return "the " + a.Field + " field is not a whole number of minor units (e.g. 1000)"
		}
		return ""
	}
	if _, err := ParseDecimal(amt, cur); err != nil {
		return "the " + a.Field + " field is not a plain decimal in major units with the currency's digits (e.g. 10.00)"
	}
	return ""
}

var currencyCodeRe = regexp.MustCompile(`^[A-Za-z]{3}$`)

// Outcome implements Vendor with the definition's status lists.
func (v *Declared) Outcome(r *Response) Outcome {
	res, ok := v.status[strconv.Itoa(r.Status)]
	if !ok {
		res, ok = v.status[strconv.Itoa(r.Status/100)+"xx"]
	}
	if !ok {
		res = Unknown
	}
	body := JSONObject(r.Body)
	o := Outcome{Result: res}
	if v.def.Outcome.ObjectID != "" {
		o.VendorReference = fieldString(body, v.def.Outcome.ObjectID)
	} else {
		o.VendorReference = Str(body, "id")
	}
	if res != Succeeded && v.def.Outcome.Reason != "" {
		o.Reason = fieldString(body, v.def.Outcome.Reason)
	}
	return o
}

// Refusal implements Vendor with the definition's template.
func (v *Declared) Refusal(status int, code, message string) Reply {
	return Reply{Status: status, Header: http.Header{"Content-Type": {v.ctype}}, Body: v.render(status, code, message)}
}
