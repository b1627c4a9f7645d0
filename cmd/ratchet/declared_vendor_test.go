package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
)

// acmeUpstream is the upstream of the declared vendor "acme": a JSON API
// that takes an Idempotency-Key header and answers 201 with the created
// object's id, or 500 for a body naming "fail" (no real peer exists for a
// vendor made up for the test; its shape is the definition's own).
type acmeUpstream struct {
	mu   sync.Mutex
	seen []acmeCall
}

type acmeCall struct {
	path, key, body string
}

func (u *acmeUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.seen = append(u.seen, acmeCall{r.URL.Path, r.Header.Get("Idempotency-Key"), string(b)})
	n := len(u.seen)
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if strings.Contains(string(b), "fail") {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"title": "internal"}`))
		return
	}
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": "pay_" + string(rune('0'+n)), "status": "open"})
}

func (u *acmeUpstream) calls() []acmeCall {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]acmeCall(nil), u.seen...)
}

// acmeConfig declares acme, its upstream the fake, under a 20 EUR ceiling.
func acmeConfig(upstream, caFile string) string {
	return `
proxy:
  currency_micros: {eur: 1000000}
  ca_export_path: '` + caFile + `'
vendors:
  - name: acme
    hosts: [api.acme.test]
    upstream: ` + upstream + `
    key: {in: header, name: Idempotency-Key, max_length: 64, alphabet: "A-Za-z0-9-", enforced: true, retention: 24h}
    account: {header: Acme-Account}
    routes:
      - method: POST
        path: /v2/payments
        effect_type: payment.charge
        operation: payments.create
        amount: {field: amount.value, unit: major}
        currency: {field: amount.currency}
        counterparty: {field: customerId}
      - method: POST
        path: /v2/payments/{id}/refunds
        effect_type: payment.refund
        amount: {field: amount.value, unit: major}
        currency: {field: amount.currency}
    outcome: {object_id: id, reason: title}
    refusal:
      content_type: application/problem+json
      body: '{"status": {{status}}, "title": "{{code}}", "detail": "{{message}}"}'
policies:
  - match: "payment.*"
    ceilings: [{name: acme-daily, limit_micros: 20000000, window: 24h, per: global}]
`
}

// TestADeclaredVendorIsGatedThroughTheProxy: a vendor the code does not
// know, declared in the config, is gated by a real `ratchet serve` as a
// built-in one is, on both backends: through the reverse proxy its charge
// is stamped with Ratchet's key in the vendor's header, a retry with the
// caller's key is replayed, the same key with other content and a charge
// over the ceiling are refused in the vendor's error shape and never sent,
// an upstream 500 leaves the call blocked; through the forward proxy a
// request to its host, plain or tunnelled with Ratchet's CA, is
// intercepted and stamped; `ratchet policy explain`
// and an MCP begin know it.
func TestADeclaredVendorIsGatedThroughTheProxy(t *testing.T) {
	t.Run("badger", func(t *testing.T) { declaredVendorGated(t, "") })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSNOrDefault()
		if err := pgtest.Reachable(dsn); err != nil {
			if pgtest.Required() {
				t.Fatalf("PostgreSQL required: %v", err)
			}
			t.Skip("no PostgreSQL:", err)
		}
		schema := pgtest.Schema(t, dsn, "declared_")
		t.Setenv("RATCHET_TEST_DECLARED_DSN", dsn)
		declaredVendorGated(t, "ledger: {backend: postgres, dsn_env: RATCHET_TEST_DECLARED_DSN, schema: "+schema+"}\n")
	})
}

func declaredVendorGated(t *testing.T, ledgerConfig string) {
	up := &acmeUpstream{}
	fake := httptest.NewServer(up)
	t.Cleanup(fake.Close)
	data := filepath.Join(t.TempDir(), "data")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	s := startServe(t, data, ledgerConfig+
		"auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha("admin-tok")+"', name: alice}]\n"+acmeConfig(fake.URL, caFile))

	type answer struct {
		status          int
		decision, ctype string
		vendorKey, body string
		title, detail   string
		statusInBody    float64
	}
	send := func(client *http.Client, rawURL, key, body string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, rawURL, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer acme_test_key")
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, decision: resp.Header.Get("Ratchet-Decision"), ctype: resp.Header.Get("Content-Type"),
			vendorKey: resp.Header.Get("Ratchet-Vendor-Key"), body: string(b)}
		var p struct {
			Status float64 `json:"status"`
			Title  string  `json:"title"`
			Detail string  `json:"detail"`
		}
		if json.Unmarshal(b, &p) == nil {
			a.statusInBody, a.title, a.detail = p.Status, p.Title, p.Detail
		}
		return a
	}
	charge := func(value, customer string) string {
		return `{"amount": {"value": "` + value + `", "currency": "EUR"}, "customerId": "` + customer + `", "description": "order"}`
	}
	reverse := http.DefaultClient

	first := send(reverse, s.proxy+"/acme/v2/payments", "order-1", charge("10.00", "cst_1"))
	if first.status != http.StatusCreated || first.decision != "execute" {
		t.Fatalf("a 10 EUR charge: %d %s %s, want 201 execute", first.status, first.decision, first.body)
	}
	calls := up.calls()
	if len(calls) != 1 {
		t.Fatalf("the upstream got %d calls, want 1", len(calls))
	}
	if calls[0].key != first.vendorKey || len(calls[0].key) != 36 {
		t.Errorf("the upstream got Idempotency-Key %q, want Ratchet's 36-character vendor key %q", calls[0].key, first.vendorKey)
	}
	if calls[0].body != charge("10.00", "cst_1") {
		t.Errorf("the upstream got the body %q, want it as sent", calls[0].body)
	}

	retry := send(reverse, s.proxy+"/acme/v2/payments", "order-1", charge("10.00", "cst_1"))
	if retry.status != http.StatusCreated || retry.decision != "duplicate" || retry.body != first.body {
		t.Errorf("the retry: %d %s %q, want 201 duplicate with the first answer %q", retry.status, retry.decision, retry.body, first.body)
	}
	conflict := send(reverse, s.proxy+"/acme/v2/payments", "order-1", charge("11.00", "cst_1"))
	if conflict.status != http.StatusBadRequest || conflict.title != "ratchet_idempotency_key_conflict" {
		t.Errorf("the same key with another amount: %d %q, want 400 ratchet_idempotency_key_conflict", conflict.status, conflict.body)
	}
	over := send(reverse, s.proxy+"/acme/v2/payments", "order-2", charge("15.00", "cst_2"))
	if over.status != http.StatusForbidden || over.title != "ratchet_denied" || over.statusInBody != 403 {
		t.Errorf("a 15 EUR charge over the 20 EUR ceiling: %d %q, want 403 with title ratchet_denied", over.status, over.body)
	}
	if over.ctype != "application/problem+json" {
		t.Errorf("the refusal's Content-Type is %q, want the vendor's application/problem+json", over.ctype)
	}
	if !strings.Contains(over.detail, "acme-daily") {
		t.Errorf("the refusal's detail %q does not name the ceiling", over.detail)
	}
	if n := len(up.calls()); n != 1 {
		t.Errorf("the upstream got %d calls after the refusals, want 1", n)
	}

	failed := send(reverse, s.proxy+"/acme/v2/payments", "order-3", `{"amount": {"value": "1.00", "currency": "EUR"}, "customerId": "fail"}`)
	if failed.status != http.StatusInternalServerError {
		t.Errorf("a charge the upstream answers 500: %d %q, want the 500 passed on", failed.status, failed.body)
	}
	blocked := send(reverse, s.proxy+"/acme/v2/payments", "order-3", `{"amount": {"value": "1.00", "currency": "EUR"}, "customerId": "fail"}`)
	if blocked.status != http.StatusConflict || blocked.title != "ratchet_blocked" {
		t.Errorf("its retry: %d %q, want 409 ratchet_blocked (the outcome is unknown)", blocked.status, blocked.body)
	}

	proxyURL, _ := url.Parse(s.proxy)
	forward := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	refund := send(forward, "http://api.acme.test/v2/payments/pay_1/refunds", "", `{"amount": {"value": "1.00", "currency": "EUR"}}`)
	if refund.status != http.StatusCreated || refund.decision != "execute" {
		t.Fatalf("a refund through the forward proxy: %d %s %q, want 201 execute", refund.status, refund.decision, refund.body)
	}
	calls = up.calls()
	if last := calls[len(calls)-1]; last.path != "/v2/payments/pay_1/refunds" || last.key != refund.vendorKey || last.key == "" {
		t.Errorf("the upstream got %s with key %q, want /v2/payments/pay_1/refunds with %q", last.path, last.key, refund.vendorKey)
	}

	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tunnel := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	overTLS := send(tunnel, "https://api.acme.test/v2/payments", "order-4", charge("2.00", "cst_4"))
	if overTLS.status != http.StatusCreated || overTLS.decision != "execute" {
		t.Fatalf("a charge through CONNECT with Ratchet's CA: %d %s %q, want 201 execute", overTLS.status, overTLS.decision, overTLS.body)
	}
	calls = up.calls()
	if last := calls[len(calls)-1]; last.path != "/v2/payments" || last.key != overTLS.vendorKey || last.key == "" {
		t.Errorf("the upstream got %s with key %q, want /v2/payments with %q", last.path, last.key, overTLS.vendorKey)
	}

	ans := explainLive(t, s, "admin-tok", "-X", "POST", s.proxy+"/acme/v2/payments", "-H", "Authorization: Bearer acme_test_key",
		"-H", "Content-Type: application/json", "-d", charge("5.00", "cst_9"))
	if ans.Gated == nil {
		t.Fatalf("explain did not gate the request: %+v", ans)
	}
	g := ans.Gated
	if g.Vendor != "acme" || g.Operation != "acme.payments.create" || g.Begin.EffectType != "payment.charge" {
		t.Errorf("explain: vendor %q operation %q effect type %q, want acme acme.payments.create payment.charge", g.Vendor, g.Operation, g.Begin.EffectType)
	}
	if c := g.Begin.EstimatedCostMicros; c == nil || *c != 5_000_000 {
		t.Errorf("explain: estimated cost %v, want 5000000", c)
	}
	if d := g.Begin.Dimensions["counterparty"]; d != "cst_9" {
		t.Errorf("explain: counterparty %q, want cst_9", d)
	}

	cs := connect(t, s.mcp, "agent-tok")
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
		Arguments: map[string]any{"idempotency_key": "mcp-1", "effect_type": "payment.charge", "vendor": "acme", "estimated_cost_micros": 1}})
	if err != nil || res.IsError {
		t.Fatalf("an MCP begin for acme: %v %+v", err, res)
	}
	k, _ := res.StructuredContent.(map[string]any)["vendor_idempotency_key"].(map[string]any)
	if k["name"] != "Idempotency-Key" || k["location"] != "header" || k["retention_hours"] != float64(24) {
		t.Errorf("an MCP begin's vendor key %v, want acme's rule (header Idempotency-Key, 24 hours)", k)
	}
}
