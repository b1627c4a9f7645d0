package proxy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// FuzzBeginRequest feeds arbitrary requests through the proxy's parsing
// (classification, canonical content, key derivation): never a panic, the
// payload is always JSON, and the derived key fits the ledger.
func FuzzBeginRequest(f *testing.F) {
	f.Add("stripe", "/v1/payment_intents", "application/x-www-form-urlencoded", "amount=100&currency=usd&customer=cus_1")
	f.Add("square", "/v2/payments", "application/json", `{"idempotency_key":"x","amount_money":{"amount":1,"currency":"USD"}}`)
	f.Add("adyen", "/v71/payments", "application/json", `{"amount":{"value":1,"currency":"EUR"}}`)
	f.Add("paypal", "/v2/checkout/orders", "application/json", `{"purchase_units":[{"amount":{"value":"1.00","currency_code":"USD"}}]}`)
	f.Add("square", "/v2/payments", "text/plain", "\x00\xff")
	p := &Proxy{opts: Options{DedupeWindow: time.Hour, CurrencyMicros: map[string]int64{"usd": 1_000_000}}}
	p.opts.Clock = func() time.Time { return time.Unix(1e9, 0) }
	f.Fuzz(func(t *testing.T, vendor, path, ctype, body string) {
		v, _ := all.Lookup(vendor)
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Content-Type", ctype)
		e, ok := v.Classify(&vendors.Request{Method: r.Method, Path: path, Header: r.Header, Body: []byte(body)})
		if !ok {
			return
		}
		req := p.beginRequest(r, v, path, []byte(body), e, false)
		if !json.Valid(req.Payload) {
			t.Fatalf("!json.Valid(req.Payload): begin request %+v", req)
		}
		if len(req.IdempotencyKey) > 255 {
			t.Fatalf("len(req.IdempotencyKey) > 255: begin request %+v", req)
		}
		if req.IdempotencyKey == "" {
			t.Fatalf("req.IdempotencyKey == \"\": begin request %+v", req)
		}
		if req.EstimatedCostMicros != nil && *req.EstimatedCostMicros < 0 {
			t.Fatalf("negative cost %d", *req.EstimatedCostMicros)
		}
	})
}
