package admin_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// lookupSetup is an admin API over an engine with a per-counterparty
// ceiling, in namespaces default and shop; log gets the API's lines.
func lookupSetup(t *testing.T, log *bytes.Buffer) (*ledger.Engine, string) {
	t.Helper()
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{Policies: []ledger.Rule{{Match: "payment.*",
		Ceilings: []ledger.Ceiling{{Name: "per-cp", LimitMicros: i64(10_000), Window: "24h", Per: "dimension:counterparty"}}}}})
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{Admins: map[string]string{sum("admin-tok"): "alice"},
		Agents: map[string]bool{sum("agent-tok"): true}, Namespaces: []string{"default", "shop"},
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))}))
	t.Cleanup(srv.Close)
	return eng, srv.URL
}

// An operator who must check at the vendor sees the vendor key of every
// attempt, finds an effect by its idempotency key, and an unknown filter
// is refused instead of answering every effect.
func TestOperatorFindsWhatToSearchTheVendorBy(t *testing.T) {
	var log bytes.Buffer
	eng, url := lookupSetup(t, &log)
	ctx := context.Background()
	c := &admin.Client{URL: url, Token: "admin-tok"}
	charge := ledger.BeginRequest{Namespace: "shop", IdempotencyKey: "order-17", EffectType: "payment.charge", Vendor: "stripe",
		Dimensions: map[string]string{"counterparty": "acct_9"}, EstimatedCostMicros: i64(100)}
	first, _ := eng.Begin(ctx, charge)
	eng.Report(ctx, ledger.ReportRequest{Namespace: "shop", EffectID: first.EffectID, Attempt: first.Attempt, Outcome: ledger.OutcomeFailed})
	second, _ := eng.Begin(ctx, charge)
	eng.Report(ctx, ledger.ReportRequest{Namespace: "shop", EffectID: second.EffectID, Attempt: second.Attempt, Outcome: ledger.OutcomeUnknown})
	eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "other", EffectType: "payment.charge", Dimensions: map[string]string{"counterparty": "acct_1"}})

	got, err := c.Effect(ctx, first.EffectID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Attempts) != 2 {
		t.Fatalf("attempts %+v, want 2", got.Attempts)
	}
	for i, want := range []*ledger.BeginResult{first, second} {
		if got.Attempts[i].Attempt != i+1 || got.Attempts[i].VendorIdempotencyKey != *want.VendorIdempotencyKey {
			t.Errorf("attempt %d shown %+v, want the key handed out %+v", i+1, got.Attempts[i], *want.VendorIdempotencyKey)
		}
	}

	// By idempotency key: in the namespace given, or searched in each.
	for _, ns := range []string{"shop", ""} {
		page, err := c.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: ns}, IdempotencyKey: "order-17"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Effects) != 1 || page.Effects[0].EffectID != first.EffectID {
			t.Errorf("namespace %q, key order-17: %+v, want only %s", ns, page.Effects, first.EffectID)
		}
	}
	page, err := c.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{Namespace: "default"}, IdempotencyKey: "order-17"})
	if err != nil || len(page.Effects) != 0 {
		t.Errorf("key order-17 in namespace default: %+v %v, want none", page, err)
	}
	page, err = c.Effects(ctx, admin.EffectFilter{Filter: ledger.Filter{State: ledger.StateSucceeded}, IdempotencyKey: "order-17"})
	if err != nil || len(page.Effects) != 0 {
		t.Errorf("key order-17 in state succeeded: %+v %v, want none (it is indeterminate)", page, err)
	}

	// Unknown query parameters: 400 unknown_parameter, on every endpoint.
	for _, path := range []string{"/v1/effects?idempotency_kee=order-17", "/v1/effects/" + first.EffectID + "?x=1",
		"/v1/approvals?stat=pending", "/v1/budgets?scope=x", "/v1/grants?al=true", "/v1/outbox?deadd=true", "/v1/audit?from=x"} {
		status, body := get(t, url+path, "admin-tok")
		if status != http.StatusBadRequest || !strings.Contains(body, `"code":"unknown_parameter"`) {
			t.Errorf("GET %s: %d %s, want 400 unknown_parameter", path, status, body)
		}
	}
	if status, body := get(t, url+"/v1/effects?state=indeterminate&limit=5", "admin-tok"); status != http.StatusOK {
		t.Errorf("known parameters: %d %s", status, body)
	}
}

// The budgets of one counterparty are found by its value, which the server
// hashes and neither logs nor keeps; an agent's token cannot ask.
func TestBudgetScopeLookupByValue(t *testing.T) {
	var log bytes.Buffer
	eng, url := lookupSetup(t, &log)
	ctx := context.Background()
	for _, cp := range []string{"acct_secret_9", "acct_1"} {
		eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: cp, EffectType: "payment.charge",
			Dimensions: map[string]string{"counterparty": cp}, EstimatedCostMicros: i64(700)})
	}
	c := &admin.Client{URL: url, Token: "admin-tok"}
	ans, err := c.LookupScope(ctx, "", "counterparty", "acct_secret_9")
	if err != nil {
		t.Fatal(err)
	}
	if len(ans.Budgets) != 1 || ans.Budgets[0].Counted != 700 || ans.Budgets[0].Scope != ans.Scope {
		t.Errorf("lookup: %+v, want the one row of its scope, counted 700", ans)
	}
	if none, err := c.LookupScope(ctx, "", "counterparty", "acct_never"); err != nil || len(none.Budgets) != 0 {
		t.Errorf("a value never counted: %+v %v, want no rows", none, err)
	}
	var ae *admin.Error
	if _, err := c.LookupScope(ctx, "", "Counterparty", "acct_1"); !errors.As(err, &ae) || ae.Code != "invalid_argument" ||
		!strings.Contains(ae.Message, "lowercase") {
		t.Errorf("an uppercase name: %v, want invalid_argument saying lowercase", err)
	}
	agent := &admin.Client{URL: url, Token: "agent-tok"}
	if _, err := agent.LookupScope(ctx, "", "counterparty", "acct_1"); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Errorf("an agent's token: %v, want 403", err)
	}
	if strings.Contains(log.String(), "acct_secret_9") {
		t.Errorf("the value was logged:\n%s", log.String())
	}
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}
