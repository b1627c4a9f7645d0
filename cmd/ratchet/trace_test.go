package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestTracesThroughServe: with OTEL_EXPORTER_OTLP_ENDPOINT set, a proxied
// call that carries the agent's traceparent reaches the vendor in the same
// trace, the decision's log line names the trace, and the spans are
// exported over OTLP/HTTP by the time serve exits. Without it, the
// caller's traceparent reaches the vendor untouched.
func TestTracesThroughServe(t *testing.T) {
	var exported atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/traces" {
			exported.Add(1)
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	var mu sync.Mutex
	var got []string
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"pi_1","object":"payment_intent"}`)
	}))
	defer vendor.Close()
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	caller := "00-" + trace + "-00f067aa0ba902b7-01"
	post := func(s *server, key string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.proxy+"/stripe/v1/payment_intents", strings.NewReader("amount=100&currency=usd"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Traceparent", caller)
		req.Header.Set("Ratchet-Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Fatalf("decision %q", resp.Header.Get("Ratchet-Decision"))
		}
	}
	extra := "proxy: {upstreams: {stripe: '" + vendor.URL + "'}}\n"

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	s := startServe(t, filepath.Join(t.TempDir(), "data"), extra)
	post(s, "traced")
	mu.Lock()
	sent := got[0]
	mu.Unlock()
	if !strings.HasPrefix(sent, "00-"+trace+"-") || sent == caller {
		t.Fatalf("vendor traceparent %q: want the caller's trace with Ratchet's span as parent", sent)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatal("no exit")
	}
	if !strings.Contains(s.stderr.String(), "msg=begin") || !strings.Contains(s.stderr.String(), "trace_id="+trace) {
		t.Fatalf("the decision line names no trace:\n%s", s.stderr)
	}
	if exported.Load() == 0 {
		t.Fatal("no spans reached the OTLP collector")
	}

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	s = startServe(t, filepath.Join(t.TempDir(), "data"), extra)
	post(s, "untraced")
	mu.Lock()
	defer mu.Unlock()
	if got[1] != caller {
		t.Fatalf("tracing off: the vendor got traceparent %q, want the caller's %q", got[1], caller)
	}
}
