package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// squareFake answers CreatePayment as Square documents it, recording what
// it received.
type squareFake struct {
	mu     sync.Mutex
	bodies []map[string]any
	auth   []string
	hits   atomic.Int64
}

func (f *squareFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization")+"|"+r.Header.Get("Ratchet-Run-Id"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/v2/payments" {
		w.WriteHeader(404)
		io.WriteString(w, `{"errors":[{"category":"INVALID_REQUEST_ERROR","code":"NOT_FOUND","detail":"no such endpoint"}]}`)
		return
	}
	io.WriteString(w, `{"payment":{"id":"R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY","status":"COMPLETED","amount_money":{"amount":1000,"currency":"USD"}}}`)
}

func post(t testing.TB, u, body string, h map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return string(b)
}

const squarePayment = `{"idempotency_key": "caller-random-1", "source_id": "ccof:GaJGNaZa8x4OgDJn4GB", "amount_money": {"amount": 1000, "currency": "USD"}, "customer_id": "W92WH6P11H4Z77CTET0RNTGFW8", "location_id": "L88917AVBK2S5"}`

func TestSquareBodyKeyAndCallersKey(t *testing.T) {
	fake := &squareFake{}
	up := httptest.NewServer(fake)
	defer up.Close()
	e := newEnv(t, map[string]string{"square": up.URL}, nil)

	resp := post(t, e.url+"/square/v2/payments", squarePayment, map[string]string{"Authorization": "Bearer sq-token", "Ratchet-Run-Id": "r1"})
	body := readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("resp.StatusCode != 200: create: %d %s", resp.StatusCode, body)
	}
	if resp.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": create: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY") {
		t.Fatalf("!strings.Contains(body, \"R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY\"): create: %d %s", resp.StatusCode, body)
	}
	got := fake.bodies[0]
	key, _ := got["idempotency_key"].(string)
	if !uuidV8.MatchString(key) {
		t.Fatalf("!uuidV8.MatchString(key): square received idempotency_key %q", key)
	}
	if key != resp.Header.Get("Ratchet-Vendor-Key") {
		t.Fatalf("key != resp.Header.Get(\"Ratchet-Vendor-Key\"): square received idempotency_key %q", key)
	}
	if got["customer_id"] != "W92WH6P11H4Z77CTET0RNTGFW8" {
		t.Fatalf("got[\"customer_id\"] != \"W92WH6P11H4Z77CTET0RNTGFW8\": body disturbed: %v", got)
	}
	if got["source_id"] != "ccof:GaJGNaZa8x4OgDJn4GB" {
		t.Fatalf("got[\"source_id\"] != \"ccof:GaJGNaZa8x4OgDJn4GB\": body disturbed: %v", got)
	}
	// Authorization passes through; Ratchet's own headers do not.
	if fake.auth[0] != "Bearer sq-token|" {
		t.Fatalf("upstream headers: %q", fake.auth[0])
	}
	// The caller's key again with the same content is the same call, with
	// a refreshed token too (Square's location names the merchant).
	resp = post(t, e.url+"/square/v2/payments", squarePayment, map[string]string{"Authorization": "Bearer sq-token-refreshed"})
	if b := readAll(t, resp); resp.Header.Get("Ratchet-Replayed") != "true" || b != `{"payment":{"id":"R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY","status":"COMPLETED","amount_money":{"amount":1000,"currency":"USD"}}}` {
		t.Fatalf("replay: %d %q %s", resp.StatusCode, resp.Header.Get("Ratchet-Replayed"), b)
	}
	// A new key of the caller's is a new call, identical content or not.
	retry := strings.Replace(squarePayment, "caller-random-1", "caller-random-2", 1)
	resp = post(t, e.url+"/square/v2/payments", retry, map[string]string{"Authorization": "Bearer sq-token"})
	readAll(t, resp)
	if resp.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": a new key: %s, hits %d", resp.Header.Get("Ratchet-Decision"), fake.hits.Load())
	}
	if fake.hits.Load() != 2 {
		t.Fatalf("fake.hits.Load() != 2: a new key: %s, hits %d", resp.Header.Get("Ratchet-Decision"), fake.hits.Load())
	}
	effs := e.effects(t)
	if len(effs) != 2 {
		t.Fatalf("len(effs) != 2: effects: %+v", effs)
	}
	if effs[0].Vendor != "square" {
		t.Fatalf("effs[0].Vendor != \"square\": effects: %+v", effs)
	}
	if effs[0].DimensionNames[0] != "counterparty" {
		t.Fatalf("effs[0].DimensionNames[0] != \"counterparty\": effects: %+v", effs)
	}
	if *effs[0].EstimatedCostMicros != 10_000_000 {
		t.Fatalf("*effs[0].EstimatedCostMicros != 10_000_000: effects: %+v", effs)
	}
	// Reads pass through.
	r, _ := http.Get(e.url + "/square/v2/locations")
	readAll(t, r)
	if r.Header.Get("Ratchet-Decision") != "" {
		t.Fatal("r.Header.Get(\"Ratchet-Decision\") != \"\":", "GET was gated")
	}
	if fake.hits.Load() != 3 {
		t.Fatal("fake.hits.Load() != 3:", "GET was gated")
	}
}

// adyenFake answers /v71/payments; how depends on mode.
type adyenFake struct {
	hits atomic.Int64
	keys sync.Map
	mode string // "ok", "500", "hang", "slow"
	gate chan struct{}
}

func (f *adyenFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.hits.Add(1)
	f.keys.Store(r.Header.Get("idempotency-key"), true)
	switch f.mode {
	case "500":
		w.WriteHeader(500)
		io.WriteString(w, `{"status":500,"errorCode":"901","message":"Invalid Merchant Account","errorType":"security"}`)
		return
	case "hang":
		select {
		case <-r.Context().Done():
		case <-f.gate:
		}
		return
	case "slow":
		<-f.gate // answers only after the test lets it
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"pspReference":"993617895204576J","resultCode":"Authorised","amount":{"currency":"EUR","value":1000},"merchantReference":"YOUR_ORDER_NUMBER"}`)
}

const adyenPayment = `{"amount":{"currency":"EUR","value":1000},"reference":"YOUR_ORDER_NUMBER","paymentMethod":{"type":"scheme"},"shopperReference":"shopper-1","merchantAccount":"YOUR_MERCHANT_ACCOUNT"}`

func TestAdyenHeaderKeyAndPolicy(t *testing.T) {
	fake := &adyenFake{mode: "ok"}
	up := httptest.NewServer(fake)
	defer up.Close()
	e := newEnv(t, map[string]string{"adyen": up.URL}, nil)
	resp := post(t, e.url+"/adyen/v71/payments", adyenPayment, map[string]string{"Ratchet-Idempotency-Key": "adyen:1"})
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("resp.StatusCode != 200: adyen: %d", resp.StatusCode)
	}
	if resp.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": adyen: %d", resp.StatusCode)
	}
	if _, ok := fake.keys.Load(resp.Header.Get("Ratchet-Vendor-Key")); !ok {
		t.Fatal("adyen did not receive Ratchet's key in idempotency-key")
	}
	eff := e.effects(t)[0]
	if eff.State != ledger.StateSucceeded {
		t.Fatalf("eff.State != ledger.StateSucceeded: adyen effect: %+v", eff)
	}
	if eff.VendorReference != "993617895204576J" {
		t.Fatalf("eff.VendorReference != \"993617895204576J\": adyen effect: %+v", eff)
	}
	if *eff.EstimatedCostMicros != 10_800_000 {
		t.Fatalf("*eff.EstimatedCostMicros != 10_800_000: adyen effect: %+v", eff)
	}
	// The policy caps this type's lease at 3 s, below the proxy's own
	// (timeout + 15 s): the proxy asks for the cap instead of being refused.
	if eff.LeaseExpiresAt == nil {
		t.Fatalf("eff.LeaseExpiresAt == nil: adyen lease: %v from %v", eff.LeaseExpiresAt, eff.CreatedAt)
	}
	if eff.LeaseExpiresAt.Sub(eff.CreatedAt) != 3*time.Second {
		t.Fatalf("eff.LeaseExpiresAt.Sub(eff.CreatedAt) != 3*time.Second: adyen lease: %v from %v", eff.LeaseExpiresAt, eff.CreatedAt)
	}
	// A denied effect type: 403 in Adyen's error shape, upstream untouched.
	resp = post(t, e.url+"/adyen/v71/payments/993617895204576J/refunds", `{"amount":{"currency":"EUR","value":500}}`, nil)
	var ae struct {
		Status    int    `json:"status"`
		ErrorCode string `json:"errorCode"`
		Message   string `json:"message"`
	}
	json.Unmarshal([]byte(readAll(t, resp)), &ae)
	if resp.StatusCode != 403 {
		t.Fatalf("resp.StatusCode != 403: denied: %d %+v hits %d", resp.StatusCode, ae, fake.hits.Load())
	}
	if ae.ErrorCode != "ratchet_denied" {
		t.Fatalf("ae.ErrorCode != \"ratchet_denied\": denied: %d %+v hits %d", resp.StatusCode, ae, fake.hits.Load())
	}
	if !strings.Contains(ae.Message, "policy_denied") {
		t.Fatalf("!strings.Contains(ae.Message, \"policy_denied\"): denied: %d %+v hits %d", resp.StatusCode, ae, fake.hits.Load())
	}
	if fake.hits.Load() != 1 {
		t.Fatalf("fake.hits.Load() != 1: denied: %d %+v hits %d", resp.StatusCode, ae, fake.hits.Load())
	}
}

func TestUnknownOutcomesBlockRetries(t *testing.T) {
	for _, mode := range []string{"500", "hang", "client-gives-up"} {
		t.Run(mode, func(t *testing.T) {
			fake := &adyenFake{mode: mode, gate: make(chan struct{})}
			if mode == "client-gives-up" {
				fake.mode = "hang"
			}
			up := httptest.NewServer(fake)
			defer up.Close()
			defer close(fake.gate)
			e := newEnv(t, map[string]string{"adyen": up.URL}, func(o *proxy.Options) {
				if mode == "hang" {
					o.UpstreamTimeout = 300 * time.Millisecond
				}
			})
			hc := &http.Client{}
			if mode == "client-gives-up" {
				hc.Timeout = 300 * time.Millisecond
			}
			req, _ := http.NewRequest(http.MethodPost, e.url+"/adyen/v71/payments", strings.NewReader(adyenPayment))
			resp, err := hc.Do(req)
			switch mode {
			case "500":
				readAll(t, resp)
				if resp.StatusCode != 500 {
					t.Fatalf("status %d", resp.StatusCode)
				}
			case "hang":
				body := readAll(t, resp)
				if resp.StatusCode != http.StatusGatewayTimeout {
					t.Fatalf("resp.StatusCode != http.StatusGatewayTimeout: hang: %d %s", resp.StatusCode, body)
				}
				if !strings.Contains(body, "unknown") {
					t.Fatalf("!strings.Contains(body, \"unknown\"): hang: %d %s", resp.StatusCode, body)
				}
			default:
				if err == nil {
					t.Fatal("the client should have timed out")
				}
			}
			// The effect becomes indeterminate (the report may land just
			// after the client gave up).
			deadline := time.Now().Add(10 * time.Second)
			for {
				effs := e.effects(t)
				if len(effs) == 1 && effs[0].State == ledger.StateIndeterminate && effs[0].Reason == ledger.ReasonReportedUnknown {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("effects: %+v", effs)
				}
				time.Sleep(10 * time.Millisecond)
			}
			// A retry is blocked without reaching the upstream.
			resp = post(t, e.url+"/adyen/v71/payments", adyenPayment, nil)
			body := readAll(t, resp)
			if resp.StatusCode != 409 {
				t.Fatalf("resp.StatusCode != 409: retry: %d %s %s hits %d", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
			}
			if resp.Header.Get("Ratchet-Decision") != "blocked" {
				t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"blocked\": retry: %d %s %s hits %d", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
			}
			if fake.hits.Load() != 1 {
				t.Fatalf("fake.hits.Load() != 1: retry: %d %s %s hits %d", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
			}
			if !strings.Contains(body, "ratchet_blocked") {
				t.Fatalf("!strings.Contains(body, \"ratchet_blocked\"): retry: %d %s %s hits %d", resp.StatusCode, resp.Header.Get("Ratchet-Decision"), body, fake.hits.Load())
			}
		})
	}
}

func TestConcurrentIdenticalRequestsReachUpstreamOnce(t *testing.T) {
	fake := &adyenFake{mode: "slow", gate: make(chan struct{})}
	up := httptest.NewServer(fake)
	defer up.Close()
	e := newEnv(t, map[string]string{"adyen": up.URL}, nil)
	const n = 50
	var wg sync.WaitGroup
	results := make(chan string, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			resp := post(t, e.url+"/adyen/v71/payments", adyenPayment, nil)
			readAll(t, resp)
			results <- resp.Header.Get("Ratchet-Decision") + " " + http.StatusText(resp.StatusCode)
		})
	}
	close(start)
	// Let the one execute finish only after the others were answered.
	deadline := time.Now().Add(10 * time.Second)
	for len(results) < n-1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(fake.gate)
	wg.Wait()
	close(results)
	counts := map[string]int{}
	for r := range results {
		counts[r]++
	}
	if fake.hits.Load() != 1 {
		t.Fatalf("fake.hits.Load() != 1: upstream hits %d, answers %v", fake.hits.Load(), counts)
	}
	if counts["execute OK"] != 1 {
		t.Fatalf("counts[\"execute OK\"] != 1: upstream hits %d, answers %v", fake.hits.Load(), counts)
	}
	if counts["in_flight Conflict"] != n-1 {
		t.Fatalf("counts[\"in_flight Conflict\"] != n-1: upstream hits %d, answers %v", fake.hits.Load(), counts)
	}
}

func TestLimitsAndRouting(t *testing.T) {
	fake := &squareFake{}
	up := httptest.NewServer(fake)
	defer up.Close()
	e := newEnv(t, map[string]string{"square": up.URL}, func(o *proxy.Options) { o.MaxBodyBytes = 1024 })
	resp := post(t, e.url+"/square/v2/payments", `{"note":"`+strings.Repeat("x", 2000)+`"}`, nil)
	body := readAll(t, resp)
	if resp.StatusCode != 413 {
		t.Fatalf("resp.StatusCode != 413: oversize: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(body, "RATCHET_BODY_TOO_LARGE") {
		t.Fatalf("!strings.Contains(body, \"RATCHET_BODY_TOO_LARGE\"): oversize: %d %s", resp.StatusCode, body)
	}
	if fake.hits.Load() != 0 {
		t.Fatalf("fake.hits.Load() != 0: oversize: %d %s", resp.StatusCode, body)
	}
	if len(e.effects(t)) != 0 {
		t.Fatalf("len(e.effects(t)) != 0: oversize: %d %s", resp.StatusCode, body)
	}
	resp = post(t, e.url+"/nowhere/v1/x", `{}`, nil)
	if readAll(t, resp); resp.StatusCode != 404 {
		t.Fatalf("unknown vendor: %d", resp.StatusCode)
	}
	// Plain-HTTP forward proxying to a host that is neither a vendor nor
	// allowed is refused.
	proxyURL, _ := url.Parse(e.url)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	r, err := hc.Get("http://example.com/")
	if err != nil {
		t.Fatalf("err != nil: open proxy: %v %v", r, err)
	}
	if r.StatusCode != 403 {
		t.Fatalf("r.StatusCode != 403: open proxy: %v %v", r, err)
	}
	r.Body.Close()
	// A payment without an amount where an approval threshold applies is
	// refused with cost_required, in Square's error shape.
	resp = post(t, e.url+"/square/v2/payments", `{"source_id":"cnon:x"}`, nil)
	if b := readAll(t, resp); resp.StatusCode != 400 || !strings.Contains(b, "RATCHET_COST_REQUIRED") || fake.hits.Load() != 0 {
		t.Fatalf("cost required: %d %s", resp.StatusCode, b)
	}
	// A body Square cannot carry a key in (not a JSON object) is refused
	// before it reaches Square, and the attempt is recorded as failed.
	resp = post(t, e.url+"/square/v2/refunds", `["not","an","object"]`, map[string]string{"Ratchet-Idempotency-Key": "bad-body"})
	if b := readAll(t, resp); resp.StatusCode != 400 || fake.hits.Load() != 0 || !strings.Contains(b, "not a JSON object") {
		t.Fatalf("unstampable body: %d %s", resp.StatusCode, b)
	}
	if effs := e.effects(t); len(effs) != 1 || effs[0].State != ledger.StateFailed {
		t.Fatalf("unstampable body effect: %+v", effs)
	}
}

func TestAllowHostsTunnel(t *testing.T) {
	allowed := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tunnelled") }))
	defer allowed.Close()
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "should not be reached") }))
	defer other.Close()
	host := strings.TrimPrefix(allowed.URL, "https://")
	e := newEnv(t, map[string]string{}, func(o *proxy.Options) {
		o.AllowHosts = []string{host, "*.localhost.example:443"}
	})
	proxyURL, _ := url.Parse(e.url)
	pool := x509.NewCertPool()
	pool.AddCert(allowed.Certificate())
	pool.AddCert(other.Certificate())
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get(allowed.URL)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); b != "tunnelled" {
		t.Fatalf("tunnel: %s", b)
	}
	if resp, err := hc.Get(other.URL); err == nil {
		resp.Body.Close()
		t.Fatal("a loopback host not listed exactly was reached")
	}
	// A raw CONNECT to a non-listed host gets 403.
	req, _ := http.NewRequest(http.MethodConnect, e.url, nil)
	req.Host = "internal.example:443"
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("err != nil: CONNECT elsewhere: %v %v", r, err)
	}
	if r.StatusCode != 403 {
		t.Fatalf("r.StatusCode != 403: CONNECT elsewhere: %v %v", r, err)
	}
	r.Body.Close()
}

// TestOddVendorTextIsStillReported: what a vendor writes into its answer
// (a refusal reason, an object id) reaches the ledger only as text the
// ledger accepts, so the outcome is never lost over it.
func TestOddVendorTextIsStillReported(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// 600 two-byte characters: a cut at 1024 bytes would split one.
		io.WriteString(w, `{"pspReference":"PSP\u0001X","resultCode":"Refused","refusalReason":"`+strings.Repeat("é", 600)+`"}`)
	}))
	defer up.Close()
	e := newEnv(t, map[string]string{"adyen": up.URL}, nil)
	resp := post(t, e.url+"/adyen/v71/payments", adyenPayment, nil)
	readAll(t, resp)
	effs := e.effects(t)
	if diff := cmp.Diff([]outcome{{ledger.StateFailed, ""}}, outcomes(effs)); diff != "" {
		t.Fatalf("the refusal was not recorded (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(effs[0].Error, "Refused: éé") {
		t.Fatalf("!strings.HasPrefix(effs[0].Error, \"Refused: éé\"): the refusal was not recorded: %+v", effs)
	}
}

func TestInterceptHostsInForwardMode(t *testing.T) {
	// Adyen's live hosts carry the merchant's prefix, so they are named in
	// InterceptHosts; the forward proxy then intercepts exactly those.
	fake := &adyenFake{mode: "ok"}
	up := httptest.NewServer(fake)
	defer up.Close()
	live := "acme-checkout-live.adyenpayments.com"
	e := newEnv(t, map[string]string{"adyen": up.URL}, func(o *proxy.Options) {
		o.InterceptHosts = map[string][]string{"adyen": {live}}
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca.PEM())
	proxyURL, _ := url.Parse(e.url)
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodPost, "https://"+live+"/checkout/v71/payments", strings.NewReader(adyenPayment))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Ratchet-Idempotency-Key", "live:1")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 200 {
		t.Fatalf("resp.StatusCode != 200: live host: %d %v, %d upstream hits", resp.StatusCode, resp.Header, fake.hits.Load())
	}
	if resp.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": live host: %d %v, %d upstream hits", resp.StatusCode, resp.Header, fake.hits.Load())
	}
	if fake.hits.Load() != 1 {
		t.Fatalf("fake.hits.Load() != 1: live host: %d %v, %d upstream hits", resp.StatusCode, resp.Header, fake.hits.Load())
	}
	if _, ok := fake.keys.Load(resp.Header.Get("Ratchet-Vendor-Key")); !ok {
		t.Fatal("the upstream did not receive Ratchet's key")
	}
	// Another merchant's live host is not named: refused, not tunnelled.
	if resp, err := hc.Post("https://other-checkout-live.adyenpayments.com/checkout/v71/payments", "application/json", strings.NewReader(adyenPayment)); err == nil {
		resp.Body.Close()
		t.Fatal("an unnamed live host was reached")
	}
	// Misconfigurations are refused when the proxy is built.
	for name, hosts := range map[string]map[string][]string{
		"no upstream": {"square": {"sq.example.com"}},
		"wildcard":    {"adyen": {"*.adyenpayments.com"}},
		"with port":   {"adyen": {live + ":443"}},
		"another's":   {"adyen": {"api.stripe.com"}},
	} {
		_, err := proxy.New(e.eng, proxy.Options{Upstreams: map[string]string{"adyen": up.URL, "stripe": up.URL}, InterceptHosts: hosts})
		if err == nil {
			t.Errorf("%s: InterceptHosts %v accepted", name, hosts)
		}
	}
}

// TestUpstreamConnectionsAreKept checks that requests sent at once reuse
// the proxy's connections to the vendor rather than open one each (with
// a TLS handshake, against a real vendor).
func TestUpstreamConnectionsAreKept(t *testing.T) {
	var opened atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"id":"ch_1"}`) }))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const callers, calls = 16, 30
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for range calls {
				resp, err := hc.Get(e.url + "/stripe/v1/charges/ch_1")
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if n := opened.Load(); n > callers+4 {
		t.Fatalf("%d requests from %d callers opened %d upstream connections", callers*calls, callers, n)
	}
}

// TestAnAnswerInAnEncodingNotAskedForIsUnknown: the transport asks for
// gzip and decodes it; an upstream that answers in another encoding (or
// twice gzipped) leaves a body Ratchet cannot read, so an Adyen 200 whose
// resultCode might say "Refused" is not taken as succeeded by its status:
// the outcome is unknown and a retry is blocked.
func TestAnAnswerInAnEncodingNotAskedForIsUnknown(t *testing.T) {
	for _, enc := range []string{"br", "deflate", "gzip, gzip"} {
		t.Run(enc, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Encoding", enc)
				w.WriteHeader(200)
				w.Write([]byte("\x1b\x00\xf8\xff opaque bytes, not JSON"))
			}))
			defer up.Close()
			e := newEnv(t, map[string]string{"adyen": up.URL}, nil)
			readAll(t, post(t, e.url+"/adyen/v71/payments", adyenPayment, nil))
			var states []ledger.State
			for _, eff := range e.effects(t) {
				states = append(states, eff.State)
			}
			if diff := cmp.Diff([]ledger.State{ledger.StateIndeterminate}, states); diff != "" {
				t.Fatalf("states after a 200 in %q (-want +got):\n%s", enc, diff)
			}
		})
	}
}
