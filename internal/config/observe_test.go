package config

import (
	"strings"
	"testing"
)

func TestModeObserveAppliesToRulesWithoutTheirOwn(t *testing.T) {
	cfg, err := Parse(strings.NewReader(`mode: observe
policies:
  - match: "payment.*"
    deny: true
  - match: "email.*"
    mode: enforce
    deny: true
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policies[0].Mode != "observe" || cfg.Policies[1].Mode != "enforce" {
		t.Fatalf("modes: %q %q", cfg.Policies[0].Mode, cfg.Policies[1].Mode)
	}
	_, err = Parse(strings.NewReader("mode: shadow\npolicies:\n  - match: a.b\n    mode: watch\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), `t.yaml:1: mode: "shadow" must be enforce or observe`) ||
		!strings.Contains(err.Error(), `t.yaml:4: policies[0].mode: "watch" must be enforce or observe`) {
		t.Fatalf("bad modes: %v", err)
	}
}

func TestTracingEndpointMustBeAURL(t *testing.T) {
	cfg, err := Parse(strings.NewReader("tracing:\n  endpoint: http://otel-collector:4318\n  include_idempotency_keys: true\n"), "t.yaml")
	if err != nil || cfg.Tracing.Endpoint != "http://otel-collector:4318" || !cfg.Tracing.IncludeIdempotencyKeys || cfg.Tracing.Enabled != nil {
		t.Fatalf("%+v %v", cfg, err)
	}
	_, err = Parse(strings.NewReader("tracing:\n  endpoint: otel-collector:4318\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), `t.yaml:2: tracing.endpoint: "otel-collector:4318" is not an http(s) URL`) {
		t.Fatalf("a bare host: %v", err)
	}
}
