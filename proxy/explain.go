package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
)

// Gated is a request as the gate sees it, for explaining it (ledger's
// Explain): the vendor, what the request is, and the begin the gate would
// send for it.
type Gated struct {
	Vendor    string `json:"vendor"`
	Operation string `json:"operation"`
	// KeySource is where the begin's key comes from: ratchet (the
	// Ratchet-Idempotency-Key header), caller (the caller's own key in the
	// vendor's place) or content (derived; dedupe_window applies).
	KeySource    string `json:"key_source"`
	DedupeWindow string `json:"dedupe_window,omitempty"`
	// Begin is the begin, without its payload (the canonical content).
	Begin ledger.BeginRequest `json:"begin"`
}

// ErrNotGated: the request is not a side effect the proxy gates (a read,
// or no vendor's): it would pass through, or be refused, without a begin.
var ErrNotGated = fmt.Errorf("not gated")

// Gate returns the begin the gate would send for a request to rawURL: an
// absolute URL to a vendor API host (forward and transparent mode) or a
// reverse-mode URL (/<vendor>/...) on any host. It is the gate's own
// classification and key derivation (the same functions vendor calls), and
// sends nothing. A request the gate would refuse as ambiguous is an error
// naming why.
func (p *Proxy) Gate(method, rawURL string, header http.Header, body []byte) (*Gated, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Path == "" {
		return nil, fmt.Errorf("%q is not a URL (e.g. https://api.stripe.com/v1/payment_intents)", rawURL)
	}
	if u.RawQuery != "" {
		return nil, fmt.Errorf("%q has a query string; the gate classifies the path and body", rawURL)
	}
	v, ok := p.vendorFor(u.Hostname())
	path := u.Path
	if !ok {
		name, rest, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if v, ok = p.vendors[name]; !ok {
			return nil, fmt.Errorf("%w: %s is not a vendor API host the proxy intercepts and /%s/ is no vendor's reverse-mode prefix (configured: %s)",
				ErrNotGated, u.Hostname(), name, p.names())
		}
		path = "/" + rest
	}
	clean, ok := cleanPath(path)
	if !ok {
		return nil, fmt.Errorf("the path %q has a ';' or '\\' in it: the proxy refuses it (400), recording nothing", path)
	}
	if header == nil {
		header = http.Header{}
	}
	e, isEffect := v.Classify(&vendors.Request{Method: method, Path: clean, Header: header, Body: body})
	if !isEffect {
		return nil, fmt.Errorf("%w: %s %s is not a side effect for %s; it passes through without a begin", ErrNotGated, method, clean, v.Name())
	}
	if e.Refuse != "" {
		return nil, fmt.Errorf("the proxy refuses this request (400), recording nothing: %s", e.Refuse)
	}
	r, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", method, rawURL, err)
	}
	r.Header = header
	req := p.gatedBegin(r, v, clean, body, e, false)
	g := &Gated{Vendor: v.Name(), Operation: e.Operation, Begin: req, KeySource: "caller"}
	switch {
	case header.Get(HeaderIdempotencyKey) != "":
		g.KeySource = "ratchet"
	case derived(v, req.IdempotencyKey):
		g.KeySource, g.DedupeWindow = "content", p.dedupeWindow(v).String()
	}
	return g, nil
}
