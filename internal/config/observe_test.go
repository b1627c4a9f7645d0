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
