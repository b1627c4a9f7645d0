package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
)

// TestADeclaredVendorsPaymentCannotSlipPastItsCeiling: from a hostile
// caller's side, on both backends, a real `ratchet serve` with the
// declared vendor acme under a 20 EUR ceiling takes a 10 EUR charge and
// then lets no 15 EUR charge reach the upstream by writing it in a way
// that the vendor's server reads as that charge while Ratchet does not:
// the path in another case or with a format suffix (Express matches paths
// in any case, Rails takes /payments.json for /payments); the amount in
// the query string (Rack and Laravel merge it into a POST's parameters);
// a form or untyped body that is also a JSON string (Rack reads an untyped
// POST as a form, Mollie takes form bodies); the amount under a field name
// in another case (Go's and ASP.NET's decoders match names in any case);
// an amount too large to count in micro-USD (it was declared no cost).
// Paths the server resolves (a trailing slash, dot segments, a percent
// escape), duplicate keys, escapes in names and amounts as numbers are
// counted or refused as before. Each is refused or denied, never sent.
func TestADeclaredVendorsPaymentCannotSlipPastItsCeiling(t *testing.T) {
	t.Run("badger", func(t *testing.T) { declaredVendorAttacked(t, "") })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSNOrDefault()
		if err := pgtest.Reachable(dsn); err != nil {
			if pgtest.Required() {
				t.Fatalf("PostgreSQL required: %v", err)
			}
			t.Skip("no PostgreSQL:", err)
		}
		schema := pgtest.Schema(t, dsn, "declared_attack_")
		t.Setenv("RATCHET_TEST_DECLARED_ATTACK_DSN", dsn)
		declaredVendorAttacked(t, "ledger: {backend: postgres, dsn_env: RATCHET_TEST_DECLARED_ATTACK_DSN, schema: "+schema+"}\n")
	})
}

func declaredVendorAttacked(t *testing.T, ledgerConfig string) {
	up := &acmeUpstream{}
	fake := httptest.NewServer(up)
	t.Cleanup(fake.Close)
	data := filepath.Join(t.TempDir(), "data")
	s := startServe(t, data, ledgerConfig+acmeConfig(fake.URL, filepath.Join(t.TempDir(), "ca.crt")))

	send := func(path, ctype, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.proxy+"/acme"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer acme_test_key")
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const js = "application/json"
	if status, body := send("/v2/payments", js, `{"amount": {"value": "10.00", "currency": "EUR"}, "customerId": "cst_1"}`); status != http.StatusCreated {
		t.Fatalf("a 10 EUR charge: %d %s, want 201", status, body)
	}
	fifteen := `{"amount": {"value": "15.00", "currency": "EUR"}, "customerId": "cst_2"}`
	formString := `"x&amount[value]=15.00&amount[currency]=EUR&customerId=cst_2&y"`
	attacks := []struct{ name, path, ctype, body string }{
		{"the path in upper case", "/V2/PAYMENTS", js, fifteen},
		{"the path in mixed case", "/v2/Payments", js, fifteen},
		{"a format suffix", "/v2/payments.json", js, fifteen},
		{"the amount in the query", "/v2/payments?amount[value]=15.00&amount[currency]=EUR", js, `{"customerId": "cst_2"}`},
		{"the amount in the query, flat", "/v2/payments?amount=15.00", js, `{"customerId": "cst_2"}`},
		{"a form body that is a JSON string", "/v2/payments", "application/x-www-form-urlencoded", formString},
		{"an untyped body that is a JSON string", "/v2/payments", "", formString},
		{"a form body inside a JSON object", "/v2/payments", "application/x-www-form-urlencoded", `{"a": "&amount[value]=15.00&amount[currency]=EUR&"}`},
		{"the amount field in upper case", "/v2/payments", js, `{"Amount": {"value": "15.00", "currency": "EUR"}, "customerId": "cst_2"}`},
		{"the amount's value in upper case", "/v2/payments", js, `{"amount": {"VALUE": "15.00", "currency": "EUR"}, "customerId": "cst_2"}`},
		{"a trailing slash", "/v2/payments/", js, fifteen},
		{"double slashes", "//v2//payments", js, fifteen},
		{"dot segments", "/v2/./x/../payments", js, fifteen},
		{"a percent-encoded segment", "/v2/%70ayments", js, fifteen},
		{"a JSON type in another case", "/v2/payments", "application/JSON; charset=utf-8", fifteen},
		{"the amount twice", "/v2/payments", js, `{"amount": {"value": "1.00", "currency": "EUR"}, "amount": {"value": "15.00", "currency": "EUR"}}`},
		{"the amount twice in two cases", "/v2/payments", js, `{"amount": {"value": "1.00", "currency": "EUR"}, "AMOUNT": {"value": "15.00", "currency": "EUR"}}`},
		{"a unicode escape in the field name", "/v2/payments", js, `{"\u0061mount": {"value": "15.00", "currency": "EUR"}}`},
		{"the amount as a number", "/v2/payments", js, `{"amount": {"value": 15, "currency": "EUR"}}`},
		{"a huge amount", "/v2/payments", js, `{"amount": {"value": "99999999999999999999.00", "currency": "EUR"}}`},
		{"an amount past micro-USD", "/v2/payments", js, `{"amount": {"value": "92233720368547758.07", "currency": "EUR"}}`},
	}
	for _, a := range attacks {
		before := len(up.calls())
		status, body := send(a.path, a.ctype, a.body)
		if status < 400 {
			t.Errorf("%s: %d %s, want it refused or denied", a.name, status, body)
		}
		if n := len(up.calls()); n != before {
			t.Errorf("%s: the upstream got the call (%d calls, was %d)", a.name, n, before)
		}
	}
}
