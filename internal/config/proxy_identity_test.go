package config

import (
	"strings"
	"testing"
)

// TestProxyAgentIDIsNotATokenFixedAgent: proxy.agent_id names the agent
// every proxied call is begun as. The proxy asks no credential, so it may
// not be an agent whose token fixes it in the proxy's namespace (any local
// process would use that agent's grants and count against its limits),
// and it must be an id the engine accepts; another namespace's agent of
// the same name is someone else.
func TestProxyAgentIDIsNotATokenFixedAgent(t *testing.T) {
	const tok = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"
	agents := "auth:\n  agents: [{token_sha256: " + tok + ", namespace: default, agent_id: trusted-bot}]\n" +
		"  admins: [{token_sha256: " + strings.Repeat("ab", 32) + ", name: alice}]\n"
	wantProblems(t, parseProblems(t, agents+"proxy:\n  agent_id: trusted-bot\n"),
		[]wantProblem{{5, "proxy.agent_id", `"trusted-bot" is the agent auth.agents[0]'s token fixes in namespace "default"`}})
	wantProblems(t, parseProblems(t, "proxy:\n  agent_id: '"+strings.Repeat("a", 256)+"'\n"),
		[]wantProblem{{2, "proxy.agent_id", "is 256 characters; the limit is 255"}})
	wantProblems(t, parseProblems(t, "proxy:\n  agent_id: \"bad\\tid\"\n"),
		[]wantProblem{{2, "proxy.agent_id", "without control characters"}})
	for name, yaml := range map[string]string{
		"its own id":                      agents + "proxy:\n  agent_id: legacy-billing\n",
		"the same name in another tenant": agents + "proxy:\n  namespace: shop\n  agent_id: trusted-bot\n",
		"none":                            agents,
	} {
		if probs := parseProblems(t, yaml); probs != nil {
			t.Errorf("%s: refused: %+v", name, probs)
		}
	}
}

// TestOpenSaysWhatAnswersWithoutACredential: for each way the tokens can
// be configured, Open names every listener and what it gives a caller
// with no credential: the MCP rule, the admin API's and console's mode,
// the probes and /metrics (open in every mode), and the proxy's identity.
func TestOpenSaysWhatAnswersWithoutACredential(t *testing.T) {
	const tok = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"
	agent := "  agents: [{token_sha256: " + tok + ", namespace: shop, agent_id: bot}]\n"
	adminTok := "  admins: [{token_sha256: " + strings.Repeat("ab", 32) + ", name: alice}]\n"
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"no tokens", "", []string{
			"MCP (127.0.0.1:8787): no auth.agents, so unauthenticated",
			"admin API and console (127.0.0.1:8788): no tokens at all, so open to every process on this machine",
			"/healthz, /readyz and /metrics: no token in any mode",
			"proxy (127.0.0.1:8789): asks no credential: every process that reaches it is begun in namespace default as no agent",
		}},
		{"agents, no admins", "auth:\n" + agent, []string{
			"MCP (127.0.0.1:8787): a token of auth.agents is required",
			"admin API and console (127.0.0.1:8788): closed: agents are configured and admins are not, so every /v1 call answers 403 admin_auth_required",
			"/healthz, /readyz and /metrics: no token in any mode",
			"proxy (127.0.0.1:8789): asks no credential",
		}},
		{"agents and admins, a proxy agent", "auth:\n" + agent + adminTok + "proxy:\n  agent_id: legacy-billing\n", []string{
			"MCP (127.0.0.1:8787): a token of auth.agents is required",
			"admin API and console (127.0.0.1:8788): every read and change needs an admin token",
			"/healthz, /readyz and /metrics: no token in any mode",
			`begun in namespace default as agent "legacy-billing", in no run; Ratchet-Agent-Id and Ratchet-Run-Id are labels only`,
		}},
	} {
		cfg, err := Parse(strings.NewReader(c.yaml), "t.yaml")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := cfg.Open()
		if len(got) != len(c.want) {
			t.Errorf("%s: %d lines, want %d:\n%s", c.name, len(got), len(c.want), strings.Join(got, "\n"))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: line %d is %q, want it to say %q", c.name, i, got[i], w)
			}
		}
	}
}

// TestRunCeilingsOverProxiedCallsWarn: a ceiling per run (or over a run's
// lifetime) whose rule matches a proxied vendor's calls counts them all as
// one run, since the proxy's run header is a label: config validate says
// so at the ceiling's line. A payment.* rule matches proxied calls too,
// since they have the taxonomy's types (docs/proxy.md); a rule on the old
// names (stripe.*) is also told the new types.
func TestRunCeilingsOverProxiedCallsWarn(t *testing.T) {
	cfg, err := Parse(strings.NewReader("policies:\n"+
		"  - match: 'stripe.*'\n    ceilings: [{name: per-run, limit_micros: 100, window: 24h, per: run}]\n"+
		"  - match: 'payment.*'\n    ceilings: [{name: agents-run, limit_micros: 100, window: run, per: global}]\n"+
		"  - match: '*'\n    ceilings:\n      - {name: daily, limit_micros: 100, window: 24h, per: global}\n"+
		"      - {name: lifetime, limit_micros: 100, window: run, per: global}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantProblems(t, cfg.Warnings(), []wantProblem{
		{2, "policies[0].match", "their effect types are now payment.cancel"},
		{3, "policies[0].ceilings[0]", `"per-run" counts per run, and calls through the proxy to stripe have no run`},
		{5, "policies[1].ceilings[0]", "never starts again"},
		{9, "policies[2].ceilings[1]", "never starts again"},
	})
}
