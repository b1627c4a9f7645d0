package mcp_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

func httpClient(t testing.TB, url, token string) (*sdk.ClientSession, error) {
	t.Helper()
	cs, err := mcp.Connect(context.Background(), url, token, "test")
	if err == nil {
		t.Cleanup(func() { cs.Close() })
	}
	return cs, err
}

func serveHTTP(t testing.TB, eng mcp.Engine, opts *mcp.HTTPOptions) string {
	t.Helper()
	srv := httptest.NewServer(mcp.Handler(mcp.New(eng, nil), opts))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestDecisionTable(t *testing.T) {
	for _, transport := range []string{"in-memory", "http"} {
		t.Run(transport, func(t *testing.T) {
			c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
			eng := newEngine(t, c)
			var cs *sdk.ClientSession
			if transport == "http" {
				var err error
				if cs, err = httpClient(t, serveHTTP(t, eng, nil), ""); err != nil {
					t.Fatal(err)
				}
			} else {
				cs = inMemory(t, mcp.New(eng, nil))
			}
			decisionTable(t, cs, c, eng)
		})
	}
}

func pay(key string, cost int64) map[string]any {
	return map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "vendor": "stripe",
		"payload": map[string]any{"amount": cost}, "dimensions": map[string]any{"counterparty": "acct_1"},
		"estimated_cost_micros": cost, "lease_seconds": 30, "agent_id": "bot"}
}

func decisionTable(t *testing.T, cs *sdk.ClientSession, c *clock, eng *ledger.Engine) {
	// execute → in_flight → report → duplicate with result
	ex := decision(t, cs, pay("inv:1", 10_000_000), "execute")
	id := ex["effect_id"].(string)
	if vk := ex["vendor_idempotency_key"].(map[string]any); vk["name"] != "Idempotency-Key" || vk["enforced"] != true {
		t.Fatalf("vendor key %v", vk)
	}
	if in := decision(t, cs, pay("inv:1", 10_000_000), "in_flight"); in["retry_after_seconds"] != float64(30) {
		t.Fatalf("in_flight %v", in)
	}
	out, res := call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": id, "outcome": "succeeded",
		"result": map[string]any{"id": "pi_1"}, "vendor_reference": "pi_1"})
	if res.IsError || out["state"] != "succeeded" {
		t.Fatalf("report %v", out)
	}
	dup := decision(t, cs, pay("inv:1", 10_000_000), "duplicate")
	if dup["result"].(map[string]any)["id"] != "pi_1" || dup["vendor_reference"] != "pi_1" {
		t.Fatalf("duplicate %v", dup)
	}

	// conflict
	other := pay("inv:1", 10_000_000)
	other["payload"] = map[string]any{"amount": 11}
	toolErr(t, cs, "ratchet_begin_effect", other, "idempotency_key_conflict")

	// failed → attempt 2 with a new vendor key
	f := decision(t, cs, pay("inv:2", 1_000_000), "execute")
	call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": f["effect_id"], "outcome": "failed", "error": "declined"})
	f2 := decision(t, cs, pay("inv:2", 1_000_000), "execute")
	if f2["attempt"] != float64(2) || f2["vendor_idempotency_key"].(map[string]any)["value"] == f["vendor_idempotency_key"].(map[string]any)["value"] {
		t.Fatalf("attempt 2 %v", f2)
	}

	// lease expiry → blocked → resolve → duplicate; warning meanwhile
	c.Advance(31 * time.Second)
	b := decision(t, cs, pay("inv:2", 1_000_000), "blocked")
	if b["reason"] != "lease_expired" {
		t.Fatalf("blocked %v", b)
	}
	w := decision(t, cs, pay("inv:3", 1_000_000), "execute")
	if iw, _ := w["integration_warning"].(map[string]any); iw == nil || iw["unreported_count"] != float64(1) {
		t.Fatalf("integration warning %v", w)
	}
	out, res = call(t, cs, "ratchet_resolve_effect", map[string]any{"idempotency_key": "inv:2", "attempt": b["attempt"], "resolution": "succeeded", "note": "seen at vendor"})
	if res.IsError || out["state"] != "succeeded" {
		t.Fatalf("resolve %v", out)
	}
	// Credentials that fix no agent_id: the namespace says who resolved.
	if out["resolved_by"] != "agent:namespace=default" {
		t.Errorf("resolved_by %q, want agent:namespace=default", out["resolved_by"])
	}
	decision(t, cs, pay("inv:2", 1_000_000), "duplicate")

	// approval and budget: 10+1+1 = 12 of 150 spent
	a := decision(t, cs, pay("big", 120_000_000), "approval_required")
	if a["approval_id"] == "" || a["threshold_micros"] != float64(100_000_000) {
		t.Fatalf("approval %v", a)
	}
	decision(t, cs, pay("big", 120_000_000), "approval_required") // asked again: same request
	if _, err := eng.Approve(context.Background(), a["approval_id"].(string), "alice", ""); err != nil {
		t.Fatal(err)
	}
	ok := decision(t, cs, pay("big", 120_000_000), "execute")
	call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": ok["effect_id"], "outcome": "failed"})
	d := decision(t, cs, pay("bigger", 140_000_000), "denied")
	if d["reason"] != "budget_exceeded" || d["ceiling"].(map[string]any)["name"] != "daily-spend" {
		t.Fatalf("budget denial %v", d)
	}
	noCost := pay("nocost", 1)
	delete(noCost, "estimated_cost_micros")
	toolErr(t, cs, "ratchet_begin_effect", noCost, "cost_required")
	noDim := pay("nodim", 1)
	delete(noDim, "dimensions")
	if e := toolErr(t, cs, "ratchet_begin_effect", noDim, "dimension_required"); e["field"] != "dimensions.counterparty" {
		t.Fatalf("dimension error %v", e)
	}
	warn := decision(t, cs, map[string]any{"idempotency_key": "vm", "effect_type": "cloud.vm.create"}, "execute")
	if warn["budget_warning"] == nil {
		t.Fatalf("budget warning %v", warn)
	}

	// groups: two steps, unwind, compensate
	s1 := decision(t, cs, map[string]any{"idempotency_key": "hotel", "effect_type": "hotel.book", "group_key": "trip",
		"compensation": map[string]any{"effect_type": "hotel.cancel", "payload": map[string]any{"res": "H1"}}}, "execute")
	call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": s1["effect_id"], "outcome": "succeeded"})
	s2 := decision(t, cs, map[string]any{"idempotency_key": "mail", "effect_type": "email.send", "group_key": "trip"}, "execute")
	call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": s2["effect_id"], "outcome": "succeeded"})
	u, res := call(t, cs, "ratchet_unwind_group", map[string]any{"group_key": "trip", "reason": "cancelled"})
	comps := u["compensations"].([]any)
	if res.IsError || u["state"] != "unwinding" || len(comps) != 1 || len(u["permanent"].([]any)) != 1 {
		t.Fatalf("unwind %v", u)
	}
	comp := comps[0].(map[string]any)
	decision(t, cs, map[string]any{"idempotency_key": "spa", "effect_type": "spa.book", "group_key": "trip"}, "denied")
	undo := decision(t, cs, map[string]any{"idempotency_key": comp["idempotency_key"], "effect_type": comp["effect_type"],
		"payload": comp["payload"], "compensates_effect_id": comp["compensates_effect_id"], "group_key": "trip"}, "execute")
	call(t, cs, "ratchet_report_effect", map[string]any{"effect_id": undo["effect_id"], "outcome": "succeeded"})
	u, _ = call(t, cs, "ratchet_unwind_group", map[string]any{"group_key": "trip"})
	if u["state"] != "unwound" {
		t.Fatalf("unwound %v", u)
	}

	// get and list
	g, res := call(t, cs, "ratchet_get_effect", map[string]any{"idempotency_key": "hotel"})
	if res.IsError || g["state"] != "compensated" {
		t.Fatalf("get %v", g)
	}
	l, _ := call(t, cs, "ratchet_list_effects", map[string]any{"group_key": "trip"})
	if len(l["effects"].([]any)) != 3 {
		t.Fatalf("list %v", l)
	}
	l, _ = call(t, cs, "ratchet_list_effects", map[string]any{"state": "succeeded", "limit": 2})
	if len(l["effects"].([]any)) != 2 || l["next_cursor"] == nil {
		t.Fatalf("paged list %v", l)
	}

	// errors with stable codes
	toolErr(t, cs, "ratchet_get_effect", map[string]any{"effect_id": "eff_nope"}, "effect_not_found")
	toolErr(t, cs, "ratchet_get_effect", map[string]any{}, "invalid_argument")
	toolErr(t, cs, "ratchet_report_effect", map[string]any{"effect_id": id, "outcome": "failed"}, "invalid_state_transition")
	toolErr(t, cs, "ratchet_report_effect", map[string]any{"effect_id": id, "outcome": "maybe"}, "invalid_argument")
	toolErr(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "x", "effect_type": "a.b", "lease_seconds": "soon"}, "invalid_argument")
	if e := toolErr(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "x", "effect_type": "a.b", "colour": "red"}, "invalid_argument"); e["field"] != "colour" {
		t.Fatalf("unknown field error %v", e)
	}
	toolErr(t, cs, "ratchet_begin_effect", map[string]any{"effect_type": "a.b"}, "invalid_argument")
	toolErr(t, cs, "ratchet_unwind_group", map[string]any{"group_key": "nope"}, "group_not_found")
}

func TestHTTPAuthAndIsolation(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	eng := newEngine(t, c)
	url := serveHTTP(t, eng, &mcp.HTTPOptions{Agents: hashes(map[string]mcp.Identity{
		"tok-shop": {Namespace: "shop", AgentID: "checkout-bot"},
		"tok-blog": {Namespace: "blog"},
	})})
	if _, err := httpClient(t, url, ""); err == nil {
		t.Fatal("a call without a token was accepted")
	}
	if _, err := httpClient(t, url, "tok-wrong"); err == nil {
		t.Fatal("a wrong token was accepted")
	}
	// Plain HTTP without a token gets 401 too.
	resp, err := http.Post(url, "application/json", nil)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %v %v", resp.StatusCode, err)
	}
	resp.Body.Close()

	shop, err := httpClient(t, url, "tok-shop")
	if err != nil {
		t.Fatal(err)
	}
	blog, err := httpClient(t, url, "tok-blog")
	if err != nil {
		t.Fatal(err)
	}
	req := map[string]any{"idempotency_key": "same", "effect_type": "email.send"}
	a := decision(t, shop, req, "execute")
	decision(t, blog, req, "execute") // no dedupe across namespaces
	eff, _ := call(t, shop, "ratchet_get_effect", map[string]any{"effect_id": a["effect_id"]})
	if eff["namespace"] != "shop" || eff["agent_id"] != "checkout-bot" {
		t.Fatalf("identity not applied: %v", eff)
	}
	toolErr(t, blog, "ratchet_get_effect", map[string]any{"effect_id": a["effect_id"]}, "effect_not_found")
	// Each attempt's vendor key is the operators' (admin API): no tool
	// answers it, not even to the effect's own namespace.
	charged := decision(t, shop, map[string]any{"idempotency_key": "vk", "effect_type": "email.send", "vendor": "stripe"}, "execute")
	got, _ := call(t, shop, "ratchet_get_effect", map[string]any{"effect_id": charged["effect_id"]})
	if _, ok := got["attempts"]; ok {
		t.Errorf("ratchet_get_effect answered the attempts' vendor keys: %v", got["attempts"])
	}
	if key := charged["vendor_idempotency_key"].(map[string]any)["value"].(string); strings.Contains(fmt.Sprint(got), key) {
		t.Errorf("ratchet_get_effect shows the vendor key %s: %v", key, got)
	}
	toolErr(t, blog, "ratchet_report_effect", map[string]any{"effect_id": a["effect_id"], "outcome": "failed"}, "effect_not_found")
	l, _ := call(t, blog, "ratchet_list_effects", map[string]any{})
	if len(l["effects"].([]any)) != 1 {
		t.Fatalf("blog sees %v", l)
	}
	// An agent cannot claim another identity.
	toolErr(t, shop, "ratchet_begin_effect", map[string]any{"idempotency_key": "k", "effect_type": "email.send", "agent_id": "other-bot"}, "unauthorized")
	decision(t, shop, map[string]any{"idempotency_key": "k", "effect_type": "email.send", "agent_id": "checkout-bot"}, "execute")
}

func TestConcurrentBeginsOverHTTP(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	url := serveHTTP(t, newEngine(t, c), nil)
	const n = 20
	sessions := make([]*sdk.ClientSession, n)
	for i := range sessions {
		var err error
		if sessions[i], err = httpClient(t, url, ""); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[string]int{}
	ids := map[any]bool{}
	start := make(chan struct{})
	for _, cs := range sessions {
		wg.Go(func() {
			<-start
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
				Arguments: map[string]any{"idempotency_key": "one", "effect_type": "email.send"}})
			if err != nil || res.IsError {
				t.Error(err, res)
				return
			}
			out := res.StructuredContent.(map[string]any)
			mu.Lock()
			counts[out["decision"].(string)]++
			ids[out["effect_id"]] = true
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if counts["execute"] != 1 || counts["in_flight"] != n-1 || len(ids) != 1 {
		t.Fatalf("decisions %v over %d effects", counts, len(ids))
	}
}

// TestClientKeepsConnections checks that Connect's sessions reuse their
// HTTP connections (the bridge forwards every call of its client through
// one); a connection opened per call costs more than the call.
func TestClientKeepsConnections(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(mcp.Handler(mcp.New(newEngine(t, c), nil), nil))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	const sessions, calls = 16, 50
	var wg sync.WaitGroup
	for range sessions {
		cs, err := httpClient(t, srv.URL, "")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for range calls {
				if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_list_effects", Arguments: map[string]any{}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// Each session may hold a connection for its calls and one for the
	// stream the server may send on; a few more can open while sessions
	// start together.
	if n := opened.Load(); n > 3*sessions {
		t.Fatalf("%d calls from %d sessions opened %d connections", sessions*calls, sessions, n)
	}
}

// TestATokenFixedToAnAgentSettlesOnlyItsAttempts: two agents of one
// namespace, each with a token that fixes its agent_id; one may not report
// or resolve what the other began.
func TestATokenFixedToAnAgentSettlesOnlyItsAttempts(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	eng := newEngine(t, c)
	url := serveHTTP(t, eng, &mcp.HTTPOptions{Agents: hashes(map[string]mcp.Identity{
		"tok-alice":   {Namespace: "shop", AgentID: "alice-bot"},
		"tok-mallory": {Namespace: "shop", AgentID: "mallory-bot"},
	})})
	alice, err := httpClient(t, url, "tok-alice")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := httpClient(t, url, "tok-mallory")
	if err != nil {
		t.Fatal(err)
	}
	a := decision(t, alice, map[string]any{"idempotency_key": "mail:1", "effect_type": "email.send", "lease_seconds": 30}, "execute")
	toolErr(t, mallory, "ratchet_report_effect", map[string]any{"effect_id": a["effect_id"], "attempt": 1, "outcome": "failed"}, "unauthorized")
	c.Advance(31 * time.Second) // blocked: now it could be resolved
	toolErr(t, mallory, "ratchet_resolve_effect", map[string]any{"effect_id": a["effect_id"], "attempt": 1, "resolution": "failed"}, "unauthorized")
	out, res := call(t, alice, "ratchet_resolve_effect", map[string]any{"effect_id": a["effect_id"], "attempt": 1, "resolution": "failed"})
	if res.IsError || out["state"] != "failed" {
		t.Fatalf("the owner's resolve: %v", out)
	}
}

// TestTheBridgeSurvivesACallTheSidecarRefuses: arguments larger than the
// sidecar accepts are refused by the bridge as invalid_argument; a call the
// sidecar refuses at the transport (413 here, as a sidecar with a smaller
// limit answers) is a tool error with code unavailable; and either way the
// next call goes through (before, the bridge's session closed for good).
func TestTheBridgeSurvivesACallTheSidecarRefuses(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	eng := newEngine(t, c)
	for name, tc := range map[string]struct {
		sidecarLimit int64
		argBytes     int
		code         ledger.Code
	}{
		"refused by the sidecar": {64 << 10, 100 << 10, ledger.CodeUnavailable},
		"refused by the bridge":  {0, 2 << 20, ledger.CodeInvalidArgument},
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(mcp.Handler(mcp.New(eng, nil), &mcp.HTTPOptions{MaxBodyBytes: tc.sidecarLimit}))
			t.Cleanup(srv.Close)
			ctx := context.Background()
			connect := func(ctx context.Context) (*sdk.ClientSession, error) { return mcp.Connect(ctx, srv.URL, "", "test") }
			bridge, closeRemote, err := mcp.Bridge(ctx, connect, "test")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(closeRemote)
			cs := inMemory(t, bridge)
			get := func() {
				t.Helper()
				res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_get_effect", Arguments: map[string]any{"idempotency_key": "x"}})
				if err != nil || mcp.ErrorOf(res).Code != ledger.CodeEffectNotFound {
					t.Fatalf("a valid call: %v %v", err, mcp.ErrorOf(res))
				}
			}
			get()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
				"idempotency_key": "big", "effect_type": "email.send", "payload": strings.Repeat("x", tc.argBytes)}})
			if err != nil || mcp.ErrorOf(res) == nil || mcp.ErrorOf(res).Code != tc.code {
				t.Fatalf("the oversized call: %v %+v", err, mcp.ErrorOf(res))
			}
			get()
			get()
		})
	}
}

// TestAWebPageCannotCallTheTools: a cross-site request, as a browser sends
// it (Sec-Fetch-Site, Origin), is refused before any tool runs, with a
// token or without.
func TestAWebPageCannotCallTheTools(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	url := serveHTTP(t, newEngine(t, c), nil)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"page","version":"1"}}}`
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a cross-site initialize: %d", resp.StatusCode)
	}
	// The agent's own client (no browser headers) is served.
	if _, err := httpClient(t, url, ""); err != nil {
		t.Fatal(err)
	}
}
