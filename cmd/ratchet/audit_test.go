package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// exportAudit runs "ratchet audit export" against admin and returns the
// export and the path it was written to.
func exportAudit(t *testing.T, adminURL, token string) (string, string) {
	t.Helper()
	code, out, errs := cli(t, token, nil, "audit", "export", "--admin", adminURL)
	if code != 0 {
		t.Fatalf("audit export: %d %s", code, errs)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeFile(t, path, out)
	return out, path
}

// verifyAudit runs "ratchet audit verify" on an export and returns its
// exit code and output.
func verifyAudit(t *testing.T, export string) (int, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	writeFile(t, path, export)
	code, out, errs := cli(t, "", nil, "audit", "verify", path)
	return code, out + errs
}

func TestAuditExportAndVerifyThroughTheCLI(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	extra := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}, {token_sha256: '" + sha("bob-tok") + "', name: bob}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	s := startServe(t, data, extra)
	cs := connect(t, s.mcp, "agent-tok")
	for i := range 12 {
		r := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": fmt.Sprint("mail:", i), "effect_type": "email.send",
			"dimensions": map[string]any{"recipient": "private-person@example.com"}})
		outcome := []string{"succeeded", "failed", "unknown"}[i%3]
		callTool(t, cs, "ratchet_report_effect", map[string]any{"effect_id": r["effect_id"], "outcome": outcome})
	}
	// Two operators act: alice approves one and rejects another, bob
	// resolves what was reported unknown.
	var approvals []string
	for _, k := range []string{"inv:1", "inv:2"} {
		a := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": k, "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000})
		approvals = append(approvals, a["approval_id"].(string))
	}
	if code, _, errs := cli(t, "admin-tok", nil, "approvals", "approve", approvals[0], "--admin", s.admin); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := cli(t, "admin-tok", nil, "approvals", "reject", approvals[1], "--admin", s.admin); code != 0 {
		t.Fatal(errs)
	}
	code, out, _ := cli(t, "bob-tok", nil, "effects", "list", "--state", "indeterminate", "-o", "json", "--admin", s.admin)
	var page ledger.Page
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Effects) != 4 {
		t.Fatalf("indeterminate: %d %s", code, out)
	}
	for _, e := range page.Effects {
		if code, _, errs := cli(t, "bob-tok", nil, "effects", "resolve", e.EffectID, "--resolution", "failed", "--yes", "--admin", s.admin); code != 0 {
			t.Fatal(errs)
		}
	}

	export, path := exportAudit(t, s.admin, "admin-tok")
	code, out, errs := cli(t, "", nil, "audit", "verify", path)
	if code != 0 || !strings.HasPrefix(out, "ok: ") || !strings.Contains(out, "local seq 1-") {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	actors := map[string][]string{}
	lines := strings.SplitAfter(strings.TrimSuffix(export, "\n"), "\n")
	for _, l := range lines[:len(lines)-1] {
		var r ledger.AuditRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		actors[r.Event.Type] = append(actors[r.Event.Type], r.Event.Actor)
	}
	if a := actors[ledger.EventApprovalDecided]; len(a) != 2 || a[0] != "admin:alice" || a[1] != "admin:alice" {
		t.Fatalf("approvals decided by %v", a)
	}
	if a := actors[ledger.EventEffectResolved]; len(a) != 4 || a[0] != "admin:bob" {
		t.Fatalf("effects resolved by %v", a)
	}
	if strings.Contains(export, "private-person") || strings.Contains(export, "mail:") {
		t.Fatal("the export holds a dimension value or an idempotency key")
	}

	// One line edited, deleted or inserted: verify fails and names it.
	mid := len(lines) / 2
	edit := func(f func([]string) []string) string { return strings.Join(f(append([]string(nil), lines...)), "") }
	for name, c := range map[string]struct {
		export string
		line   int
	}{
		"edited": {edit(func(l []string) []string {
			l[mid-1] = strings.Replace(l[mid-1], `"type":"`, `"type":"x`, 1)
			return l
		}), mid},
		"deleted":  {edit(func(l []string) []string { return append(l[:mid-1:mid-1], l[mid:]...) }), mid},
		"inserted": {edit(func(l []string) []string { return append(l[:mid:mid], append([]string{l[mid-2]}, l[mid:]...)...) }), mid + 1},
	} {
		code, msg := verifyAudit(t, c.export)
		if code != 1 || !strings.Contains(msg, fmt.Sprintf("line %d ", c.line)) {
			t.Errorf("a line %s: exit %d, %s (want line %d named)", name, code, msg, c.line)
		}
	}
	// An agent cannot export; an unknown subcommand is a usage error.
	if code, _, errs := cli(t, "agent-tok", nil, "audit", "export", "--admin", s.admin); code != 1 || !strings.Contains(errs, "agent tokens") {
		t.Fatalf("agent export: %d %s", code, errs)
	}
	if code, _, _ := cli(t, "", nil, "audit", "nope"); code != 2 {
		t.Fatalf("usage: %d", code)
	}
	// The chain goes on across a restart: a later export still verifies,
	// and the earlier one is its prefix.
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	s2 := startServe(t, data, extra)
	callTool(t, connect(t, s2.mcp, "agent-tok"), "ratchet_begin_effect", map[string]any{"idempotency_key": "after", "effect_type": "email.send"})
	later, path2 := exportAudit(t, s2.admin, "admin-tok")
	if code, out, errs := cli(t, "", nil, "audit", "verify", path2); code != 0 {
		t.Fatalf("after restart: %d %s %s", code, out, errs)
	}
	if !strings.HasPrefix(later, strings.Join(lines[:len(lines)-1], "")) {
		t.Fatal("the later export does not begin with the earlier one's records")
	}
}

// TestAuditChainsOnPostgresVerify: two processes on one PostgreSQL ledger
// keep a chain each; the export of either holds both, and verifies.
func TestAuditChainsOnPostgresVerify(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "audit_")
	t.Setenv("RATCHET_PG_DSN", dsn)
	shared := t.TempDir()
	extra := "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + schema + "}\n" +
		"secrets: {hmac_key_file: '" + filepath.Join(shared, "hmac.key") + "'}\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	var servers []*server
	for i := range 2 {
		servers = append(servers, startServe(t, filepath.Join(t.TempDir(), fmt.Sprint("data", i)), extra))
	}
	for i := range 10 {
		cs := connect(t, servers[i%2].mcp)
		r := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": fmt.Sprint("k", i%7), "effect_type": "email.send"})
		if r["decision"] == "execute" {
			callTool(t, cs, "ratchet_report_effect", map[string]any{"effect_id": r["effect_id"], "outcome": "succeeded"})
		}
	}
	a := callTool(t, connect(t, servers[0].mcp), "ratchet_begin_effect", map[string]any{"idempotency_key": "big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000})
	if code, _, errs := cli(t, "", nil, "approvals", "approve", a["approval_id"].(string), "--admin", servers[1].admin); code != 0 {
		t.Fatal(errs)
	}
	export, path := exportAudit(t, servers[0].admin, "")
	code, out, errs := cli(t, "", nil, "audit", "verify", path)
	if code != 0 || !strings.Contains(out, "in 2 chains") {
		t.Fatalf("verify: %d %s %s", code, out, errs)
	}
	if strings.Count(export, `"type":"`+ledger.EventAuditChainStarted+`"`) != 2 || !strings.Contains(export, `"actor":"admin:local"`) {
		t.Fatalf("export:\n%s", export)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(export, "\n"), "\n")
	cut := strings.Join(append(append([]string(nil), lines[:3]...), lines[4:]...), "")
	if code, msg := verifyAudit(t, cut); code != 1 || !strings.Contains(msg, "line 4 ") {
		t.Fatalf("a record removed from a replica's chain: %d %s", code, msg)
	}
}

// checkAuditVerifies exports the audit log of a running server, checks
// that "ratchet audit verify" accepts it, and returns its records.
func checkAuditVerifies(t *testing.T, s *server) []ledger.AuditRecord {
	t.Helper()
	export, path := exportAudit(t, s.admin, "")
	code, out, errs := cli(t, "", nil, "audit", "verify", path)
	if code != 0 {
		t.Fatalf("the audit log does not verify: %d %s %s", code, out, errs)
	}
	if _, brk, err := admin.VerifyExport(strings.NewReader(export), nil); err != nil || brk != nil {
		t.Fatal(brk, err)
	}
	var recs []ledger.AuditRecord
	lines := strings.Split(strings.TrimSpace(export), "\n")
	for _, l := range lines[:len(lines)-1] {
		var r ledger.AuditRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}
