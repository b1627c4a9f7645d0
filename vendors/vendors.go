// Package vendors holds the pure rules Ratchet knows about each payment vendor:
// where the vendor takes an idempotency key, how long and from which alphabet,
// whether it enforces it and how long it remembers it.
//
// The package does no I/O. The ledger uses it to shape the vendor key it hands
// out with an execute decision; the proxy uses the same rules to stamp requests.
// Each built-in vendor is a package under vendors/ (vendors/stripe, …)
// holding everything Ratchet knows about it, listed once in vendors/all; a
// vendor the config declares (declared.go) is compiled from its definition
// and joins them in a Registry, which the ledger, the proxy and recovery
// are given. This package holds what they share: the Vendor interface and
// the optional ones adapters ask (Tagger, Recoverable, Upstreamer,
// KeyShaper), what the webhooks adapter asks of a vendor's webhooks
// (webhook.go: WebhookConfig, Receiver, Event), the request and answer
// types, the taxonomy, and the helpers vendor packages read requests with
// (request.go, tag.go).
//
// Outcomes. "failed" means the vendor definitely did not act, so a new
// attempt with a new key is safe; "unknown" means it may have. Every vendor
// starts from the same rule (byStatus: 2xx succeeded; 408, 409, 5xx unknown;
// other 4xx failed) and adds what its documentation says (Adyen's refused
// 200s, Stripe's in-progress 409, Adyen's 704 and 703 codes). The built-in
// rules read an answer with ReadFields (fields.go), which reads only the
// paths a rule names and reads them exactly as Get of JSONObject's map
// would (TestReadFieldsIsJSONObjectsReading, FuzzReadFields); what every
// rule makes of every answer shape is pinned in testdata/outcomes.golden,
// and a change there is a change of classification.
//
// Key shaping. Every vendor key is a 36-character RFC 9562 UUID (version 8,
// "custom") built from a digest the caller derives from the server secret, the
// namespace, the idempotency key, the attempt number and the vendor. One format
// fits every documented limit of the built-in vendors (Square's 45
// characters for payments is the tightest; Checkout.com documents none),
// and Razorpay's 36, the tightest known anywhere; it uses
// only [0-9a-f-], and carries no personal data even when the agent's own key
// does (Stripe advises against personal identifiers in keys). A new attempt
// gets a new digest and so a new key, because vendors such as Stripe replay
// the first response, errors included, for a reused key.
package vendors

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Location says where a vendor expects its idempotency key.
type Location string

// Where a key can go.
const (
	InHeader Location = "header"
	InBody   Location = "body"
)

// KeyRule describes how one vendor takes idempotency keys.
type KeyRule struct {
	// Location is header or body.
	Location Location
	// Name is the header name or the JSON body field.
	Name string
	// MaxLen is the longest key the vendor accepts on any endpoint Ratchet
	// gates; for vendors whose limit varies by endpoint it is the strictest.
	MaxLen int
	// Enforced is true when the vendor itself refuses or replays a request
	// whose key it has seen.
	Enforced bool
	// RetentionHours is how long the vendor documents keeping keys; zero
	// means the vendor publishes no figure.
	RetentionHours int
	// PerEndpoint is true when a key names a call on one endpoint only, so
	// the same key sent to another endpoint is another call. False where
	// the vendor refuses a key reused on another endpoint (Stripe); true
	// where the vendor documents nothing either way, so that a caller
	// reusing an order number as the key on two endpoints is never refused
	// for it.
	PerEndpoint bool
}

// Vendor is one vendor's rules.
type Vendor interface {
	// Name is the lowercase vendor name agents pass as "vendor".
	Name() string
	// Hosts are the vendor's API hosts, which the forward proxy intercepts.
	Hosts() []string
	// KeyRule says where the vendor usually takes its idempotency key; an
	// Effect carries the rule of its own endpoint.
	KeyRule() KeyRule
	// Classify reports whether a request is a side effect, and what it is:
	// its operation, and its effect type in the taxonomy (taxonomy.go).
	// Reads (GET, HEAD, …) are not effects.
	Classify(r *Request) (Effect, bool)
	// Outcome classifies the vendor's answer to an effect.
	Outcome(r *Response) Outcome
	// Refusal renders an answer Ratchet gives instead of the vendor's in
	// the vendor's own error shape, with the status and headers the
	// vendor's official SDK handles best, so it shows the message and does
	// not retry what cannot succeed. status is what Ratchet means (409 for
	// in_flight and blocked, 403 for approval_required and denied, 400 for
	// a conflict); code is Ratchet's (one of the Refusal constants, or
	// "ratchet_" and an engine error code).
	Refusal(status int, code, message string) Reply
}

// Reply is a refusal as it goes to the caller.
type Reply struct {
	Status int
	// Header holds headers to add (nil for none).
	Header http.Header
	Body   []byte
}

// Codes of the refusals vendors shape specially.
const (
	RefusalInFlight  = "ratchet_in_flight"
	RefusalBlocked   = "ratchet_blocked"
	RefusalDuplicate = "ratchet_duplicate" // performed, answer too large to replay
	RefusalConflict  = "ratchet_idempotency_key_conflict"
	RefusalUnknown   = "ratchet_upstream_unknown" // the vendor did not answer
)

// Key is the vendor idempotency key handed to an agent with an execute
// decision: the value and where to put it.
type Key struct {
	Value          string   `json:"value"`
	Location       Location `json:"location"`
	Name           string   `json:"name"`
	Enforced       bool     `json:"enforced"`
	RetentionHours int      `json:"retention_hours"`
}

// KeyShaper is a vendor whose idempotency keys are not Ratchet's usual
// UUID (a declared vendor whose alphabet or length does not take one).
type KeyShaper interface {
	ShapeKey(digest []byte) string
}

// Upstreamer is a vendor with a default upstream, which a
// proxy.upstreams entry of the same name overrides.
type Upstreamer interface {
	Upstream() string
}

// Registry is a set of vendors by name and host: the built-in ones
// (package vendors/all lists them) and those the config declares. A nil
// *Registry knows none: every name gets Generic.
type Registry struct {
	byName map[string]Vendor
	byHost map[string]Vendor
	all    []Vendor
}

// NewRegistry builds a registry of vs; a name or host given twice is an
// error.
func NewRegistry(vs ...Vendor) (*Registry, error) {
	r := &Registry{byName: map[string]Vendor{}, byHost: map[string]Vendor{}}
	for _, v := range vs {
		if _, dup := r.byName[v.Name()]; dup {
			return nil, fmt.Errorf("vendor %q is listed twice", v.Name())
		}
		r.byName[v.Name()] = v
		for _, h := range v.Hosts() {
			if o, dup := r.byHost[h]; dup {
				return nil, fmt.Errorf("vendor %s: host %q is %s's already", v.Name(), h, o.Name())
			}
			r.byHost[h] = v
		}
		r.all = append(r.all, v)
	}
	return r, nil
}

var empty = &Registry{}

func (r *Registry) or() *Registry {
	if r == nil {
		return empty
	}
	return r
}

// All lists the registry's vendors, built-in ones first.
func (r *Registry) All() []Vendor { return r.or().all }

// Lookup returns the rules for a vendor name (case-insensitive) and whether
// the vendor is known. Unknown vendors get Generic.
func (r *Registry) Lookup(name string) (Vendor, bool) {
	v, ok := r.or().byName[strings.ToLower(name)]
	if !ok {
		return Generic{}, false
	}
	return v, true
}

// ForHost returns the vendor whose API host is host (no port), if any.
func (r *Registry) ForHost(host string) (Vendor, bool) {
	v, ok := r.or().byHost[strings.ToLower(host)]
	return v, ok
}

// hostNameRe is a lowercase DNS host name: dot-separated labels of letters,
// digits and inner hyphens.
var hostNameRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// IsHostName reports whether h is a lowercase host name, with no scheme,
// port or wildcard: what may name a vendor API host.
func IsHostName(h string) bool { return hostNameRe.MatchString(h) }

// ShapeKey turns a digest of at least 16 bytes into the key for the named
// vendor. The same digest always gives the same key.
func (r *Registry) ShapeKey(vendor string, digest []byte) Key {
	v, _ := r.Lookup(vendor)
	rule := v.KeyRule()
	value := ""
	if s, ok := v.(KeyShaper); ok {
		value = s.ShapeKey(digest)
	} else {
		value = uuidV8(digest)
	}
	return Key{
		Value:          value,
		Location:       rule.Location,
		Name:           rule.Name,
		Enforced:       rule.Enforced,
		RetentionHours: rule.RetentionHours,
	}
}

// uuidV8 formats the first 16 bytes of digest as an RFC 9562 version 8 UUID.
func uuidV8(digest []byte) string {
	var b [16]byte
	copy(b[:], digest)
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}

// errorJSON marshals a vendor error body; the values are plain data.
func ErrorJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Classify is v's Outcome of an answer, unless the answer's body is in a
// content coding: the proxy's transport asks for gzip and decodes it
// (dropping the caller's Accept-Encoding), which removes Content-Encoding,
// so one still there means a body in an encoding nobody asked for, which
// no rule can read. Classified by its status alone, an Adyen 200 whose
// resultCode says "Refused" would count as succeeded; it is Unknown
// instead, and the key blocked until someone resolves it.
func Classify(v Vendor, r *Response) Outcome {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
		return Outcome{Result: Unknown, Reason: "the vendor answered in an encoding Ratchet did not ask for (Content-Encoding: " + ce + ") and cannot read; the outcome is unknown"}
	}
	return v.Outcome(r)
}
