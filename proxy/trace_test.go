package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/internal/tracing"
	"github.com/ratchet-mcp/ratchet/internal/tracingtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// headerLog keeps the traceparent of every request sent upstream.
type headerLog struct {
	mu  sync.Mutex
	got []string
	rt  http.RoundTripper
}

func (h *headerLog) RoundTrip(r *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.got = append(h.got, r.Header.Get("Traceparent"))
	h.mu.Unlock()
	return h.rt.RoundTrip(r)
}

// withTraceparent is the agent's side: every request carries its trace.
type withTraceparent struct{ tp string }

func (w withTraceparent) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Traceparent", w.tp)
	return http.DefaultTransport.RoundTrip(r)
}

const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
	// payloadMarker and the customer are in the request; no span may
	// carry them, nor the idempotency key.
	payloadMarker = "PAYLOAD-MARKER-7f3a"
	customer      = "cus_DIMENSION_VALUE_9"
)

// TestAProxiedStripeCallIsOneTraceFromAgentToVendor: stripe-go, through the
// reverse proxy, against stripe-mock, with the caller's traceparent: the
// proxy's span, the engine's decision spans and the vendor call are in the
// caller's trace, the vendor request carries traceparent with the vendor
// call's span as parent, and no span attribute holds a payload or a
// dimension value.
func TestAProxiedStripeCallIsOneTraceFromAgentToVendor(t *testing.T) {
	exp := tracingtest.InMemory(t)
	mock := stripemock.Start(t)
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{})
	ca, _ := proxy.LoadOrCreateCA(dir)
	upstream := &headerLog{rt: http.DefaultTransport}
	p, err := proxy.New(tracing.Engine{Engine: eng}, proxy.Options{Upstreams: map[string]string{"stripe": mock}, CA: ca,
		UpstreamTimeout: 5 * time.Second, CurrencyMicros: map[string]int64{"usd": 1_000_000}, Transport: upstream})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	sc := stripeClient(srv.URL+"/stripe", &http.Client{Transport: withTraceparent{"00-" + callerTrace + "-" + callerSpan + "-01"}})
	params := &stripe.PaymentIntentParams{Amount: stripe.Int64(1500), Currency: stripe.String("usd"), Customer: stripe.String(customer),
		Description: stripe.String(payloadMarker)}
	params.SetIdempotencyKey("order-KEY-MARKER-1")
	pi, err := sc.PaymentIntents.New(params)
	if err != nil {
		t.Fatal(err)
	}
	if pi.LastResponse.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("decision %q", pi.LastResponse.Header.Get("Ratchet-Decision"))
	}

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Fatalf("span %q is in trace %s, not the caller's", s.Name, s.SpanContext.TraceID())
		}
		spans[s.Name] = s
	}
	server, begin, report, vendor := spans["proxy stripe"], spans["ratchet.begin"], spans["ratchet.report"], spans["stripe POST"]
	for name, s := range map[string]tracetest.SpanStub{"proxy": server, "begin": begin, "report": report, "vendor": vendor} {
		if !s.SpanContext.IsValid() {
			t.Fatalf("no %s span among %v", name, names(exp.GetSpans()))
		}
	}
	if server.Parent.SpanID().String() != callerSpan {
		t.Fatalf("server.Parent.SpanID().String() != callerSpan: the proxy's span is not the caller's child: %v", server.Parent)
	}
	if server.SpanKind != trace.SpanKindServer {
		t.Fatalf("server.SpanKind != trace.SpanKindServer: the proxy's span is not the caller's child: %v", server.Parent)
	}
	for name, s := range map[string]tracetest.SpanStub{"begin": begin, "report": report, "vendor": vendor} {
		if s.Parent.SpanID() != server.SpanContext.SpanID() {
			t.Fatalf("the %s span is not the proxy span's child", name)
		}
	}
	attrs := map[string]string{}
	for _, a := range begin.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["effect_id"] == "" {
		t.Fatalf("attrs[\"effect_id\"] == \"\": begin span attributes %v", attrs)
	}
	if attrs["effect_type"] != "payment.charge" {
		t.Fatalf("attrs[\"effect_type\"] != \"payment.charge\": begin span attributes %v", attrs)
	}
	if attrs["decision"] != "execute" {
		t.Fatalf("attrs[\"decision\"] != \"execute\": begin span attributes %v", attrs)
	}
	if attrs["namespace"] != "default" {
		t.Fatalf("attrs[\"namespace\"] != \"default\": begin span attributes %v", attrs)
	}
	// The vendor got the trace, with the vendor call's span as parent.
	upstream.mu.Lock()
	got := upstream.got
	upstream.mu.Unlock()
	want := "00-" + callerTrace + "-" + vendor.SpanContext.SpanID().String() + "-01"
	if len(got) != 1 {
		t.Fatalf("len(got) != 1: vendor traceparent %q, want %q", got, want)
	}
	if got[0] != want {
		t.Fatalf("got[0] != want: vendor traceparent %q, want %q", got, want)
	}
	// Privacy: no attribute of any span holds the payload, the customer
	// (a dimension) or the idempotency key.
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			v := a.Value.String()
			for _, secret := range []string{payloadMarker, customer, "KEY-MARKER"} {
				if strings.Contains(v, secret) {
					t.Fatalf("span %q attribute %s holds %q", s.Name, a.Key, secret)
				}
			}
		}
		if strings.Contains(s.Status.Description, payloadMarker) {
			t.Fatalf("span %q status holds the payload", s.Name)
		}
	}
}

func names(ss tracetest.SpanStubs) []string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	return out
}
