package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWithTracesOffTheCallersTraceparentGoesOnAsItCame: with no tracer
// provider set (traces off, as package internal/tracing leaves them), the
// proxy starts no spans, and the vendor gets the caller's traceparent
// header unchanged on a gated call and on a read. It runs in a process of
// its own: another test of this package turns traces on for the rest of
// its process.
func TestWithTracesOffTheCallersTraceparentGoesOnAsItCame(t *testing.T) {
	if os.Getenv("RATCHET_TRACES_OFF_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWithTracesOffTheCallersTraceparentGoesOnAsItCame$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RATCHET_TRACES_OFF_CHILD=1")
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "PASS") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	var got atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Values("Traceparent"))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"pi_1","object":"payment_intent"}`)
	}))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		got.Store([]string(nil))
		req, _ := http.NewRequest(method, e.url+"/stripe/v1/payment_intents", strings.NewReader("amount=100&currency=usd"))
		if method == http.MethodPost {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Ratchet-Idempotency-Key", "traces-off")
		}
		req.Header.Set("Traceparent", tp)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if diff := cmp.Diff([]string{tp}, got.Load().([]string)); diff != "" || resp.StatusCode != 200 {
			t.Errorf("%s: status %d, traceparent at the vendor (-want +got):\n%s", method, resp.StatusCode, diff)
		}
	}
}
