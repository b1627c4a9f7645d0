package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestObserveModeThroughServe: with the config's mode: observe, a rule
// that would deny is logged, counted in /metrics and audited, the agent
// executes, an enforced rule still denies, and "ratchet budgets" lists the
// observed ceiling apart.
func TestObserveModeThroughServe(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	extra := "mode: observe\npolicies:\n" +
		"  - {match: 'refund.*', deny: true}\n" +
		"  - match: 'refund.*'\n    ceilings: [{name: refund-observed, limit_count: 1, window: 1h, per: global}]\n" +
		"  - {match: 'db.drop.*', deny: true, mode: enforce}\n" +
		"  - {match: 'db.*', deny: true}\n"
	s := startServe(t, data, extra)
	cs := connect(t, s.mcp)
	for _, k := range []string{"r1", "r2"} {
		if r := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": k, "effect_type": "refund.issue"}); r["decision"] != "execute" {
			t.Fatalf("observed deny: %v", r)
		}
	}
	if r := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "d1", "effect_type": "db.drop.table"}); r["decision"] != "denied" {
		t.Fatalf("enforced deny: %v", r)
	}
	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `ratchet_observed_total{effect_type="refund.issue",would="denied"} 2`) ||
		strings.Contains(string(b), `ratchet_observed_total{effect_type="db.drop.table"`) {
		t.Fatalf("metrics:\n%s", b)
	}
	if !strings.Contains(s.stderr.String(), "observed rule would have refused") {
		t.Fatalf("no log line:\n%s", s.stderr)
	}
	code, out, errs := cli(t, "", nil, "budgets", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "OBSERVED (mode: observe)") || !strings.Contains(out, "refund-observed") ||
		strings.Index(out, "refund-observed") < strings.Index(out, "OBSERVED") {
		t.Fatalf("budgets: %d %s %s", code, out, errs)
	}
	recs := checkAuditVerifies(t, s)
	n := 0
	for _, r := range recs {
		if r.Event.Type == "policy.observed" {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("%d policy.observed records, want 2", n)
	}
}
