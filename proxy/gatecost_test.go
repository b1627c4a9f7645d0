package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/vendors"
)

// The gate alone: proxy.ServeHTTP on an httptest.ResponseRecorder, with an
// engine that answers execute at once and an upstream answered from
// memory, against a bare httputil.ReverseProxy on the same transport.
// What one proxied effect POST costs the proxy itself, without the
// engine's write, the network or the kernel (docs/design.md, "The proxy's
// own work on an effect POST"). Under callgrind, as design.md describes:
//
//	go test -c -o /tmp/proxy.test ./proxy
//	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind /tmp/proxy.test -test.cpu 1 -test.run XXX -test.bench '^BenchmarkGate$' -test.benchtime 1000x
//
// and again at 5000x: the difference over 4000 is a request's instructions
// (two runs agree within 1%). -test.cpu 1: with a second P idle, the
// garbage collector's idle mark worker runs on it, and under valgrind its
// instructions follow the wall clock rather than the work (runs of one
// commit then differ by a third).

// executeAtOnce is an Engine that answers every begin execute, and takes
// every report, without a ledger.
type executeAtOnce struct{ n int }

func (e *executeAtOnce) Begin(_ context.Context, r ledger.BeginRequest) (*ledger.BeginResult, error) {
	e.n++
	lease := time.Now().Add(time.Minute)
	return &ledger.BeginResult{Decision: ledger.DecisionExecute, EffectID: "eff_" + r.IdempotencyKey[len(r.IdempotencyKey)-8:], Attempt: 1,
		State: ledger.StatePending, LeaseExpiresAt: &lease,
		VendorIdempotencyKey: &vendors.Key{Value: "0b6b7d6e-1f2a-8c3d-9e4f-5a6b7c8d9e0f", Location: vendors.InHeader, Name: "Idempotency-Key", Enforced: true, RetentionHours: 24}}, nil
}

func (e *executeAtOnce) Report(context.Context, ledger.ReportRequest) (*ledger.Effect, error) {
	return &ledger.Effect{}, nil
}

func (e *executeAtOnce) MaxLeaseSeconds(string, string, string) int { return 3600 }

// answerFromMemory is an upstream that answers every request as the
// benchmark's Stripe mock does (internal/benchreport).
type answerFromMemory struct{}

const benchAnswer = `{"id":"pi_123","object":"payment_intent","amount":1000,"currency":"usd","status":"succeeded"}`

func (answerFromMemory) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {fmt.Sprint(len(benchAnswer))}},
		Body:          io.NopCloser(strings.NewReader(benchAnswer)),
		ContentLength: int64(len(benchAnswer)), Request: r}, nil
}

// benchPost is the benchmark's effect POST (internal/benchreport's post).
func benchPost(base string, k int) *http.Request {
	r := httptest.NewRequest(http.MethodPost, base+"/v1/payment_intents", bytes.NewReader(fmt.Appendf(nil, "amount=1000&currency=usd&customer=cus_%d", k%50)))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Ratchet-Idempotency-Key", fmt.Sprint("proxy:", 100000000+k))
	return r
}

func BenchmarkGate(b *testing.B) {
	p, err := proxy.New(&executeAtOnce{}, proxy.Options{Upstreams: map[string]string{"stripe": "http://stripe.invalid"},
		CurrencyMicros: map[string]int64{"usd": 1_000_000}, Transport: answerFromMemory{}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, benchPost("/stripe", i))
		if w.Code != http.StatusOK || w.Header().Get(proxy.HeaderDecision) != "execute" {
			b.Fatalf("status %d, decision %q: %s", w.Code, w.Header().Get(proxy.HeaderDecision), w.Body)
		}
	}
}

func BenchmarkGateBare(b *testing.B) {
	u, _ := url.Parse("http://stripe.invalid")
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }, Transport: answerFromMemory{}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w := httptest.NewRecorder()
		rp.ServeHTTP(w, benchPost("", i))
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}
