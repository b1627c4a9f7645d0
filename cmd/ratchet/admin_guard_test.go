package main

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/webtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// pendingApproval has the agent ask for a $150 payment through MCP and
// returns the approval id.
func pendingApproval(t *testing.T, s *server, token ...string) string {
	t.Helper()
	a := callTool(t, connect(t, s.mcp, token...), "ratchet_begin_effect", map[string]any{
		"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000})
	if a["decision"] != "approval_required" {
		t.Fatalf("begin: %v", a)
	}
	return a["approval_id"].(string)
}

// approvalState reads an approval's state through the operator CLI.
func approvalState(t *testing.T, s *server, token, id string) string {
	t.Helper()
	code, out, errs := cli(t, token, nil, "approvals", "list", "--state", "all", "-o", "json", "--admin", s.admin)
	var list []ledger.Approval
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("approvals list: %d %s %s", code, out, errs)
	}
	for _, a := range list {
		if a.ApprovalID == id {
			return a.State
		}
	}
	t.Fatalf("approval %s not listed: %s", id, out)
	return ""
}

const approvalPolicy = "policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"

// With auth.agents and no auth.admins, the agent, which shares the
// sidecar's loopback, cannot approve its own action: not with its token,
// not without one; nor can it read, through the API or the CLI (issue
// 28: reads need an admin token whenever agents are configured). The
// admin API says so, serve logs it, and config validate warns at the line
// of auth.agents and says what is open.
func TestAgentCannotApproveItsOwnActionWithoutAdmins(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	s := startServe(t, data, "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+approvalPolicy)
	id := pendingApproval(t, s, "agent-tok")
	approve := s.admin + "/v1/approvals/" + id + "/approve"
	for name, h := range map[string]map[string]string{
		"agent token": {"Content-Type": "application/json", "Authorization": "Bearer agent-tok"},
		"no token":    {"Content-Type": "application/json"},
	} {
		if status, code := webtest.Send(t, http.MethodPost, approve, `{"note":"x"}`, h); status != http.StatusForbidden {
			t.Errorf("approve with %s: %d %s", name, status, code)
		}
	}
	if status, code := webtest.Send(t, http.MethodPost, s.admin+"/v1/approvals/"+id+"/reject", `{}`, map[string]string{"Content-Type": "application/json"}); status != 403 || code != "admin_auth_required" {
		t.Errorf("reject: %d %s", status, code)
	}
	code, _, errs := cli(t, "", nil, "approvals", "approve", id, "--admin", s.admin)
	if code != 1 || !strings.Contains(errs, "admin_auth_required") || !strings.Contains(errs, "auth.admins") {
		t.Errorf("approvals approve: %d %s", code, errs)
	}
	// No read answers, with the agent's token or without one, from the
	// API or the CLI; metrics and probes still answer.
	for _, tok := range []string{"", "agent-tok"} {
		code, out, errs := cli(t, tok, nil, "effects", "list", "-o", "json", "--admin", s.admin)
		if code != 1 || !strings.Contains(errs, "admin_auth_required") && !strings.Contains(errs, "unauthorized") || strings.Contains(out, "inv:big") {
			t.Errorf("effects list with token %q: %d %q %q, want refused", tok, code, out, errs)
		}
	}
	for _, p := range []string{"/v1/effects", "/v1/budgets", "/v1/approvals", "/v1/audit"} {
		if status, code := webtest.Send(t, http.MethodGet, s.admin+p, "", nil); status != http.StatusForbidden || code != "admin_auth_required" {
			t.Errorf("GET %s: %d %s, want 403 admin_auth_required", p, status, code)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if status, code := webtest.Send(t, http.MethodGet, s.admin+p, "", nil); status != 200 {
			t.Errorf("GET %s: %d %s", p, status, code)
		}
	}
	if again := callTool(t, connect(t, s.mcp, "agent-tok"), "ratchet_begin_effect", map[string]any{
		"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}); again["decision"] != "approval_required" {
		t.Fatalf("begin after the attempts: %v", again)
	}
	if !strings.Contains(s.stderr.String(), "the admin API and the console answer no one") {
		t.Errorf("serve did not log the closed admin API:\n%s", s.stderr)
	}
	// config validate: valid (exit 0), with a warning at auth.agents' line,
	// and what is open.
	cfgFile := filepath.Join(data, "..", "data.yaml")
	code, out, errs := runArgs(t, "", "config", "validate", cfgFile)
	if code != 0 || !strings.Contains(out, "ok") || !strings.Contains(errs, cfgFile+":3: warning: auth.agents:") || !strings.Contains(errs, "add auth.admins") {
		t.Fatalf("config validate: %d %q %q", code, out, errs)
	}
	for _, want := range []string{"open: admin API and console (127.0.0.1:0): closed", "open: 127.0.0.1:0/healthz, /readyz and /metrics: no token",
		"open: proxy (127.0.0.1:0): asks no credential"} {
		if !strings.Contains(out, want) {
			t.Errorf("config validate does not say %q:\n%s", want, out)
		}
	}
}

// With both agents and admins configured, an agent's token is refused on
// every admin call, approve included.
func TestAgentTokenIsNeverAnAdminToken(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha("admin-tok")+"', name: alice}]\n"+approvalPolicy)
	id := pendingApproval(t, s, "agent-tok")
	status, code := webtest.Send(t, http.MethodPost, s.admin+"/v1/approvals/"+id+"/approve", `{"note":"x"}`,
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer agent-tok"})
	if status != http.StatusForbidden || code != "unauthorized" {
		t.Fatalf("approve with the agent's token: %d %s", status, code)
	}
	if st := approvalState(t, s, "admin-tok", id); st != "pending" {
		t.Fatalf("approval is %s", st)
	}
}

// With no tokens at all (the "make run" default) the admin API is
// unauthenticated on loopback. A web page the operator has open must not
// be able to use it: not by a cross-site "simple" POST (text/plain, which
// a page may send without a preflight), and not by DNS rebinding (its own
// name pointed at 127.0.0.1, so its requests carry its Host and count as
// same-origin to the browser). Each request is what a browser sends.
func TestAdminAPIRefusesAttackerPages(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), approvalPolicy)
	id := pendingApproval(t, s)
	approve := s.admin + "/v1/approvals/" + id + "/approve"
	hostPort := strings.TrimPrefix(s.admin, "http://")
	_, port, _ := strings.Cut(hostPort, ":")
	evil := "evil.example:" + port
	for _, c := range []struct {
		name, method, url, body string
		header                  map[string]string
		status                  int
		code                    string
	}{
		{"cross-site simple POST", http.MethodPost, approve, `{"note":"x"}`, map[string]string{
			"Content-Type": "text/plain;charset=UTF-8", "Origin": "https://evil.example", "Referer": "https://evil.example/",
			"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "empty"}, 403, "cross_origin_refused"},
		{"cross-site form POST", http.MethodPost, approve, `note=x`, map[string]string{
			"Content-Type": "application/x-www-form-urlencoded", "Origin": "null",
			"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, 403, "cross_origin_refused"},
		{"cross-site POST from a browser without Sec-Fetch", http.MethodPost, approve, `{"note":"x"}`, map[string]string{
			"Content-Type": "text/plain", "Origin": "https://evil.example"}, 403, "cross_origin_refused"},
		{"text/plain POST with no browser headers", http.MethodPost, approve, `{"note":"x"}`, map[string]string{
			"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"POST with no Content-Type", http.MethodPost, approve, `{"note":"x"}`, nil, 415, "unsupported_media_type"},
		{"rebound page reads approvals", http.MethodGet, s.admin + "/v1/approvals", "", map[string]string{
			"Host": evil, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, 403, "host_not_allowed"},
		{"rebound page reads effects", http.MethodGet, s.admin + "/v1/effects", "", map[string]string{
			"Host": "evil.example"}, 403, "host_not_allowed"},
		{"rebound page reads metrics", http.MethodGet, s.admin + "/metrics", "", map[string]string{
			"Host": evil, "Sec-Fetch-Site": "same-origin"}, 403, "host_not_allowed"},
		{"rebound page approves", http.MethodPost, approve, `{"note":"x"}`, map[string]string{
			"Host": evil, "Origin": "http://" + evil, "Content-Type": "application/json",
			"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, 403, "host_not_allowed"},
	} {
		if status, code := webtest.Send(t, c.method, c.url, c.body, c.header); status != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, code, c.status, c.code)
		}
	}
	if st := approvalState(t, s, "", id); st != "pending" {
		t.Fatalf("after the attacks the approval is %s", st)
	}
	// The operator's own tools still work: the CLI (JSON body, Host
	// 127.0.0.1), a page of the admin API's own origin, and localhost.
	if status, code := webtest.Send(t, http.MethodGet, s.admin+"/v1/effects", "", map[string]string{"Host": "localhost:" + port}); status != 200 {
		t.Errorf("Host localhost: %d %s", status, code)
	}
	if status, code := webtest.Send(t, http.MethodPost, s.admin+"/v1/approvals/apr_none/reject", `{}`, map[string]string{
		"Content-Type": "application/json", "Origin": s.admin, "Sec-Fetch-Site": "same-origin"}); status != 404 {
		t.Errorf("same-origin POST: %d %s", status, code)
	}
	if code, out, errs := cli(t, "", nil, "approvals", "approve", id, "--note", "mine", "--admin", s.admin); code != 0 || !strings.Contains(out, "approved by admin:local") {
		t.Fatalf("the operator's CLI: %d %s %s", code, out, errs)
	}
}
