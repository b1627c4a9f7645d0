package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/proxy"
)

// TestTwoIdenticalKeylessPurchasesHoursApartAreTwo: without any key, the
// same purchase sent again within minutes is the first one retried
// (replayed, and the answer says it was by content); sent again hours
// later it is a second purchase, which reaches the vendor. (The window
// was 24 h, and merged them.)
func TestTwoIdenticalKeylessPurchasesHoursApartAreTwo(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	up, hits := fixedAnswer(200, "application/json", []byte(`{"pspReference":"PSP1","resultCode":"Authorised"}`))
	defer up.Close()
	e := newEnvConfig(t, envConfig{rules: rules(), clock: clock}, map[string]string{"adyen": up.URL}, func(o *proxy.Options) { o.Clock = clock.Now })
	send := func() *http.Response {
		resp := post(t, e.url+"/adyen/v71/payments", adyenPayment, nil)
		readAll(t, resp)
		return resp
	}
	if d := send().Header.Get("Ratchet-Decision"); d != "execute" {
		t.Fatalf("first: %s", d)
	}
	clock.Add(2 * time.Minute)
	resp := send()
	if d := resp.Header.Get("Ratchet-Decision"); d != "duplicate" {
		t.Fatalf("two minutes later: %s, want duplicate", d)
	}
	if got := resp.Header.Get("Ratchet-Deduped"); got != "content; window=10m0s" {
		t.Errorf("Ratchet-Deduped %q, want %q", got, "content; window=10m0s")
	}
	if hits.Load() != 1 {
		t.Errorf("%d upstream calls after the retry, want 1", hits.Load())
	}
	clock.Add(3 * time.Hour)
	if d := send().Header.Get("Ratchet-Decision"); d != "execute" {
		t.Fatalf("three hours later: %s, want a second purchase (execute)", d)
	}
	if hits.Load() != 2 {
		t.Errorf("%d upstream calls after the second purchase, want 2", hits.Load())
	}
	// A duplicate by the caller's own key does not say "content".
	h := map[string]string{"Idempotency-Key": "order-7"}
	post(t, e.url+"/adyen/v71/payments", adyenPayment, h).Body.Close()
	resp = post(t, e.url+"/adyen/v71/payments", adyenPayment, h)
	readAll(t, resp)
	if d, got := resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Deduped"); d != "duplicate" || got != "" {
		t.Errorf("keyed retry: %s with Ratchet-Deduped %q, want duplicate without it", d, got)
	}
}

// TestDedupeWindowPerVendor: proxy.dedupe_windows sets one vendor's window.
func TestDedupeWindowPerVendor(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	up, hits := fixedAnswer(200, "application/json", []byte(`{"pspReference":"PSP1","resultCode":"Authorised"}`))
	defer up.Close()
	e := newEnvConfig(t, envConfig{rules: rules(), clock: clock}, map[string]string{"adyen": up.URL}, func(o *proxy.Options) {
		o.Clock, o.DedupeWindows = clock.Now, map[string]time.Duration{"adyen": time.Hour}
	})
	post(t, e.url+"/adyen/v71/payments", adyenPayment, nil).Body.Close()
	clock.Add(30 * time.Minute)
	resp := post(t, e.url+"/adyen/v71/payments", adyenPayment, nil)
	readAll(t, resp)
	if d, got := resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Deduped"); d != "duplicate" || got != "content; window=1h0m0s" {
		t.Errorf("30 minutes later under adyen's 1 h window: %s, Ratchet-Deduped %q", d, got)
	}
	if hits.Load() != 1 {
		t.Errorf("%d upstream calls, want 1", hits.Load())
	}
}
