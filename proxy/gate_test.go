package proxy_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// fakeClock is one time for the proxy and the ledger under it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// fixedAnswer is an upstream that counts its calls and answers every one
// with the same status and body.
func fixedAnswer(status int, contentType string, body []byte) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		w.Write(body)
	}))
	return srv, &hits
}

// TestLargeVendorAnswersAreRecorded: a 2xx answer of any size settles the
// effect as succeeded. Around 48 KiB the stored form used to exceed the
// ledger's result limit once encoded, the report was refused, and a
// payment that went through later expired into indeterminate.
func TestLargeVendorAnswersAreRecorded(t *testing.T) {
	jsonOf := func(n int, fill string) []byte {
		head, tail := `{"id":"pi_big","object":"payment_intent","metadata":{"blob":"`, `"}}`
		return []byte(head + strings.Repeat(fill, (n-len(head)-len(tail))/len(fill)) + tail)
	}
	binary := bytes.Repeat([]byte{0xff, 0x00, 0x7f}, 47<<10/3)
	for name, c := range map[string]struct {
		ctype string
		body  []byte
	}{
		"48 KiB of JSON":            {"application/json", jsonOf(48<<10, "x")},
		"47 KiB of JSON":            {"application/json", jsonOf(47<<10, "x")},
		"40 KiB of HTML characters": {"application/json", jsonOf(40<<10, "<&>")},
		"40 KiB of escapes":         {"application/json", jsonOf(40<<10, `\"`)},
		"63 KiB of JSON":            {"application/json", jsonOf(63<<10, "x")},
		"47 KiB not UTF-8":          {"application/octet-stream", binary},
		"2 MiB":                     {"application/json", jsonOf(2<<20, "x")},
	} {
		t.Run(name, func(t *testing.T) {
			up, hits := fixedAnswer(200, c.ctype, c.body)
			defer up.Close()
			e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
			form := "amount=100&currency=usd&customer=cus_1"
			h := map[string]string{"Ratchet-Idempotency-Key": "big:1", "Content-Type": "application/x-www-form-urlencoded"}
			resp := post(t, e.url+"/stripe/v1/payment_intents", form, h)
			if b := readAll(t, resp); resp.StatusCode != 200 || !bytes.Equal([]byte(b), c.body) {
				t.Fatalf("first answer: %d, %d bytes", resp.StatusCode, len(b))
			}
			effs := e.effects(t)
			if len(effs) != 1 {
				t.Fatalf("len(effs) != 1: the vendor said yes, the ledger says %+v", effs)
			}
			if effs[0].State != ledger.StateSucceeded {
				t.Fatalf("effs[0].State != ledger.StateSucceeded: the vendor said yes, the ledger says %+v", effs)
			}
			if len(effs[0].Result) > ledger.MaxResultBytes {
				t.Fatalf("stored result is %d bytes", len(effs[0].Result))
			}
			// A retry never reaches the vendor: it gets the answer back byte
			// for byte, or, where it could not be kept, the object's id.
			resp = post(t, e.url+"/stripe/v1/payment_intents", form, h)
			b := readAll(t, resp)
			replayed := resp.StatusCode == 200 && resp.Header.Get("Ratchet-Replayed") == "true" && bytes.Equal([]byte(b), c.body)
			named := resp.StatusCode == 409 && strings.Contains(b, "ratchet_duplicate") && (c.ctype != "application/json" || strings.Contains(b, "pi_big"))
			if !replayed && !named {
				t.Fatalf("!replayed && !named: retry: %d %q (%d bytes), %d upstream calls", resp.StatusCode, resp.Header.Get("Ratchet-Replayed"), len(b), hits.Load())
			}
			if hits.Load() != 1 {
				t.Fatalf("hits.Load() != 1: retry: %d %q (%d bytes), %d upstream calls", resp.StatusCode, resp.Header.Get("Ratchet-Replayed"), len(b), hits.Load())
			}
			if len(c.body) <= 47<<10 && !replayed {
				t.Fatalf("a %d-byte answer fits and should replay byte for byte", len(c.body))
			}
		})
	}
}

// TestLargeRequestBodiesAreGated: a body over the ledger's payload limit
// but under proxy.max_body_bytes is gated like any other: its content is
// fingerprinted by hash, so retries dedupe and a reused key with other
// content is refused.
func TestLargeRequestBodiesAreGated(t *testing.T) {
	fake := &squareFake{}
	up := httptest.NewServer(fake)
	defer up.Close()
	e := newEnv(t, map[string]string{"square": up.URL}, nil)
	big := func(sdkKey, note string) string {
		return strings.Replace(squarePayment, `"idempotency_key": "caller-random-1"`,
			`"idempotency_key": "`+sdkKey+`", "note": "`+note+strings.Repeat("n", 100<<10)+`"`, 1)
	}
	h := map[string]string{"Ratchet-Idempotency-Key": "big-order:1"}
	resp := post(t, e.url+"/square/v2/payments", big("sdk-1", "a"), h)
	if b := readAll(t, resp); resp.StatusCode != 200 || resp.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("a 100 KiB body: %d %s", resp.StatusCode, b)
	}
	// The same content (the SDK's key aside) is the same action.
	resp = post(t, e.url+"/square/v2/payments", big("sdk-2", "a"), h)
	if b := readAll(t, resp); resp.Header.Get("Ratchet-Replayed") != "true" || fake.hits.Load() != 1 {
		t.Fatalf("retry: %d %s, %d upstream calls", resp.StatusCode, b, fake.hits.Load())
	}
	// The key with other content is a conflict.
	resp = post(t, e.url+"/square/v2/payments", big("sdk-3", "b"), h)
	if b := readAll(t, resp); resp.StatusCode != 400 || !strings.Contains(b, "IDEMPOTENCY_KEY") || fake.hits.Load() != 1 {
		t.Fatalf("other content: %d %s, %d upstream calls", resp.StatusCode, b, fake.hits.Load())
	}
}

// TestSquareCancelByKeyNamesThePayment: on POST /v2/payments/cancel the
// body's idempotency_key is not a per-call key but names the payment to
// cancel, so cancelling B after A is another action.
func TestSquareCancelByKeyNamesThePayment(t *testing.T) {
	up, hits := fixedAnswer(200, "application/json", []byte(`{}`))
	defer up.Close()
	e := newEnvConfig(t, envConfig{}, map[string]string{"square": up.URL}, nil)
	for i, payment := range []string{"payment-A-key", "payment-B-key"} {
		resp := post(t, e.url+"/square/v2/payments/cancel", `{"idempotency_key":"`+payment+`"}`, map[string]string{"Authorization": "Bearer sq"})
		readAll(t, resp)
		if resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Fatalf("resp.Header.Get(\"Ratchet-Decision\") != \"execute\": cancel %s: %s, replayed %q, %d upstream calls", payment, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), hits.Load())
		}
		if resp.Header.Get("Ratchet-Replayed") != "" {
			t.Fatalf("resp.Header.Get(\"Ratchet-Replayed\") != \"\": cancel %s: %s, replayed %q, %d upstream calls", payment, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), hits.Load())
		}
		if hits.Load() != int64(i+1) {
			t.Fatalf("hits.Load() != int64(i+1): cancel %s: %s, replayed %q, %d upstream calls", payment, resp.Header.Get("Ratchet-Decision"), resp.Header.Get("Ratchet-Replayed"), hits.Load())
		}
	}
}

// TestContentKeysDedupeAcrossABucketBoundary: without a key of the
// caller's, identical requests dedupe for dedupe_window after the first,
// wherever the first fell: 2 ms apart across a multiple of the window is
// one action, and one window after the first is a new one.
func TestContentKeysDedupeAcrossABucketBoundary(t *testing.T) {
	const window = time.Hour
	clock := &fakeClock{now: time.Date(2026, 12, 1, 9, 59, 59, 999_000_000, time.UTC)} // 1 ms before a multiple of the window
	up, hits := fixedAnswer(200, "application/json", []byte(`{"pspReference":"PSP1","resultCode":"Authorised"}`))
	defer up.Close()
	e := newEnvConfig(t, envConfig{rules: rules(), clock: clock}, map[string]string{"adyen": up.URL}, func(o *proxy.Options) {
		o.DedupeWindow, o.Clock = window, clock.Now
	})
	send := func() string {
		resp := post(t, e.url+"/adyen/v71/payments", adyenPayment, nil)
		readAll(t, resp)
		return resp.Header.Get("Ratchet-Decision")
	}
	if d := send(); d != "execute" {
		t.Fatalf("first: %s", d)
	}
	clock.Add(2 * time.Millisecond)
	if d := send(); d != "duplicate" || hits.Load() != 1 {
		t.Fatalf("2 ms later, across the boundary: %s, %d upstream calls", d, hits.Load())
	}
	clock.Add(window - 3*time.Millisecond) // 1 ms before the first's window ends
	if d := send(); d != "duplicate" || hits.Load() != 1 {
		t.Fatalf("just inside the window: %s, %d upstream calls", d, hits.Load())
	}
	clock.Add(time.Millisecond)
	if d := send(); d != "execute" || hits.Load() != 2 {
		t.Fatalf("one window after the first: %s, %d upstream calls", d, hits.Load())
	}
}

// reportSpy is the engine with every report kept for inspection.
type reportSpy struct {
	proxy.Engine
	mu      sync.Mutex
	reports []ledger.ReportRequest
}

func (s *reportSpy) Report(ctx context.Context, r ledger.ReportRequest) (*ledger.Effect, error) {
	s.mu.Lock()
	s.reports = append(s.reports, r)
	s.mu.Unlock()
	return s.Engine.Report(ctx, r)
}

// TestReportsNameTheirAttempt: every report the proxy sends names the
// attempt its execute decision was for, so a late report can never settle
// a later attempt.
func TestReportsNameTheirAttempt(t *testing.T) {
	var status atomic.Int64
	status.Store(402)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		io.WriteString(w, `{"id":"pi_1","error":{"type":"card_error","code":"card_declined"}}`)
	}))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	spy := &reportSpy{Engine: e.eng}
	p, err := proxy.New(spy, proxy.Options{Upstreams: map[string]string{"stripe": up.URL}, CurrencyMicros: map[string]int64{"usd": 1_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	h := map[string]string{"Ratchet-Idempotency-Key": "attempts:1", "Content-Type": "application/x-www-form-urlencoded"}
	for i, s := range []int64{402, 402, 200} { // declined twice (failed: a new attempt each), then paid
		status.Store(s)
		resp := post(t, srv.URL+"/stripe/v1/payment_intents", "amount=100&currency=usd", h)
		readAll(t, resp)
		if resp.Header.Get("Ratchet-Decision") != "execute" {
			t.Fatalf("call %d: %s", i+1, resp.Header.Get("Ratchet-Decision"))
		}
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if len(spy.reports) != 3 {
		t.Fatalf("%d reports", len(spy.reports))
	}
	for i, r := range spy.reports {
		if r.Attempt != i+1 {
			t.Fatalf("report %d names attempt %d", i+1, r.Attempt)
		}
	}
	var res struct{ Status int }
	if effs := e.effects(t); len(effs) != 1 || effs[0].State != ledger.StateSucceeded || effs[0].Attempt != 3 || json.Unmarshal(effs[0].Result, &res) != nil || res.Status != 200 {
		t.Fatalf("effects: %+v", effs)
	}
}

// TestDotSegmentsDoNotEscapePolicy: a path is cleaned before it is
// classified, and the cleaned path is what is forwarded, so dot segments,
// double slashes and encoded dots name the same effect type (and policy:
// a $50 ceiling on stripe.payment_intents.*) as the plain path.
// /v1/./payment_intents was stripe.x_.update, outside that policy, and was
// forwarded as sent. A ';' (path parameters, which Java servers strip) or
// a '\' is refused.
func TestDotSegmentsDoNotEscapePolicy(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		io.WriteString(w, `{"id":"pi_1","object":"payment_intent"}`)
	}))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	send := func(path, body string) (*http.Response, string) {
		resp := post(t, e.url+"/stripe"+path, body, map[string]string{"Authorization": "Bearer sk_test_123", "Content-Type": "application/x-www-form-urlencoded"})
		return resp, readAll(t, resp)
	}
	for _, p := range []string{"/v1/payment_intents", "/v1/./payment_intents", "/v1/x/../payment_intents", "//v1//payment_intents",
		"/v1/%2e/payment_intents", "/v1/x/%2e%2e/payment_intents", "/v1/payment_intents/"} {
		if resp, b := send(p, "amount=6000000&currency=usd"); resp.Header.Get("Ratchet-Decision") == "execute" {
			t.Fatalf("%s: $60,000 over a $50 ceiling executed (%s)", p, b)
		}
	}
	if resp, b := send("/v1/x/../payment_intents", "amount=100&currency=usd"); resp.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("$1: %s", b)
	}
	if effs := e.effects(t); effs[len(effs)-1].Operation != "stripe.payment_intents.create" || len(paths) != 1 || paths[0] != "/v1/payment_intents" {
		t.Fatalf("effect type %q; the upstream saw %q", effs[len(effs)-1].EffectType, paths)
	}
	for _, p := range []string{"/v1/payment_intents;x=1", "/v1/payment_intents%3Bx", `/v1\payment_intents`} {
		if resp, b := send(p, "amount=100&currency=usd"); resp.StatusCode != 400 || !strings.Contains(b, "nothing was sent") || len(paths) != 1 {
			t.Fatalf("%s: %d %s; the upstream saw %q", p, resp.StatusCode, b, paths)
		}
	}
}

// TestCompressedVendorAnswersAreReadAsSent: a caller that asks for gzip
// itself (Node SDKs send Accept-Encoding) must not make Ratchet classify,
// store and replay compressed bytes: a gated request goes out without the
// caller's Accept-Encoding, so the transport negotiates and decompresses,
// and the vendor's JSON is what Ratchet reads (an Adyen-style 200 with a
// refusal inside it, or a vendor reference).
func TestCompressedVendorAnswersAreReadAsSent(t *testing.T) {
	answer := []byte(`{"id":"pi_gz","object":"payment_intent","status":"succeeded"}`)
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			zw.Write(answer)
			zw.Close()
			return
		}
		w.Write(answer)
	}))
	defer up.Close()
	e := newEnv(t, map[string]string{"stripe": up.URL}, nil)
	form := "amount=100&currency=usd&customer=cus_1"
	h := map[string]string{"Ratchet-Idempotency-Key": "gz:1", "Content-Type": "application/x-www-form-urlencoded", "Accept-Encoding": "gzip"}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/stripe/v1/payment_intents", strings.NewReader(form))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	// The caller's own Accept-Encoding makes Go's client hand back raw
	// bytes, as a Node SDK sees them.
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(zr)
	}
	if !bytes.Equal(body, answer) {
		t.Fatalf("the caller got %q", body)
	}
	effs := e.effects(t)
	if diff := cmp.Diff([]outcome{{ledger.StateSucceeded, "pi_gz"}}, outcomes(effs)); diff != "" {
		t.Fatalf("the ledger read the answer as (-want +got):\n%s", diff)
	}
	resp = post(t, e.url+"/stripe/v1/payment_intents", form, h)
	if b := readAll(t, resp); resp.Header.Get("Ratchet-Replayed") != "true" || b != string(answer) || hits.Load() != 1 {
		t.Fatalf("the replay: %q %q, %d upstream calls", resp.Header.Get("Ratchet-Replayed"), b, hits.Load())
	}
}
