package config

import (
	"errors"
	"strings"
	"testing"
)

// parseProblems parses yaml and returns its problems (nil when valid).
func parseProblems(t *testing.T, yaml string) []Problem {
	t.Helper()
	_, err := Parse(strings.NewReader(yaml), "t.yaml")
	if err == nil {
		return nil
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a config error", err)
	}
	return ce.Problems
}

// An agent's namespace is checked against the engine's namespace format at
// load time: a token mapped to "Shop" would otherwise start fine and then
// have every call it makes refused.
func TestAgentNamespaceMustBeAValidNamespace(t *testing.T) {
	const tok = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7" // sha256("data")
	for _, ns := range []string{"Shop", "shop team", "-shop", strings.Repeat("a", 64), "shop/eu"} {
		t.Run(ns, func(t *testing.T) {
			probs := parseProblems(t, "auth:\n  agents:\n    - token_sha256: "+tok+"\n      namespace: '"+ns+"'\n")
			if len(probs) != 1 || probs[0].Line != 4 || probs[0].Path != "auth.agents[0].namespace" ||
				!strings.Contains(probs[0].Message, "lowercase letters, digits") {
				t.Fatalf("got %+v", probs)
			}
		})
	}
	for _, ns := range []string{"shop", "team-1", "eu.shop_2", strings.Repeat("a", 63)} {
		if probs := parseProblems(t, "auth:\n  agents:\n    - {token_sha256: "+tok+", namespace: '"+ns+"'}\n"); probs != nil {
			t.Errorf("%q refused: %+v", ns, probs)
		}
	}
	// The proxy's namespace is the tenant of every proxied request: the same format.
	if probs := parseProblems(t, "proxy:\n  namespace: Shop\n"); len(probs) != 1 || probs[0].Line != 2 || probs[0].Path != "proxy.namespace" {
		t.Fatalf("proxy.namespace: %+v", probs)
	}
}
