package mcp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ratchet-mcp/ratchet/internal/tracing"
	"github.com/ratchet-mcp/ratchet/internal/tracingtest"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// traceparentHeader sends the agent's trace context on every HTTP request.
type traceparentHeader struct{ tp string }

func (h traceparentHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Traceparent", h.tp)
	return http.DefaultTransport.RoundTrip(r)
}

// TestAToolCallIsASpanInTheCallersTrace: over HTTP (traceparent header) and
// over an in-memory session (traceparent in _meta, as over stdio), a tool
// call is a span "tools/call <tool>" in the caller's trace, the engine's
// decision span is its child, and neither holds the arguments.
func TestAToolCallIsASpanInTheCallersTrace(t *testing.T) {
	exp := tracingtest.InMemory(t)
	eng := tracing.Engine{Engine: newEngine(t, &clock{})}
	const trace1, trace2 = "0af7651916cd43dd8448eb211c80319c", "1bf7651916cd43dd8448eb211c80319d"
	url := serveHTTP(t, eng, nil)
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&sdk.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: traceparentHeader{"00-" + trace1 + "-b7ad6b7169203331-01"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	args := map[string]any{"idempotency_key": "secret-key-1", "effect_type": "email.send", "payload": map[string]any{"body": "PAYLOAD-MARKER"}}
	decision(t, cs, args, "execute")

	mem := inMemory(t, mcp.New(eng, nil))
	if _, err := mem.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
		Arguments: map[string]any{"idempotency_key": "secret-key-2", "effect_type": "email.send"},
		Meta:      sdk.Meta{"traceparent": "00-" + trace2 + "-c7ad6b7169203331-01"}}); err != nil {
		t.Fatal(err)
	}

	for _, tr := range []string{trace1, trace2} {
		var tool, begin *tracetest.SpanStub
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() != tr {
				continue
			}
			switch s.Name {
			case "tools/call ratchet_begin_effect":
				tool = &s
			case "ratchet.begin":
				begin = &s
			}
		}
		if tool == nil || begin == nil || begin.Parent.SpanID() != tool.SpanContext.SpanID() {
			t.Fatalf("trace %s: tool span %v, begin span %v", tr, tool, begin)
		}
	}
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if v := a.Value.String(); strings.Contains(v, "PAYLOAD-MARKER") || strings.Contains(v, "secret-key") {
				t.Fatalf("span %s attribute %s = %q", s.Name, a.Key, v)
			}
		}
	}
}

// TestTheBridgePassesTheTraceOn: a call through the stdio bridge with a
// traceparent in _meta is traced by the sidecar in the caller's trace.
func TestTheBridgePassesTheTraceOn(t *testing.T) {
	exp := tracingtest.InMemory(t)
	url := serveHTTP(t, tracing.Engine{Engine: newEngine(t, &clock{})}, nil)
	srv, closeRemote, err := mcp.Bridge(context.Background(), func(ctx context.Context) (*sdk.ClientSession, error) {
		return mcp.Connect(ctx, url, "", "test")
	}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer closeRemote()
	const tr = "2cf7651916cd43dd8448eb211c80319e"
	if _, err := inMemory(t, srv).CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
		Arguments: map[string]any{"idempotency_key": "bridged", "effect_type": "email.send"},
		Meta:      sdk.Meta{"traceparent": "00-" + tr + "-d7ad6b7169203331-01"}}); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == tr {
			found[s.Name] = true
		}
	}
	if !found["tools/call ratchet_begin_effect"] || !found["ratchet.begin"] {
		t.Fatalf("spans in the caller's trace: %v", found)
	}
}
