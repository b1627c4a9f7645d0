package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
)

// maxResponseBytes bounds an upstream answer read for classification.
const maxResponseBytes = outbound.MaxAnswerBytes

// ratchetHeaders are Ratchet's own request headers, never sent upstream.
var ratchetHeaders = []string{HeaderIdempotencyKey, HeaderRunID, HeaderAgentID, HeaderGroupKey}

// call is one gated request on its way to the vendor.
type call struct {
	v        vendors.Vendor
	effectID string
	attempt  int
	owner    string // ownerOf the request: whose its stored answer is
}

// gateRequest handles a request for vendor v whose API path is path: a
// read passes through; an effect is classified, decided by the ledger and
// stamped and sent, or refused in the vendor's shape.
func (p *Proxy) gateRequest(w http.ResponseWriter, r *http.Request, v vendors.Vendor, path string) {
	r, span := startSpan(r, v.Name()) // trace.go
	defer span.End()
	if !standardMethod(r.Method) {
		p.log.Warn("proxy request refused: not a standard method", "vendor", v.Name(), "method", printable(r.Method, 32))
		p.opts.Observer.Request(v.Name(), "refused")
		p.write(w, v, http.StatusBadRequest, "ratchet_method_not_allowed", "Ratchet: the method "+strconv.Quote(printable(r.Method, 32))+
			" is not an HTTP method as RFC 9110 (or RFC 5789, PATCH) spells it, and a vendor may read it as one Ratchet's rules do not see; "+
			"send it in upper case; nothing was sent or recorded")
		return
	}
	dropHopByHop(r.Header)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			p.write(w, v, http.StatusRequestEntityTooLarge, "ratchet_body_too_large",
				fmt.Sprintf("Ratchet: the request body is over %d bytes (proxy.max_body_bytes); nothing was sent or recorded", p.opts.MaxBodyBytes))
			return
		}
		p.write(w, v, http.StatusBadRequest, "ratchet_bad_request", "Ratchet: could not read the request body: "+err.Error())
		return
	}
	clean, ok := cleanPath(path)
	if !ok {
		p.opts.Observer.Request(v.Name(), "refused")
		p.write(w, v, http.StatusBadRequest, "ratchet_bad_request", "Ratchet: the path "+strconv.Quote(path)+
			" has a ';' or '\\' in it, which servers read differently; nothing was sent or recorded")
		return
	}
	path = clean // classified and forwarded alike
	e, isEffect := v.Classify(&vendors.Request{Method: r.Method, Path: path, Query: r.URL.RawQuery, Header: r.Header, Body: body})
	if !isEffect {
		p.opts.Observer.Request(v.Name(), "pass")
		p.forward(w, r, r.Context(), v, path, body, nil)
		return
	}
	if e.Refuse != "" {
		p.log.Warn("proxy request refused as ambiguous", "vendor", v.Name(), "effect_type", e.EffectType, "operation", e.Operation)
		p.opts.Observer.Request(v.Name(), "refused")
		p.write(w, v, http.StatusBadRequest, "ratchet_bad_request", "Ratchet: "+e.Refuse+"; nothing was sent or recorded")
		return
	}
	if e.Money != nil && !e.FollowUp && e.Money.TooLarge(p.opts.CurrencyMicros) {
		// Micros declares no cost for it, and a money ceiling would let
		// the largest amounts through uncounted.
		p.opts.Observer.Request(v.Name(), "refused")
		p.write(w, v, http.StatusBadRequest, "ratchet_bad_request", "Ratchet: the amount is too large to count in micro-USD; nothing was sent or recorded")
		return
	}
	owner := ownerOf(e)
	req := p.gatedBegin(r, v, path, body, e, false)
	res, err := p.eng.Begin(r.Context(), req)
	if err == nil && res.Decision == ledger.DecisionDuplicate {
		if kept, ok := storedOwner(res); ok && kept != "" && kept != owner {
			// Another credential's answer to identical content, and
			// nothing but the credential says whose call either is:
			// never replayed to this one, which makes its own call.
			req = p.gatedBegin(r, v, path, body, e, true)
			res, err = p.eng.Begin(r.Context(), req)
		}
	}
	if err != nil {
		p.log.Warn("proxy begin refused", "vendor", v.Name(), "effect_type", e.EffectType, "operation", e.Operation, "code", ledger.CodeOf(err))
		status, code, msg := errorAnswer(err)
		p.opts.Observer.Request(v.Name(), "refused")
		p.write(w, v, status, code, msg)
		return
	}
	p.opts.Observer.Request(v.Name(), string(res.Decision))
	if o, ok := p.opts.Observer.(OperationObserver); ok {
		o.Operation(e.Operation, string(res.Decision))
	}
	traceDecision(r.Context(), e.EffectType, res)
	h := w.Header()
	h.Set(HeaderDecision, string(res.Decision))
	if res.EffectID != "" {
		h.Set(HeaderEffectID, res.EffectID)
	}
	if res.Reason != "" {
		h.Set(HeaderReason, res.Reason)
	}
	if p.log.Enabled(r.Context(), slog.LevelInfo) { // its arguments are built only for a logger that writes it
		p.log.Info("proxy decision", append([]any{"vendor", v.Name(), "effect_type", e.EffectType, "operation", e.Operation, "decision", res.Decision,
			"effect_id", res.EffectID, "attempt", res.Attempt}, labels(r)...)...)
	}
	switch res.Decision {
	case ledger.DecisionExecute:
		if res.VendorIdempotencyKey != nil && e.Key.Location != "" {
			h.Set(HeaderVendorKey, res.VendorIdempotencyKey.Value)
			if body, err = vendors.Stamp(e.Key, r.Header, body, res.VendorIdempotencyKey.Value); err != nil {
				// The body cannot carry the key: nothing was sent, so the
				// attempt definitely did not happen.
				p.report(r.Context(), &call{v, res.EffectID, res.Attempt, owner}, ledger.OutcomeFailed, nil, "", "cannot stamp the key: "+err.Error())
				p.write(w, v, http.StatusBadRequest, "ratchet_bad_request", "Ratchet: "+err.Error())
				return
			}
			if body, err = tag(v, e, body, res.VendorIdempotencyKey.Value); err != nil {
				// The caller wrote Ratchet's own webhook tag: nothing was
				// sent, so the attempt definitely did not happen.
				p.report(r.Context(), &call{v, res.EffectID, res.Attempt, owner}, ledger.OutcomeFailed, nil, "", "webhook tag: "+err.Error())
				p.write(w, v, http.StatusBadRequest, "ratchet_bad_request", "Ratchet: "+err.Error())
				return
			}
		}
		at := Attempt{Vendor: v.Name(), EffectID: res.EffectID, Attempt: res.Attempt}
		if res.VendorIdempotencyKey != nil && e.Key.Location != "" {
			at.VendorKey = res.VendorIdempotencyKey.Value
		}
		// The attempt, for a recording Transport (attempt.go), in the
		// context forward gives the request (one copy of it, not two).
		p.forward(w, r, WithAttempt(r.Context(), at), v, path, body, &call{v, res.EffectID, res.Attempt, owner})
	case ledger.DecisionDuplicate:
		if derived(v, req.IdempotencyKey) {
			// Nothing but identical content within the window made this
			// request the earlier one: say so, to the caller and the log,
			// for the day it was a second genuine purchase.
			window := p.dedupeWindow(v)
			h.Set(HeaderDeduped, "content; window="+window.String())
			p.log.Warn("proxy answered a request without an idempotency key as a duplicate of identical content", "vendor", v.Name(),
				"effect_type", e.EffectType, "operation", e.Operation, "effect_id", res.EffectID, "dedupe_window", window.String())
		}
		p.replay(w, v, res, owner)
	default:
		status, code, msg := decisionAnswer(res)
		if res.Decision == ledger.DecisionInFlight {
			h.Set("Retry-After", strconv.Itoa(res.RetryAfterSeconds))
		}
		p.write(w, v, status, code, msg)
	}
}

// gatedBegin is the begin the gate sends for a request: beginRequest's,
// with the call's lease.
func (p *Proxy) gatedBegin(r *http.Request, v vendors.Vendor, path string, body []byte, e vendors.Effect, owned bool) ledger.BeginRequest {
	req := p.beginRequest(r, v, path, body, e, owned)
	req.LeaseSeconds = p.lease(v, e)
	return req
}

// standardMethod reports whether method is one of RFC 9110's methods, or
// RFC 5789's PATCH (PayPal and Adyen use it), exactly as written. Methods
// are case-sensitive (RFC 9110 9.1), but a vendor's server may read
// "post" as POST, while vendors' rules (vendors.Request) match only the
// upper-case name: such a request would pass ungated, unstamped and
// unrecorded. It is refused instead, as is any method of no RFC, in every
// mode (all reach vendor). A vendor API has no use for either.
func standardMethod(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return true
	}
	return false
}

// dropHopByHop removes from h the fields its Connection header names, and
// Connection itself, before the request is classified and stamped. They
// are hop-by-hop (RFC 9110 7.6.1): httputil.ReverseProxy drops them from
// what it sends, after the stamp, so a caller naming the vendor's
// idempotency header there had Ratchet's key stamped and then stripped
// (the vendor acted with no key while the ledger recorded one), and one
// naming Stripe-Account had Ratchet classify a call the vendor never
// received. Dropped first, what Ratchet classifies and stamps is what the
// vendor gets. Ratchet's own headers are for this hop and are read as
// ever (never forwarded either way).
func dropHopByHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for name := range strings.SplitSeq(f, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if name != "" && !slices.Contains(ratchetHeaders, name) {
				h.Del(name)
			}
		}
	}
	delete(h, "Connection")
}

// labels are the caller's Ratchet-Agent-Id and Ratchet-Run-Id, for the
// decision's log line: what the caller says it is, named as labels, never
// as the agent or run (see "Identity" in proxy.go).
func labels(r *http.Request) []any {
	var out []any
	for _, l := range []struct{ name, header string }{{"label_agent_id", HeaderAgentID}, {"label_run_id", HeaderRunID}} {
		if v := r.Header.Get(l.header); v != "" {
			out = append(out, l.name, printable(v, ledger.MaxIDLen))
		}
	}
	return out
}

// lease is how long a proxied call holds its key: the upstream timeout and
// 15 s to report, capped at the policy's max_lease_seconds for the call.
// Under a lower cap a call slower than the lease turns indeterminate
// (retries are blocked, not repeated) until the proxy's late report
// settles it.
func (p *Proxy) lease(v vendors.Vendor, e vendors.Effect) int {
	return min(int(math.Ceil(p.opts.UpstreamTimeout.Seconds()))+15, p.eng.MaxLeaseSeconds(e.EffectType, v.Name(), e.Operation))
}

// dedupeWindow is how long identical content without a key is one call
// for vendor v (Options.DedupeWindows, else DedupeWindow).
func (p *Proxy) dedupeWindow(v vendors.Vendor) time.Duration {
	if d, ok := p.opts.DedupeWindows[v.Name()]; ok && d > 0 {
		return d
	}
	return p.opts.DedupeWindow
}

// derived reports whether key is one beginRequest derived from content.
func derived(v vendors.Vendor, key string) bool {
	return strings.HasPrefix(key, v.Name()+":auto:")
}

// beginRequest builds the begin for a gated request. Its key is, in
// order: the Ratchet-Idempotency-Key header; the caller's own key in the
// vendor's place (unless an SDK minted it for the one call); or one
// derived from the content. Each is scoped by whose call it is (whose):
// the account a header names, the merchant the body names, the static
// credential, and, when owned, the credential that owns the answer
// (Effect.Owner; see vendor). A key derived from the content names the
// window it falls in (proxy.dedupe_window) and SameAs the keys it has in
// the windows on either side; for a stripe-go key, the window its mint
// time falls in, so the SDK's retries of one call, however late, are
// that call.
func (p *Proxy) beginRequest(r *http.Request, v vendors.Vendor, path string, body []byte, e vendors.Effect, owned bool) ledger.BeginRequest {
	content := canonicalContent(r.Method, path, r.Header.Get("Content-Type"), body, e)
	whose := []string{e.Scope, e.Merchant, hashed(e.Credential)}
	if owned {
		whose = append(whose, "owner="+ownerOf(e))
	}
	key := r.Header.Get(HeaderIdempotencyKey)
	var same []string
	switch {
	case key != "":
		// Scoped as the caller's key is: another merchant (or anyone who
		// learns the key and content) never reads this call's answer, and
		// a key shaped like a derived one names nothing but itself.
		key = v.Name() + ":ratchet:" + hashed(strings.Join(append(whose, key), "\x00"))[:40]
	case e.CallerKey != "" && !e.KeyFromSDK:
		key = callerKey(v, r.Method, path, e, whose)
	default:
		at := p.opts.Clock()
		if !e.KeyMinted.IsZero() && e.KeyFromSDK {
			at = e.KeyMinted
		}
		window := p.dedupeWindow(v)
		bucket := at.UnixNano() / int64(window)
		derive := func(bucket int64) string {
			parts := string(content) + "\x00" + e.Scope + "\x00" + hashed(e.Credential)
			if owned {
				parts += "\x00owner=" + ownerOf(e)
			}
			return v.Name() + ":auto:" + hashed(parts + "\x00" + strconv.FormatInt(bucket, 10))[:40]
		}
		// The neighbouring windows' keys make the window slide: the
		// engine takes the effect of either when it began less than one
		// window ago, in the same write as its look-up.
		key, same = derive(bucket), []string{derive(bucket - 1), derive(bucket + 1)}
	}
	req := ledger.BeginRequest{
		Namespace: p.opts.Namespace, IdempotencyKey: key, EffectType: e.EffectType, Vendor: v.Name(), Operation: e.Operation,
		Payload: content, AgentID: p.opts.AgentID, // never a header's (see "Identity" in proxy.go)
		GroupKey: r.Header.Get(HeaderGroupKey), SameAs: same, SameWithin: p.dedupeWindow(v),
	}
	if e.Counterparty != "" {
		cp := e.Counterparty
		if len(cp) > ledger.MaxDimValueLen {
			cp = hashed(cp)
		}
		req.Dimensions = map[string]string{"counterparty": cp}
	}
	switch {
	case e.FollowUp:
		// A confirm, capture or cancel counts zero: its payment's amount
		// was counted, and approved, at its create (vendors' taxonomy.go).
		zero := int64(0)
		req.EstimatedCostMicros = &zero
	case e.Money != nil:
		if micros, ok := e.Money.Micros(p.opts.CurrencyMicros); ok {
			req.EstimatedCostMicros = &micros
		}
	case e.CostMicros != nil: // a declared route's fixed cost per call
		c := *e.CostMicros
		req.EstimatedCostMicros = &c
	}
	return req
}

// callerKey is the Ratchet key of a request that carries the caller's own
// idempotency key: that key within whose call it is (the account a header
// names, the merchant the body names, the static credential, the owner
// when owned), and the endpoint where the vendor's keys are per endpoint.
// Nothing in it changes when an OAuth token is refreshed or the caller
// restarts, so the same key and content is one call until the ledger
// forgets it, the same key with other content is idempotency_key_conflict
// (the content is the fingerprint), and a new key is a new call.
func callerKey(v vendors.Vendor, method, path string, e vendors.Effect, whose []string) string {
	endpoint := ""
	if v.KeyRule().PerEndpoint {
		endpoint = method + " " + path
	}
	parts := append(append([]string{}, whose[:3]...), endpoint, e.CallerKey)
	parts = append(parts, whose[3:]...) // the owner, after the parts keys always had
	return v.Name() + ":key:" + hashed(strings.Join(parts, "\x00"))[:40]
}

// ownerOf is whose a stored answer is, when only an OAuth credential says
// whose call it is (Effect.Owner), as a hash; else "".
func ownerOf(e vendors.Effect) string {
	if e.Owner == "" {
		return ""
	}
	return hashed("owner\x00" + e.Owner)
}

// storedOwner returns the owner kept with a duplicate's stored answer, if
// the answer was kept.
func storedOwner(res *ledger.BeginResult) (string, bool) {
	var kept outbound.Stored
	if json.Unmarshal(res.Result, &kept) != nil || kept.Status == 0 {
		return "", false
	}
	return kept.Owner, true
}

// cleanPath returns path with empty, "." and ".." segments resolved, as
// the vendor's server would resolve them, so that what Ratchet classifies
// (and the policy it applies) is the path it forwards: /v1/./payment_intents
// is /v1/payment_intents. Percent-encoded dots and slashes are decoded
// before this. A ';' (path parameters, which Java servers strip) or a '\'
// (a separator to some servers) is refused: false.
func cleanPath(path string) (string, bool) {
	if strings.ContainsAny(path, ";\\") {
		return "", false
	}
	var out []string
	for _, seg := range strings.Split(path, "/") {
		switch seg {
		case "", ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/"), true
}

// canonicalContent is the action as JSON: method, path, account scope and
// the body (JSON as sent, form fields as a sorted map, anything else by
// hash), without the endpoint's body-carried vendor key, which SDKs make
// random per call (on an endpoint that takes none, such as Square's cancel
// by idempotency key, that field is content like any other).
//
// Content over the ledger's payload limit has its body hashed instead
// (SPEC 9: the ledger needs a fingerprint, never the payload). Only then:
// the payload of every body that fitted before stays as it was, so an
// effect begun before an upgrade is still the same content after it.
func canonicalContent(method, path, contentType string, body []byte, e vendors.Effect) json.RawMessage {
	c := content{Method: method, Path: path, Scope: e.Scope}
	switch {
	case len(body) == 0:
	case strings.HasPrefix(contentType, "application/x-www-form-urlencoded"):
		if e.Form != nil { // the rules parsed this body as a form already
			c.Form = &e.Form
		} else if form, err := url.ParseQuery(string(body)); err == nil {
			c.Form = &form
		} else {
			c.BodySHA256 = hashed(string(body))
		}
	default:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil || obj == nil {
			c.BodySHA256 = hashed(string(body))
			break
		}
		if e.Key.Location == vendors.InBody {
			delete(obj, e.Key.Name)
		}
		c.JSON = &obj
	}
	b := marshalContent(c) // json.Marshal(c), byte for byte (content.go)
	if len(b) <= ledger.MaxPayloadBytes {
		return b
	}
	if c.JSON != nil {
		pb, _ := json.Marshal(*c.JSON)
		c.JSON, c.JSONSHA256 = nil, hashed(string(pb))
	}
	if c.Form != nil {
		pb, _ := json.Marshal(*c.Form)
		c.Form, c.FormSHA256 = nil, hashed(string(pb))
	}
	if b, _ = json.Marshal(c); len(b) > ledger.MaxPayloadBytes { // a path or scope that long
		b, _ = json.Marshal(map[string]string{"content_sha256": hashed(string(b))})
	}
	return b
}

// content is canonicalContent's JSON object. Its fields are in the order
// of their names, as encoding/json writes a map's keys, and each is left
// out exactly when the map it replaced had no such key (a form or object
// that parsed empty is kept, as {}): the payload of every request is the
// bytes it was when it was a map[string]any, without that map's
// allocations and sorting on every gated request.
type content struct {
	BodySHA256 string                      `json:"body_sha256,omitempty"`
	Form       *url.Values                 `json:"form,omitempty"`
	FormSHA256 string                      `json:"form_sha256,omitempty"`
	JSON       *map[string]json.RawMessage `json:"json,omitempty"`
	JSONSHA256 string                      `json:"json_sha256,omitempty"`
	Method     string                      `json:"method"`
	Path       string                      `json:"path"`
	Scope      string                      `json:"scope,omitempty"`
}

// forward sends the request upstream in ctx (the request's, or one made
// from it); with a call, the answer is classified and reported before it
// reaches the caller.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, ctx context.Context, v vendors.Vendor, path string, body []byte, c *call) {
	upstream := p.upstreams[v.Name()]
	if c != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.opts.UpstreamTimeout)
		defer cancel()
	}
	r = r.WithContext(ctx)
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	start := time.Now()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, ""
			pr.SetURL(upstream)
			for _, h := range ratchetHeaders {
				delete(pr.Out.Header, h) // canonical names: Header.Del less its canonicalisation
			}
			if c != nil {
				// Ratchet reads the answer (outcome, object id, the
				// stored copy for replay): a caller's own Accept-Encoding
				// would get it compressed. Without it the transport asks
				// for gzip itself and hands back the decompressed body.
				delete(pr.Out.Header, "Accept-Encoding")
			}
		},
		Transport:  traced(p.opts.Transport, v.Name()),
		ErrorLog:   p.pass.ErrorLog,
		BufferPool: copyBuffers,
	}
	if c != nil {
		rp.ModifyResponse = func(resp *http.Response) error { return p.settle(ctx, c, resp, start) }
		rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
			p.opts.Observer.Upstream(c.v.Name(), string(vendors.Unknown), time.Since(start))
			p.report(ctx, c, ledger.OutcomeUnknown, nil, "", "no answer from the vendor: "+err.Error())
			status, msg := http.StatusBadGateway, "Ratchet: the vendor did not answer; the outcome is unknown and this action is blocked until resolved"
			if isTimeout(err) {
				status, msg = http.StatusGatewayTimeout, "Ratchet: the vendor did not answer in time; the outcome is unknown and this action is blocked until resolved"
			}
			p.write(w, c.v, status, vendors.RefusalUnknown, msg)
		}
	}
	rp.ServeHTTP(w, r)
}

// settle reads the vendor's answer, classifies and reports it, and hands
// the same bytes on to the caller.
func (p *Proxy) settle(ctx context.Context, c *call, resp *http.Response, start time.Time) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	resp.Body.Close()
	if err != nil || len(b) > maxResponseBytes {
		return fmt.Errorf("reading the vendor's answer: %v", err) // reported unknown by ErrorHandler
	}
	o := vendors.Classify(c.v, &vendors.Response{Status: resp.StatusCode, Header: resp.Header, Body: b})
	p.opts.Observer.Upstream(c.v.Name(), string(o.Result), time.Since(start))
	result := outbound.Keep(resp.StatusCode, resp.Header.Get("Content-Type"), b, vendorRef(o.VendorReference), c.owner)
	p.report(ctx, c, outcomes[o.Result], result, o.VendorReference, o.Reason)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
	return nil
}

// outcomes maps a vendor's classified answer to what is reported.
var outcomes = map[vendors.Result]ledger.Outcome{vendors.Succeeded: ledger.OutcomeSucceeded,
	vendors.Failed: ledger.OutcomeFailed, vendors.Unknown: ledger.OutcomeUnknown}

// report records an outcome even if the caller has gone: the vendor may
// have acted, so the ledger must hear of it.
func (p *Proxy) report(ctx context.Context, c *call, o ledger.Outcome, result []byte, ref, reason string) {
	// The vendor wrote these: a reason is cleaned and shortened, a reference
	// that is not a plain id is dropped rather than altered. Either way the
	// outcome itself is never refused over them.
	reason, ref = printable(reason, ledger.MaxTextLen), vendorRef(ref)
	req := ledger.ReportRequest{Namespace: p.opts.Namespace, EffectID: c.effectID,
		Attempt: c.attempt, Outcome: o, Result: result, VendorReference: ref, Error: reason}
	_, err := p.eng.Report(context.WithoutCancel(ctx), req)
	if err != nil && req.Result != nil && ledger.CodeOf(err) == ledger.CodeInvalidArgument {
		// keep makes results that fit; should the ledger still refuse one,
		// the outcome matters more than the stored answer.
		p.log.Warn("proxy report refused with its result; reporting without it", "effect_id", c.effectID, "err", err)
		req.Result = nil
		_, err = p.eng.Report(context.WithoutCancel(ctx), req)
	}
	if err != nil {
		p.log.Error("proxy report failed; the effect will become indeterminate when its lease ends",
			"effect_id", c.effectID, "outcome", o, "err", err)
		return
	}
	if p.log.Enabled(ctx, slog.LevelInfo) {
		p.log.Info("proxy report", "vendor", c.v.Name(), "effect_id", c.effectID, "outcome", o, "vendor_reference", ref)
	}
}

func vendorRef(ref string) string { return outbound.VendorRef(ref) }

func printable(s string, max int) string { return outbound.Printable(s, max) }

// replay answers a duplicate with the stored vendor response, if it is
// owner's (see outbound.Stored).
func (p *Proxy) replay(w http.ResponseWriter, v vendors.Vendor, res *ledger.BeginResult, owner string) {
	var kept outbound.Stored
	parsed := json.Unmarshal(res.Result, &kept) == nil && kept.Status != 0
	if kept.Owner != owner {
		// Another owner's answer (vendor re-begins such a request under
		// its own owner first), or one kept without an owner (before
		// owners were kept, or not kept at all) for a caller whose token
		// alone says whose call it is: neither the answer nor its object
		// id is given, and it is not sent again.
		p.write(w, v, http.StatusConflict, vendors.RefusalDuplicate, fmt.Sprintf(
			"Ratchet: this request was already performed (effect %s); its answer is kept only for the credential that made it", res.EffectID))
		return
	}
	if !parsed || kept.Omitted {
		ref := res.VendorReference
		if ref == "" {
			ref = kept.ObjectID
		}
		p.write(w, v, http.StatusConflict, vendors.RefusalDuplicate, fmt.Sprintf(
			"Ratchet: this request was already performed (effect %s, vendor reference %q); the original response is not available to replay",
			res.EffectID, ref))
		return
	}
	body := kept.Body
	h := w.Header()
	h.Set(HeaderReplayed, "true")
	if kept.ContentType != "" {
		h.Set("Content-Type", kept.ContentType)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(kept.Status)
	w.Write(body)
}

// tag writes the vendor key as the vendor's webhook tag, when the vendor
// has one (vendors.Tagger, vendors/tag.go).
func tag(v vendors.Vendor, e vendors.Effect, body []byte, key string) ([]byte, error) {
	if tg, ok := v.(vendors.Tagger); ok {
		return tg.Tag(e, body, key)
	}
	return body, nil
}

// write sends a refusal in the vendor's own error shape, at the status and
// with the headers its SDK handles best (vendors.Vendor.Refusal).
func (p *Proxy) write(w http.ResponseWriter, v vendors.Vendor, status int, code, msg string) {
	rep := v.Refusal(status, code, msg)
	h := w.Header()
	h.Set("Content-Type", "application/json") // unless the vendor's shape says otherwise
	for k, vals := range rep.Header {
		h[k] = vals
	}
	w.WriteHeader(rep.Status)
	w.Write(rep.Body)
}

// decisionAnswer maps a decision that does not reach the vendor to an HTTP
// status, an error code and a message.
func decisionAnswer(res *ledger.BeginResult) (int, string, string) {
	msg := "Ratchet: " + string(res.Decision)
	if res.Reason != "" {
		msg += " (" + res.Reason + ")"
	}
	msg += ": " + res.Message
	switch res.Decision {
	case ledger.DecisionInFlight, ledger.DecisionBlocked:
		return http.StatusConflict, "ratchet_" + string(res.Decision), msg
	case ledger.DecisionApprovalRequired, ledger.DecisionDenied:
		return http.StatusForbidden, "ratchet_" + string(res.Decision), msg
	}
	return http.StatusInternalServerError, "ratchet_internal", msg
}

// errorAnswer maps an engine error to an HTTP status, code and message.
func errorAnswer(err error) (int, string, string) {
	le := ledger.Classify(err) // shutdown and cancellation are unavailable, as in every adapter
	switch le.Code {
	case ledger.CodeInvalidArgument, ledger.CodeIdempotencyKeyConflict, ledger.CodeDimensionRequired, ledger.CodeCostRequired, ledger.CodeConfirmationRequired:
		// 400 whatever the code: the shape every vendor's SDK shows.
		return http.StatusBadRequest, "ratchet_" + string(le.Code), "Ratchet refused the request: " + string(le.Code) + ": " + le.Message
	case ledger.CodeUnauthorized:
		// Ratchet-Group-Key naming another agent's group: the proxy's
		// identity may not add to it (ledger's checkJoin).
		return http.StatusForbidden, "ratchet_unauthorized", "Ratchet refused the request: unauthorized: " + le.Message
	case ledger.CodeUnavailable:
		return http.StatusServiceUnavailable, "ratchet_unavailable", "Ratchet could not record the request (" + le.Message + "); nothing was sent: retry later"
	}
	return http.StatusInternalServerError, "ratchet_internal", "Ratchet failed internally; nothing was sent"
}
