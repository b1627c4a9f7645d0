package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/proxy"
)

// attemptRecorder is a Transport that keeps the attempt each request it
// sends carries (proxy.AttemptOf), as a recording Transport would.
type attemptRecorder struct {
	mu   sync.Mutex
	seen []proxy.Attempt
	rt   http.RoundTripper
}

func (a *attemptRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	at, ok := proxy.AttemptOf(r.Context())
	a.mu.Lock()
	if ok {
		a.seen = append(a.seen, at)
	} else {
		a.seen = append(a.seen, proxy.Attempt{Vendor: "none"})
	}
	a.mu.Unlock()
	return a.rt.RoundTrip(r)
}

// TestTheVendorRequestCarriesItsAttempt: a gated call reaches the
// Transport with its vendor, effect, attempt and the key stamped on it in
// its context; a read carries none.
func TestTheVendorRequestCarriesItsAttempt(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"pi_1","object":"payment_intent"}`)
	}))
	t.Cleanup(up.Close)
	rec := &attemptRecorder{rt: http.DefaultTransport}
	e := newEnv(t, map[string]string{"stripe": up.URL}, func(o *proxy.Options) { o.Transport = rec })

	req, _ := http.NewRequest(http.MethodPost, e.url+"/stripe/v1/payment_intents", strings.NewReader("amount=1000&currency=usd&customer=cus_1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(proxy.HeaderIdempotencyKey, "order:1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	get, _ := http.Get(e.url + "/stripe/v1/payment_intents/pi_1")
	get.Body.Close()

	want := []proxy.Attempt{{Vendor: "stripe", EffectID: resp.Header.Get(proxy.HeaderEffectID), Attempt: 1, VendorKey: resp.Header.Get(proxy.HeaderVendorKey)},
		{Vendor: "none"}}
	if want[0].EffectID == "" || want[0].VendorKey == "" {
		t.Fatalf("the call was not executed: %d %v", resp.StatusCode, resp.Header)
	}
	if diff := cmp.Diff(want, rec.seen); diff != "" {
		t.Errorf("attempts the Transport saw (-want +got):\n%s", diff)
	}
}
