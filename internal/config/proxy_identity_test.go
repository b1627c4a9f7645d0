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
