package tracing_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/internal/tracing"
	"github.com/ratchet-mcp/ratchet/internal/tracingtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

func TestTracesAreOffUnlessConfigured(t *testing.T) {
	on, off := true, false
	for _, c := range []struct {
		name string
		env  map[string]string
		opts tracing.Options
		want bool
	}{
		{"nothing", nil, tracing.Options{}, false},
		{"the standard endpoint variable", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, tracing.Options{}, true},
		{"the traces endpoint variable", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, tracing.Options{}, true},
		{"the config's endpoint", nil, tracing.Options{Endpoint: "http://collector:4318"}, true},
		{"enabled", nil, tracing.Options{Enabled: &on}, true},
		{"disabled in the config", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, tracing.Options{Enabled: &off}, false},
		{"the SDK disabled", map[string]string{"OTEL_SDK_DISABLED": "true"}, tracing.Options{Enabled: &on}, false},
		{"no exporter", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, tracing.Options{Endpoint: "http://collector:4318"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
				t.Setenv(k, c.env[k])
			}
			if got := c.opts.On(); got != c.want {
				t.Fatalf("On() = %v, want %v", got, c.want)
			}
		})
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := tracing.Setup(context.Background(), tracing.Options{Enabled: &on}); err == nil || !strings.Contains(err.Error(), "http/protobuf") {
		t.Fatalf("grpc: %v", err)
	}
}

func TestTheDecisionLogLineCarriesTheTraceID(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(tracing.LogHandler(slog.NewJSONHandler(&buf, nil)))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Logger: log.With("component", "ledger")})
	if _, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "k", EffectType: "email.send"}); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, `"msg":"begin"`) {
			line = l
		}
	}
	if !strings.Contains(line, `"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"`) || !strings.Contains(line, `"span_id":"00f067aa0ba902b7"`) {
		t.Fatalf("decision line: %s", line)
	}
}

func TestIdempotencyKeysAreOnSpansOnlyWhenAskedFor(t *testing.T) {
	exp := tracingtest.InMemory(t)
	dir := t.TempDir()
	st, _ := badgerstore.Open(dir, nil)
	secret, _ := ledger.LoadOrCreateSecret(dir + "/hmac.key")
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	for _, with := range []bool{false, true} {
		exp.Reset()
		te := tracing.Engine{Engine: eng, IncludeIdempotencyKeys: with}
		res, err := te.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: "order-42", EffectType: "email.send"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := te.Report(context.Background(), ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
		spans := exp.GetSpans()
		if len(spans) != 2 || spans[0].Name != "ratchet.begin" || spans[1].Name != "ratchet.report" {
			t.Fatalf("spans %v", spans)
		}
		has := false
		for _, a := range spans[0].Attributes {
			has = has || a.Value.String() == "order-42"
		}
		if has != with {
			t.Fatalf("include_idempotency_keys %v: key on the span %v", with, has)
		}
	}
}
