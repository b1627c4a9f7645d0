package admin_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/metrics"
)

func i64(v int64) *int64 { return &v }

func sum(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

func setup(t *testing.T) (*ledger.Engine, string) {
	t.Helper()
	dir := t.TempDir()
	m := metrics.New()
	eng := enginetest.Open(t, dir, ledger.Options{Observer: m,
		Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(100),
			Ceilings: []ledger.Ceiling{{Name: "spend", LimitMicros: i64(1000), Window: "24h", Per: "global"}}}}})
	m.Watch(eng)
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{
		Admins: map[string]string{sum("admin-tok"): "alice"}, Agents: map[string]bool{sum("agent-tok"): true}, Metrics: m.Handler()}))
	t.Cleanup(srv.Close)
	return eng, srv.URL
}

func TestAdminAPI(t *testing.T) {
	eng, url := setup(t)
	ctx := context.Background()
	c := &admin.Client{URL: url, Token: "admin-tok"}

	big, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	if big.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("setup: %+v", big)
	}
	list, err := c.Approvals(ctx, "pending")
	if err != nil || len(list) != 1 || list[0].ApprovalID != big.ApprovalID || list[0].AgentID != "bot" {
		t.Fatalf("approvals: %+v %v", list, err)
	}
	a, err := c.Decide(ctx, big.ApprovalID, true, "fine")
	if err != nil || a.State != ledger.ApprovalApproved || a.DecidedBy != "admin:alice" || a.Note != "fine" {
		t.Fatalf("approve: %+v %v", a, err)
	}
	var ae *admin.Error
	if _, err := c.Decide(ctx, big.ApprovalID, false, ""); !errors.As(err, &ae) || ae.Status != 409 || ae.Code != "invalid_state_transition" {
		t.Fatalf("reject after approve: %v", err)
	}
	if _, err := c.Decide(ctx, "apr_nope", true, ""); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "approval_not_found" {
		t.Fatalf("unknown approval: %v", err)
	}

	ex, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	eng.Report(ctx, ledger.ReportRequest{EffectID: ex.EffectID, Outcome: ledger.OutcomeUnknown})
	page, err := c.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{State: ledger.StateIndeterminate}})
	if err != nil || len(page.Effects) != 1 {
		t.Fatalf("effects: %+v %v", page, err)
	}
	e, err := c.Resolve(ctx, ex.EffectID, ledger.OutcomeSucceeded, "seen at vendor")
	if err != nil || e.State != ledger.StateSucceeded || e.ResolvedBy != "admin:alice" || e.ResolutionNote != "seen at vendor" {
		t.Fatalf("resolve: %+v %v", e, err)
	}
	if got, err := c.Effect(ctx, ex.EffectID); err != nil || got.State != ledger.StateSucceeded {
		t.Fatalf("show: %+v %v", got, err)
	}
	if _, err := c.Effect(ctx, "eff_nope"); !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("unknown effect: %v", err)
	}
	if _, err := c.Resolve(ctx, ex.EffectID, "maybe", ""); !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_argument" {
		t.Fatalf("bad resolution: %v", err)
	}
	budgets, err := c.Budgets(ctx, "")
	if err != nil || len(budgets) != 1 || budgets[0].Counted != 500 || budgets[0].Remaining != 500 {
		t.Fatalf("budgets: %+v %v", budgets, err)
	}

	// Metrics moved, and the ledger gauges are read at scrape time.
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`ratchet_decisions_total{decision="approval_required",effect_type="payment.charge"} 1`,
		`ratchet_decisions_total{decision="execute",effect_type="payment.charge"} 1`,
		`ratchet_reports_total{outcome="unknown"} 1`,
		`ratchet_effects{state="succeeded"} 1`,
		`ratchet_ceiling_utilisation_ratio{ceiling="spend",namespace="default",per="global"} 0.5`,
		`ratchet_approvals_pending 0`,
		`ratchet_begin_duration_seconds_count 2`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestAdminAuth(t *testing.T) {
	_, url := setup(t)
	for _, c := range []struct {
		name, header string
		status       int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer nope", 401},
		{"agent token", "Bearer agent-tok", 403},
		{"admin token", "Bearer admin-tok", 200},
	} {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/approvals", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status != 200 && !strings.Contains(string(b), `"code":"unauthorized"`)) {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, b)
		}
	}
	// Probes need no token; an unknown endpoint is a JSON 404.
	for path, status := range map[string]int{"/healthz": 200, "/readyz": 200} {
		if resp, err := http.Get(url + path); err != nil || resp.StatusCode != status {
			t.Errorf("%s: %v %v", path, resp, err)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/nothing", nil)
	req.Header.Set("Authorization", "Bearer admin-tok")
	resp, _ := http.DefaultClient.Do(req)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"error":{"code":"not_found"`) {
		t.Errorf("unknown endpoint: %d %s", resp.StatusCode, b)
	}
	// A body that is not the expected JSON is a 400 with a code.
	req, _ = http.NewRequest(http.MethodPost, url+"/v1/approvals/apr_x/approve", strings.NewReader(`{"nope":1}`))
	req.Header.Set("Authorization", "Bearer admin-tok")
	req.Header.Set("Content-Type", "application/json")
	resp, _ = http.DefaultClient.Do(req)
	if resp.StatusCode != 400 {
		t.Errorf("bad body: %d", resp.StatusCode)
	}
}

// cancelledEngine answers every read as a call whose request ended.
type cancelledEngine struct{ admin.Engine }

func (cancelledEngine) List(context.Context, ledger.Filter) (*ledger.Page, error) {
	return nil, &ledger.Error{Code: ledger.CodeUnavailable, Message: "the ledger could not be read; retry later", Err: context.Canceled}
}
func (cancelledEngine) Budgets(context.Context, string) ([]ledger.Budget, error) {
	return nil, context.Canceled
}

// TestACancelledOrShutDownCallIsUnavailableNotAnInternalError: the admin
// API classifies errors as the MCP tools and the proxy do (ledger.Classify):
// a call that ended or an engine shutting down is 503 unavailable.
func TestACancelledOrShutDownCallIsUnavailableNotAnInternalError(t *testing.T) {
	srv := httptest.NewServer(admin.Handler(cancelledEngine{}, &admin.Options{}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/v1/effects", "/v1/budgets"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":"unavailable"`) {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
}

// TestTheApprovalJSONShowsTheDeclaredCompensation: the admin API's pending
// approval, as raw JSON, names the undo its step declared (approving the
// step lets that undo skip approval up to the step's estimate).
func TestTheApprovalJSONShowsTheDeclaredCompensation(t *testing.T) {
	eng, url := setup(t)
	ctx := context.Background()
	big, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p2", EffectType: "payment.charge", AgentID: "bot", GroupKey: "order:2",
		EstimatedCostMicros: i64(500), Compensation: &ledger.Compensation{EffectType: "payment.charge", Vendor: "stripe",
			EstimatedCostMicros: i64(500), Description: "charge acct_other"}})
	if big.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("setup: %+v", big)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/approvals?state=pending", nil)
	req.Header.Set("Authorization", "Bearer admin-tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Approvals []struct {
			Compensation *struct {
				EffectType          string `json:"effect_type"`
				Vendor              string `json:"vendor"`
				EstimatedCostMicros int64  `json:"estimated_cost_micros"`
				Description         string `json:"description"`
			} `json:"compensation"`
		} `json:"approvals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Approvals) != 1 {
		t.Fatalf("approvals: %+v %v", body, err)
	}
	c := body.Approvals[0].Compensation
	if c == nil {
		t.Fatal("the approval JSON has no compensation")
	}
	if c.EffectType != "payment.charge" || c.Vendor != "stripe" || c.EstimatedCostMicros != 500 || c.Description != "charge acct_other" {
		t.Errorf("compensation %+v, want the declared payment.charge at stripe for 500", *c)
	}
}
