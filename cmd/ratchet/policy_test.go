package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/client"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// exampleConfig is configs/ratchet.example.yaml as an operator fills it
// in: real token hashes, the data dir, loopback ports the test picks, and
// Stripe's upstream at stripeURL. Its rules are as shipped.
func exampleConfig(t *testing.T, dataDir, stripeURL, agentToken, adminToken string) string {
	t.Helper()
	b, err := os.ReadFile("../../configs/ratchet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for old, new := range map[string]string{
		"data_dir: ./data":               "data_dir: " + dataDir,
		"hmac_key_file: ./data/hmac.key": "hmac_key_file: " + filepath.Join(dataDir, "hmac.key"),
		"127.0.0.1:8787":                 "127.0.0.1:0",
		"127.0.0.1:8788":                 "127.0.0.1:0",
		"127.0.0.1:8789":                 "127.0.0.1:0",
		"stripe: https://api.stripe.com": "stripe: " + stripeURL,
		`"REPLACE with the SHA-256 of the agent's token: ratchet token hash < agent-token"`:   sha(agentToken),
		`"REPLACE with the SHA-256 of alice's admin token: ratchet token hash < admin-token"`: sha(adminToken),
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("the example config no longer has %q", old)
		}
		s = strings.ReplaceAll(s, old, new)
	}
	path := filepath.Join(t.TempDir(), "ratchet.yaml")
	writeFile(t, path, s)
	return path
}

// explainLive asks the running server what a request or begin would get.
func explainLive(t *testing.T, s *server, token string, args ...string) *admin.ExplainAnswer {
	t.Helper()
	code, out, errs := cli(t, token, nil, append([]string{"policy", "explain", "--admin", s.admin, "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("policy explain %v: exit %d: %s", args, code, errs)
	}
	var ans admin.ExplainAnswer
	if err := json.Unmarshal([]byte(out), &ans); err != nil {
		t.Fatalf("policy explain output: %v\n%s", err, out)
	}
	return &ans
}

func explainedDecision(ans *admin.ExplainAnswer) string {
	switch {
	case ans.Explanation == nil:
		return "no explanation"
	case ans.Error != nil:
		return "error " + string(ans.Error.Code)
	}
	return string(ans.Decision.Decision)
}

// TestStripeGoPaymentMeetsTheExampleConfigsRules walks the path of issue
// 29's new user: under the shipped example config, stripe-go through the
// reverse proxy creates a $150 PaymentIntent. The payment.charge rule
// (the one MCP agents meet) asks a human: 403, Ratchet-Decision:
// approval_required; the operator approves with the CLI; the same call
// then executes and counts against the payment.* ceiling; its refund is
// governed by the refund rule. `ratchet policy explain --admin` says
// beforehand what the server then decides.
func TestStripeGoPaymentMeetsTheExampleConfigsRules(t *testing.T) {
	mock := stripemock.Start(t)
	data := filepath.Join(t.TempDir(), "data")
	s := startServeConfig(t, exampleConfig(t, data, mock, "agent-tok", "admin-tok"), data)
	cfg := &stripe.BackendConfig{HTTPClient: &http.Client{}, MaxNetworkRetries: stripe.Int64(0), LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
		URL: stripe.String(s.proxy + "/stripe")}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, cfg)
	sc := client.New("sk_test_123", &stripe.Backends{API: b, Connect: b, Uploads: b})
	params := func() *stripe.PaymentIntentParams {
		return &stripe.PaymentIntentParams{Amount: stripe.Int64(15000), Currency: stripe.String("usd"), Customer: stripe.String("cus_1")}
	}
	body := "amount=15000&currency=usd&customer=cus_1"
	req := []string{"-X", "POST", s.proxy + "/stripe/v1/payment_intents", "-H", "Authorization: Bearer sk_test_123",
		"-H", "Content-Type: application/x-www-form-urlencoded", "-d", body}

	ans := explainLive(t, s, "admin-tok", req...)
	if ans.Gated == nil || ans.Gated.Operation != "stripe.payment_intents.create" || ans.EffectType != "payment.charge" {
		t.Fatalf("explained as %+v %+v", ans.Gated, ans.Explanation)
	}
	if got := explainedDecision(ans); got != "approval_required" {
		t.Fatalf("explain says %s before the payment, want approval_required", got)
	}

	_, err := sc.PaymentIntents.New(params())
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("a $150 PaymentIntent: %v, want a stripe error", err)
	}
	if se.HTTPStatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", se.HTTPStatusCode)
	}
	if got := se.LastResponse.Header.Get("Ratchet-Decision"); got != "approval_required" {
		t.Fatalf("Ratchet-Decision %q, want approval_required", got)
	}

	// The operator approves with the CLI.
	code, out, errs := cli(t, "admin-tok", nil, "approvals", "list", "--state", "pending", "--admin", s.admin, "-o", "json")
	var approvals []ledger.Approval
	if code != 0 || json.Unmarshal([]byte(out), &approvals) != nil || len(approvals) != 1 {
		t.Fatalf("approvals list: %d %s %s", code, out, errs)
	}
	if approvals[0].EffectType != "payment.charge" || approvals[0].EstimatedCostMicros != 150_000_000 {
		t.Errorf("approval %+v, want payment.charge for 150000000", approvals[0])
	}
	if code, out, errs = cli(t, "admin-tok", nil, "approvals", "approve", approvals[0].ApprovalID, "--admin", s.admin); code != 0 {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}

	// The application's retry of the same payment now executes.
	if got := explainedDecision(explainLive(t, s, "admin-tok", req...)); got != "execute" {
		t.Errorf("explain says %s after the approval, want execute", got)
	}
	pi, err := sc.PaymentIntents.New(params())
	if err != nil {
		t.Fatalf("after approval: %v", err)
	}
	if got := pi.LastResponse.Header.Get("Ratchet-Decision"); got != "execute" {
		t.Fatalf("after approval Ratchet-Decision %q", got)
	}
	code, out, errs = cli(t, "admin-tok", nil, "budgets", "--admin", s.admin, "-o", "json")
	var budgets []ledger.Budget
	if code != 0 || json.Unmarshal([]byte(out), &budgets) != nil {
		t.Fatalf("budgets: %d %s %s", code, out, errs)
	}
	counted := map[string]int64{}
	for _, b := range budgets {
		counted[b.Name] += b.Counted
	}
	if counted["daily-spend"] != 150_000_000 || counted["per-counterparty"] != 150_000_000 {
		t.Errorf("counted %v, want 150000000 in daily-spend and per-counterparty", counted)
	}

	// Its refund is a payment.refund, which the observed refund rule governs.
	refundReq := []string{"-X", "POST", s.proxy + "/stripe/v1/refunds", "-H", "Authorization: Bearer sk_test_123",
		"-H", "Content-Type: application/x-www-form-urlencoded", "-d", "payment_intent=" + pi.ID + "&amount=8000"}
	ans = explainLive(t, s, "admin-tok", refundReq...)
	var modes []string
	for _, r := range ans.Rules {
		modes = append(modes, r.Match+" "+r.Mode)
	}
	if ans.EffectType != "payment.refund" || strings.Join(modes, ", ") != "payment.* enforce, payment.refund observe" {
		t.Errorf("refund explained as %s under %v", ans.EffectType, modes)
	}
	rf, err := sc.Refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String(pi.ID), Amount: stripe.Int64(8000)})
	if err != nil {
		t.Fatalf("refund: %v", err)
	}
	if got := rf.LastResponse.Header.Get("Ratchet-Decision"); got != "execute" {
		t.Errorf("refund Ratchet-Decision %q, want execute (the refund rule only observes)", got)
	}
	code, out, errs = cli(t, "admin-tok", nil, "audit", "export", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, `"type":"policy.observed"`) || !strings.Contains(out, `"operation":"stripe.refunds.create"`) {
		t.Errorf("audit export has no observation of the refund: %d %s", code, errs)
	}
}

// TestPolicyExplainAgreesWithTheServer: for MCP begins and proxied
// requests in turn, what `ratchet policy explain --admin` says each would
// get is what the running server then decides: deny (by type and by
// vendor), threshold, money and count ceilings, per-dimension ceilings
// declared and not, required dimensions, observe mode. The PostgreSQL
// variant runs the same cases against a server on a shared ledger.
func TestPolicyExplainAgreesWithTheServer(t *testing.T) {
	t.Run("badger", func(t *testing.T) { explainAgreement(t, "") })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSNOrDefault()
		if err := pgtest.Reachable(dsn); err != nil {
			if pgtest.Required() {
				t.Fatalf("PostgreSQL required: %v", err)
			}
			t.Skip("no PostgreSQL:", err)
		}
		schema := pgtest.Schema(t, dsn, "explain_")
		t.Setenv("RATCHET_TEST_EXPLAIN_DSN", dsn)
		explainAgreement(t, "ledger: {backend: postgres, dsn_env: RATCHET_TEST_EXPLAIN_DSN, schema: "+schema+"}\n")
	})
}

func explainAgreement(t *testing.T, ledgerConfig string) {
	mock := stripemock.Start(t)
	data := filepath.Join(t.TempDir(), "data")
	s := startServe(t, data, ledgerConfig+"auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: shop, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha("admin-tok")+"', name: alice}]\n"+
		"proxy:\n  namespace: shop\n  upstreams: {stripe: '"+mock+"'}\n"+
		"policies:\n"+
		"  - {match: 'payment.*', ceilings: [{name: daily, limit_micros: 300000000, window: 24h, per: global}]}\n"+
		"  - match: payment.charge\n    approval_threshold_micros: 100000000\n    require_dimensions: [counterparty]\n"+
		"    ceilings: [{name: per-payer, limit_micros: 120000000, window: 24h, per: 'dimension:counterparty'}]\n"+
		"  - {match: payment.refund, mode: observe, approval_threshold_micros: 1000000}\n"+
		"  - {match: 'payment.*', vendor: adyen, deny: true}\n"+
		"  - match: email.send\n    ceilings: [{name: mails, limit_count: 1, window: 1h, per: agent}, {name: per-list, limit_count: 5, window: 1h, per: 'dimension:list'}]\n"+
		"  - {match: 'db.drop.*', deny: true}\n")
	cs := connect(t, s.mcp, "agent-tok")
	mcpBegin := func(args map[string]any) string {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		if le := mcp.ErrorOf(res); le != nil {
			return "error " + string(le.Code)
		}
		return res.StructuredContent.(map[string]any)["decision"].(string)
	}
	proxied := func(path, form string) string {
		req, _ := http.NewRequest(http.MethodPost, s.proxy+"/stripe"+path, strings.NewReader(form))
		req.Header.Set("Authorization", "Bearer sk_test_123")
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if d := resp.Header.Get("Ratchet-Decision"); d != "" {
			return d
		}
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		json.Unmarshal(b, &e)
		return "error " + strings.TrimPrefix(e.Error.Code, "ratchet_")
	}
	type step struct {
		name    string
		begin   map[string]any // an MCP begin, or
		path    string         // a proxied Stripe request
		form    string
		want    string
		observe string // what explain says an observed rule would answer
	}
	pay := func(key string, cost int64, payer string) map[string]any {
		m := map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "vendor": "stripe", "estimated_cost_micros": cost}
		if payer != "" {
			m["dimensions"] = map[string]any{"counterparty": payer}
		}
		return m
	}
	steps := []step{
		{name: "an agent's charge under every limit", begin: pay("c-1", 50_000_000, "cus_A"), want: "execute"},
		{name: "a proxied $110 charge: threshold", path: "/v1/payment_intents", form: "amount=11000&currency=usd&customer=cus_B", want: "approval_required"},
		{name: "an agent's charge over the payer's ceiling", begin: pay("c-2", 80_000_000, "cus_A"), want: "denied"},
		{name: "a proxied charge over the payer's ceiling", path: "/v1/payment_intents", form: "amount=8000&currency=usd&customer=cus_A", want: "denied"},
		{name: "an agent's charge without its required dimension", begin: pay("c-3", 1_000_000, ""), want: "error dimension_required"},
		{name: "a proxied charge without a customer", path: "/v1/payment_intents", form: "amount=100&currency=usd", want: "error dimension_required"},
		{name: "an agent's charge at adyen: denied by vendor", begin: map[string]any{"idempotency_key": "a-1", "effect_type": "payment.charge", "vendor": "adyen",
			"estimated_cost_micros": 1, "dimensions": map[string]any{"counterparty": "x"}}, want: "denied"},
		{name: "an agent's table drop: denied by type", begin: map[string]any{"idempotency_key": "d-1", "effect_type": "db.drop.table"}, want: "denied"},
		{name: "a proxied refund: the observed rule would ask", path: "/v1/refunds", form: "payment_intent=pi_1&amount=500", want: "execute", observe: "cost_required"},
		{name: "an agent's refund: the observed rule would ask", begin: map[string]any{"idempotency_key": "r-1", "effect_type": "payment.refund", "estimated_cost_micros": 5_000_000}, want: "execute", observe: "approval_required"},
		{name: "an agent's mail without its list: executes, warned", begin: map[string]any{"idempotency_key": "m-1", "effect_type": "email.send"}, want: "execute"},
		{name: "an agent's second mail: the count ceiling", begin: map[string]any{"idempotency_key": "m-2", "effect_type": "email.send", "dimensions": map[string]any{"list": "news"}}, want: "denied"},
		{name: "a proxied charge filling the daily ceiling", path: "/v1/payment_intents", form: "amount=9900&currency=usd&customer=cus_C", want: "execute"},
		{name: "an agent's charge filling the daily ceiling", begin: pay("c-4", 99_000_000, "cus_D"), want: "execute"},
		{name: "a proxied charge over the daily ceiling", path: "/v1/payment_intents", form: "amount=9900&currency=usd&customer=cus_E", want: "denied"},
	}
	for _, st := range steps {
		var args []string
		if st.begin != nil {
			b, _ := json.Marshal(st.begin)
			f := filepath.Join(t.TempDir(), "begin.json")
			writeFile(t, f, string(b))
			args = []string{"--begin", f, "--namespace", "shop", "--agent-id", "bot"}
		} else {
			args = []string{"-X", "POST", s.proxy + "/stripe" + st.path, "-H", "Authorization: Bearer sk_test_123",
				"-H", "Content-Type: application/x-www-form-urlencoded", "-d", st.form}
		}
		ans := explainLive(t, s, "admin-tok", args...)
		explained := explainedDecision(ans)
		var got string
		if st.begin != nil {
			got = mcpBegin(st.begin)
		} else {
			got = proxied(st.path, st.form)
		}
		if explained != got {
			t.Errorf("%s: explain said %s, the server decided %s", st.name, explained, got)
		}
		if got != st.want {
			t.Errorf("%s: the server decided %s, want %s", st.name, got, st.want)
		}
		if st.observe != "" && (ans.Observed == nil || ans.Observed.Would != st.observe) {
			t.Errorf("%s: explain's observation %+v, want %s", st.name, ans.Observed, st.observe)
		}
	}
}

// stripeNode runs interop/stripe/forward.mjs: stripe-node through the
// forward proxy, trusting the CA serve exported.
func stripeNode(t *testing.T, proxyURL, caFile string, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command("node", append([]string{"forward.mjs"}, args...)...)
	cmd.Dir = "../../interop/stripe"
	cmd.Env = append(os.Environ(), "PROXY="+proxyURL, "NODE_EXTRA_CA_CERTS="+caFile)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("stripe-node %v: %v\n%s", args, err, out)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("stripe-node %v: %v\n%s", args, err, out)
	}
	return res
}

// TestStripeNodeForwardUnderTheExampleConfig is the stripe-node half of
// issue 29's user path: through the forward proxy (HTTPS_PROXY and
// Ratchet's CA) under the shipped example config, a $150 PaymentIntent is
// approval_required (403), approved with the CLI, then executes and
// counts in the payment.* ceiling; a refund meets the refund rule.
// Needs Node.js and `npm install --no-package-lock` in interop/stripe.
func TestStripeNodeForwardUnderTheExampleConfig(t *testing.T) {
	if _, err := os.Stat("../../interop/stripe/node_modules/stripe"); err != nil {
		if os.Getenv("RATCHET_REQUIRE_INTEROP") != "" {
			t.Fatal("stripe-node is required: npm install --no-package-lock in interop/stripe")
		}
		t.Skip("stripe-node not installed (npm install --no-package-lock in interop/stripe)")
	}
	mock := stripemock.Start(t)
	data := filepath.Join(t.TempDir(), "data")
	cfg := exampleConfig(t, data, mock, "agent-tok", "admin-tok")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	b, _ := os.ReadFile(cfg)
	writeFile(t, cfg, strings.Replace(string(b), "  # ca_export_path: /var/run/ratchet-ca/ca.crt", "  ca_export_path: "+ca, 1))
	s := startServeConfig(t, cfg, data)

	first := stripeNode(t, s.proxy, ca, "charge", "15000", "cus_1")
	if first["status"] != float64(403) || first["decision"] != "approval_required" {
		t.Fatalf("a $150 PaymentIntent: %v, want 403 approval_required", first)
	}
	code, out, errs := cli(t, "admin-tok", nil, "approvals", "list", "--state", "pending", "--admin", s.admin, "-o", "json")
	var approvals []ledger.Approval
	if code != 0 || json.Unmarshal([]byte(out), &approvals) != nil || len(approvals) != 1 {
		t.Fatalf("approvals list: %d %s %s", code, out, errs)
	}
	if code, out, errs = cli(t, "admin-tok", nil, "approvals", "approve", approvals[0].ApprovalID, "--admin", s.admin); code != 0 {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	again := stripeNode(t, s.proxy, ca, "charge", "15000", "cus_1")
	if again["status"] != float64(200) || again["decision"] != "execute" {
		t.Fatalf("after approval: %v, want 200 execute", again)
	}
	code, out, errs = cli(t, "admin-tok", nil, "budgets", "--admin", s.admin, "-o", "json")
	var budgets []ledger.Budget
	if code != 0 || json.Unmarshal([]byte(out), &budgets) != nil {
		t.Fatalf("budgets: %d %s %s", code, out, errs)
	}
	var daily int64
	for _, b := range budgets {
		if b.Name == "daily-spend" {
			daily += b.Counted
		}
	}
	if daily != 150_000_000 {
		t.Errorf("daily-spend counted %d, want 150000000", daily)
	}
	refund := stripeNode(t, s.proxy, ca, "refund", again["id"].(string), "8000")
	if refund["status"] != float64(200) || refund["decision"] != "execute" {
		t.Errorf("refund: %v, want 200 execute (the refund rule observes)", refund)
	}
	code, out, _ = cli(t, "admin-tok", nil, "audit", "export", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, `"type":"policy.observed"`) || !strings.Contains(out, `"effect_type":"payment.refund"`) {
		t.Errorf("audit export has no observation of the refund")
	}
}
