package recovery

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// maxAnswerBytes bounds an answer read to classify it (the proxy's own
// bound); a longer one is passed on unread and its request kept.
const maxAnswerBytes = outbound.MaxAnswerBytes

// Transport is the proxy's Transport (proxy.Options.Transport) when
// recovery is on: it keeps each gated request of an opted-in vendor
// (proxy.AttemptOf names it) in the store before sending it, exactly as
// it goes out (after the proxy stamped the vendor key and tagged it), and
// forgets it when the vendor answers definitely. A request that cannot be
// kept is sent anyway (logged): it then only cannot be recovered.
type Transport struct {
	// Base sends the requests (default outbound.NewTransport()).
	Base    http.RoundTripper
	Store   *Store
	Vendors map[string]bool
	// Clock stamps when a request was sent (default time.Now).
	Clock  func() time.Time
	Logger *slog.Logger
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = outbound.NewTransport()
	}
	a, ok := outbound.AttemptOf(req.Context())
	if !ok || !t.Vendors[a.Vendor] || a.VendorKey == "" {
		return base.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	now := time.Now
	if t.Clock != nil {
		now = t.Clock
	}
	kept := &Request{Vendor: a.Vendor, EffectID: a.EffectID, Attempt: a.Attempt, VendorKey: a.VendorKey,
		Method: req.Method, URL: req.URL.String(), Header: req.Header.Clone(), Body: body, SentAt: now()}
	stored := t.Store.Put(kept) == nil
	if !stored {
		t.log().Warn("recovery: the request could not be kept; this call cannot be recovered", "effect_id", a.EffectID)
	}
	resp, err := base.RoundTrip(req)
	if err != nil || !stored {
		return resp, err // no answer: kept for recovery
	}
	b, rerr := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if rerr != nil || len(b) > maxAnswerBytes {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		return resp, nil
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	v, _ := all.Lookup(a.Vendor)
	if o := vendors.Classify(v, &vendors.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}); o.Result != vendors.Unknown {
		// A definite answer: the proxy reports it, and the request is
		// never needed again.
		if err := t.Store.Delete(a.EffectID, a.Attempt); err != nil {
			t.log().Warn("recovery: could not delete a kept request", "effect_id", a.EffectID, "err", err)
		}
	}
	return resp, nil
}

func (t *Transport) log() *slog.Logger {
	if t.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return t.Logger
}
