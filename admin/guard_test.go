package admin_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/webtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/metrics"
)

// serveAdmin serves the admin API with opts on a real loopback listener,
// with one pending approval (for a $5 payment) and one indeterminate effect.
func serveAdmin(t *testing.T, opts admin.Options) (url, approvalID, effectID string, eng *ledger.Engine) {
	t.Helper()
	eng, _ = setup(t)
	ctx := context.Background()
	big, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	if err != nil || big.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("setup: %+v %v", big, err)
	}
	ex, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "e1", EffectType: "email.send"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Report(ctx, ledger.ReportRequest{EffectID: ex.EffectID, Outcome: ledger.OutcomeUnknown}); err != nil {
		t.Fatal(err)
	}
	opts.Metrics = metrics.New().Handler()
	srv := httptest.NewServer(admin.Handler(eng, &opts))
	t.Cleanup(srv.Close)
	return srv.URL, big.ApprovalID, ex.EffectID, eng
}

var jsonCT = map[string]string{"Content-Type": "application/json"}

func pendingState(t *testing.T, eng *ledger.Engine, approvalID string) string {
	t.Helper()
	list, err := eng.ListApprovals(context.Background(), "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list {
		if a.ApprovalID == approvalID {
			return a.State
		}
	}
	t.Fatalf("approval %s not listed", approvalID)
	return ""
}

// With agent tokens configured and no admin tokens, an agent shares the
// sidecar's loopback, and must not approve its own action, with its token
// or without one.
func TestNoChangesWithAgentsAndNoAdmins(t *testing.T) {
	url, apr, eff, eng := serveAdmin(t, admin.Options{Agents: map[string]bool{sum("agent-tok"): true}})
	agent := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer agent-tok"}
	for _, c := range []struct {
		name, path, body string
		header           map[string]string
	}{
		{"approve, no token", "/v1/approvals/" + apr + "/approve", `{"note":"x"}`, jsonCT},
		{"approve, agent token", "/v1/approvals/" + apr + "/approve", `{"note":"x"}`, agent},
		{"reject, no token", "/v1/approvals/" + apr + "/reject", `{}`, jsonCT},
		{"resolve, no token", "/v1/effects/" + eff + "/resolve", `{"resolution":"failed"}`, jsonCT},
		{"resolve, agent token", "/v1/effects/" + eff + "/resolve", `{"resolution":"failed"}`, agent},
	} {
		status, code := webtest.Send(t, http.MethodPost, url+c.path, c.body, c.header)
		if status != http.StatusForbidden || (c.header["Authorization"] == "" && code != "admin_auth_required") {
			t.Errorf("%s: %d %s, want 403 admin_auth_required", c.name, status, code)
		}
	}
	if s := pendingState(t, eng, apr); s != ledger.ApprovalPending {
		t.Fatalf("approval is %s", s)
	}
	if e, _ := eng.Get(context.Background(), "", eff, ""); e.State != ledger.StateIndeterminate {
		t.Fatalf("effect is %s", e.State)
	}
	// The message says what to do.
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/approvals/"+apr+"/approve", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), "auth.admins") {
		t.Errorf("message: %s", b)
	}
}

// TestReadsNeedAnAdminTokenWhenAgentsAreConfigured: once agents are
// configured, the token check must protect something: with no admins, no
// read of any namespace (effects, approvals, budgets, the audit log,
// grants, the outbox) answers a local process that leaves its token off,
// an agent's token or a web page; the probes and /metrics still answer
// (they name no effect, key or agent). Reads used to answer anyone on
// loopback, so a token-fixed agent read every other namespace by leaving
// its token off.
func TestReadsNeedAnAdminTokenWhenAgentsAreConfigured(t *testing.T) {
	url, _, eff, _ := serveAdmin(t, admin.Options{Agents: map[string]bool{sum("agent-tok"): true}})
	reads := []string{"/v1/approvals", "/v1/effects", "/v1/effects/" + eff, "/v1/effects?namespace=other", "/v1/budgets",
		"/v1/audit", "/v1/grants", "/v1/outbox", "/v1/nonexistent"}
	for _, p := range reads {
		for _, who := range []struct {
			name   string
			header map[string]string
			status int
			code   string
		}{
			{"a local process without a token", nil, http.StatusForbidden, admin.CodeAdminAuthRequired},
			{"an agent's token", map[string]string{"Authorization": "Bearer agent-tok"}, http.StatusForbidden, string(ledger.CodeUnauthorized)},
			{"an unknown token", map[string]string{"Authorization": "Bearer guess"}, http.StatusForbidden, admin.CodeAdminAuthRequired},
			{"a page of another site", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"},
				http.StatusForbidden, admin.CodeAdminAuthRequired},
			{"a rebinding page", map[string]string{"Host": "evil.example:8788"}, http.StatusForbidden, admin.CodeHostNotAllowed},
		} {
			if status, code := webtest.Send(t, http.MethodGet, url+p, "", who.header); status != who.status || code != who.code {
				t.Errorf("GET %s by %s: %d %s, want %d %s", p, who.name, status, code, who.status, who.code)
			}
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		if status, code := webtest.Send(t, http.MethodGet, url+p, "", nil); status != 200 {
			t.Errorf("GET %s: %d %s, want 200 (probes and metrics need no token)", p, status, code)
		}
	}
	// With admins too, a read needs an admin's token, and the admin reads.
	url, _, _, _ = serveAdmin(t, admin.Options{Admins: map[string]string{sum("admin-tok"): "alice"}, Agents: map[string]bool{sum("agent-tok"): true}})
	if status, code := webtest.Send(t, http.MethodGet, url+"/v1/effects", "", nil); status != http.StatusUnauthorized || code != string(ledger.CodeUnauthorized) {
		t.Errorf("GET /v1/effects without a token, admins configured: %d %s, want 401 unauthorized", status, code)
	}
	if status, code := webtest.Send(t, http.MethodGet, url+"/v1/effects", "", map[string]string{"Authorization": "Bearer admin-tok"}); status != 200 {
		t.Errorf("GET /v1/effects as an admin: %d %s", status, code)
	}
	// With no tokens at all (make run), loopback is trusted, reads included.
	url, _, _, _ = serveAdmin(t, admin.Options{})
	if status, code := webtest.Send(t, http.MethodGet, url+"/v1/effects", "", nil); status != 200 {
		t.Errorf("GET /v1/effects with no tokens configured: %d %s", status, code)
	}
}

// An agent's token is never an admin's, in any mode.
func TestAgentTokenIsNeverAnAdminToken(t *testing.T) {
	url, apr, _, eng := serveAdmin(t, admin.Options{Admins: map[string]string{sum("admin-tok"): "alice"}, Agents: map[string]bool{sum("agent-tok"): true}})
	status, _ := webtest.Send(t, http.MethodPost, url+"/v1/approvals/"+apr+"/approve", `{"note":"x"}`,
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer agent-tok"})
	if status != http.StatusForbidden {
		t.Fatalf("approve with an agent token: %d", status)
	}
	if s := pendingState(t, eng, apr); s != ledger.ApprovalPending {
		t.Fatalf("approval is %s", s)
	}
}

// The admin API's guards against web pages, on a real listener: foreign
// Host refused when unauthenticated, cross-origin state changes refused,
// POST bodies only as application/json; each refusal a JSON error.
func TestAdminRefusesCrossSiteRequests(t *testing.T) {
	url, apr, eff, eng := serveAdmin(t, admin.Options{})
	approve := url + "/v1/approvals/" + apr + "/approve"
	crossSite := map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
	for _, c := range []struct {
		name, method, url, body string
		header                  map[string]string
		status                  int
		code                    string
	}{
		{"cross-site approve", http.MethodPost, approve, `{"note":"x"}`, crossSite, 403, "cross_origin_refused"},
		{"cross-site resolve", http.MethodPost, url + "/v1/effects/" + eff + "/resolve", `{"resolution":"failed"}`, crossSite, 403, "cross_origin_refused"},
		{"cross-site, JSON", http.MethodPost, approve, `{}`, map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}, 403, "cross_origin_refused"},
		{"text/plain", http.MethodPost, approve, `{}`, map[string]string{"Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"json lookalike", http.MethodPost, approve, `{}`, map[string]string{"Content-Type": "application/jsonx"}, 415, "unsupported_media_type"},
		{"foreign Host", http.MethodGet, url + "/v1/effects", "", map[string]string{"Host": "evil.example"}, 403, "host_not_allowed"},
		{"foreign Host, probe", http.MethodGet, url + "/healthz", "", map[string]string{"Host": "evil.example"}, 403, "host_not_allowed"},
		{"name resolving to loopback", http.MethodGet, url + "/v1/effects", "", map[string]string{"Host": "127.0.0.1.nip.io"}, 403, "host_not_allowed"},
	} {
		if status, code := webtest.Send(t, c.method, c.url, c.body, c.header); status != c.status || code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, code, c.status, c.code)
		}
	}
	if s := pendingState(t, eng, apr); s != ledger.ApprovalPending {
		t.Fatalf("approval is %s", s)
	}
	// JSON with a charset, from the API's own origin, is the operator.
	if status, code := webtest.Send(t, http.MethodPost, approve, `{"note":"ok"}`, map[string]string{
		"Content-Type": "application/json; charset=utf-8", "Origin": url, "Sec-Fetch-Site": "same-origin"}); status != 200 {
		t.Fatalf("same-origin approve: %d %s", status, code)
	}

	// With admin tokens the API may be reached under any name (a Service,
	// a pod IP): the token is what a page cannot forge.
	url, _, _, _ = serveAdmin(t, admin.Options{Admins: map[string]string{sum("admin-tok"): "alice"}})
	if status, code := webtest.Send(t, http.MethodGet, url+"/v1/effects", "", map[string]string{"Host": "ratchet.shop.svc:8788", "Authorization": "Bearer admin-tok"}); status != 200 {
		t.Fatalf("authenticated, Host a Service name: %d %s", status, code)
	}
}

// Without admin tokens the Host header is not enough: a peer beyond
// loopback (a port-forward bound to 0.0.0.0, ssh -L with GatewayPorts)
// sends Host: 127.0.0.1 as easily, and is refused on every path, reads and
// probes too. A port-forward connects from loopback and is served; with
// admin tokens the peer does not matter (the token does).
func TestUnauthenticatedAPIRefusesPeersBeyondLoopback(t *testing.T) {
	eng, _ := setup(t)
	big, err := eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	if err != nil || big.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("setup: %+v %v", big, err)
	}
	send := func(h http.Handler, method, path, remote string, header map[string]string) (int, string) {
		req := httptest.NewRequest(method, "http://127.0.0.1:8788"+path, strings.NewReader(`{"note":"remote"}`))
		req.RemoteAddr = remote
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	approve := "/v1/approvals/" + big.ApprovalID + "/approve"
	for name, opts := range map[string]admin.Options{"open": {}, "agents, no admins": {Agents: map[string]bool{sum("agent-tok"): true}}} {
		h := admin.Handler(eng, &opts)
		for _, remote := range []string{"203.0.113.9:40000", "[2001:db8::1]:40000", "10.0.0.7:5555"} {
			for _, c := range []struct{ method, path string }{{"POST", approve}, {"GET", "/v1/approvals"}, {"GET", "/healthz"}} {
				status, body := send(h, c.method, c.path, remote, jsonCT)
				if status != http.StatusForbidden || !strings.Contains(body, admin.CodePeerNotAllowed) {
					t.Errorf("%s: %s %s from %s: %d %s, want 403 %s", name, c.method, c.path, remote, status, body, admin.CodePeerNotAllowed)
				}
			}
		}
		for _, remote := range []string{"127.0.0.1:40000", "[::1]:40000"} {
			if status, body := send(h, "GET", "/healthz", remote, nil); status != 200 {
				t.Errorf("%s: from %s (a port-forward): %d %s", name, remote, status, body)
			}
		}
	}
	if s := pendingState(t, eng, big.ApprovalID); s != ledger.ApprovalPending {
		t.Fatalf("approval is %s", s)
	}
	h := admin.Handler(eng, &admin.Options{Admins: map[string]string{sum("admin-tok"): "alice"}})
	if status, body := send(h, "GET", "/v1/approvals", "203.0.113.9:40000", map[string]string{"Authorization": "Bearer admin-tok"}); status != 200 {
		t.Errorf("with an admin token from beyond loopback: %d %s", status, body)
	}
}
