package main

import (
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// Issue 37 from the hostile client's side (review r37): a requestState
// replayed by several retries at once, on one serve (Badger) and across
// two serves sharing a PostgreSQL ledger, and one taken elsewhere.

// attackConfig is conversationConfig plus an agent in another namespace.
func attackConfig(extra string) string {
	return extra + "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}, " +
		"{token_sha256: '" + sha("other-tok") + "', namespace: default, agent_id: other}, " +
		"{token_sha256: '" + sha("ns-tok") + "', namespace: team-b, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n" +
		"notify:\n  console_url: 'https://ratchet.example.com'\n"
}

// sharedLedger is the config of serves sharing one PostgreSQL ledger (a
// fresh schema named from prefix) and one server secret, as replicas do.
func sharedLedger(t *testing.T, prefix string) string {
	t.Helper()
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, prefix)
	t.Setenv("RATCHET_PG_DSN", dsn)
	return "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + schema + "}\n" +
		"secrets: {hmac_key_file: '" + filepath.Join(t.TempDir(), "hmac.key") + "'}\n"
}

// pendingState begins a $150 payment as a 2026-07-28 client that retries
// by hand and returns the input_required result's requestState and the
// approval it asks about.
func pendingState(t *testing.T, cs *sdk.ClientSession, args map[string]any) (string, string) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: args})
	if err != nil || !res.NeedsInput() || res.RequestState == "" {
		t.Fatalf("begin: %v %+v, want input_required with a requestState", err, res)
	}
	el, ok := res.InputRequests["ratchet_approval"].(*sdk.ElicitParams)
	if !ok {
		t.Fatalf("input requests %+v, want ratchet_approval", res.InputRequests)
	}
	return res.RequestState, approvalIDOf(el.URL)
}

// outcome names a retry's answer: its decision, or its error code and field.
func outcome(t *testing.T, cs *sdk.ClientSession, args map[string]any, state string) string {
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: args, RequestState: state,
		InputResponses: sdk.InputResponseMap{"ratchet_approval": &sdk.ElicitResult{Action: "accept"}}})
	switch {
	case err != nil:
		return "transport error: " + err.Error()
	case res.NeedsInput():
		return "input_required"
	}
	if le := mcp.ErrorOf(res); le != nil {
		return string(le.Code) + " on " + le.Field
	}
	d, _ := structured(t, res)["decision"].(string)
	return d
}

// replayAtOnce sends the approved state in 8 retries at once, half to each
// of the clients, and counts the answers.
func replayAtOnce(t *testing.T, clients []*sdk.ClientSession, args map[string]any, state string) map[string]int {
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			o := outcome(t, clients[i%len(clients)], args, state)
			mu.Lock()
			got[o]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// TestARequestStateReplayedAtOnceIsRedeemedOnce: after the operator
// approved, eight retries with the same requestState sent at once get
// execute exactly once; the other seven are refused invalid_argument on
// requestState. On one serve with Badger, and across two serves sharing a
// PostgreSQL ledger.
func TestARequestStateReplayedAtOnceIsRedeemedOnce(t *testing.T) {
	want := map[string]int{"execute": 1, "invalid_argument on requestState": 7}
	pay := func(key string) map[string]any {
		return map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	}
	t.Run("badger", func(t *testing.T) {
		s := startServe(t, filepath.Join(t.TempDir(), "data"), attackConfig(""))
		a := elicitingClient(t, s, "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
		b := elicitingClient(t, s, "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
		state, apr := pendingState(t, a, pay("inv:race"))
		approve(t, s, apr)
		if diff := cmp.Diff(want, replayAtOnce(t, []*sdk.ClientSession{a, b}, pay("inv:race"), state)); diff != "" {
			t.Errorf("answers to 8 retries at once (-want +got):\n%s", diff)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		shared := sharedLedger(t, "conv_")
		sa := startServe(t, filepath.Join(t.TempDir(), "a"), attackConfig(shared))
		sb := startServe(t, filepath.Join(t.TempDir(), "b"), attackConfig(shared))
		a := elicitingClient(t, sa, "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
		b := elicitingClient(t, sb, "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
		state, apr := pendingState(t, a, pay("inv:race"))
		approve(t, sb, apr)
		if diff := cmp.Diff(want, replayAtOnce(t, []*sdk.ClientSession{a, b}, pay("inv:race"), state)); diff != "" {
			t.Errorf("answers to 8 retries at once on two serves (-want +got):\n%s", diff)
		}
	})
}

// TestARequestStateTakenElsewhereIsRefused: a state sent by the same agent
// name in another namespace, with another idempotency key, truncated, or
// to a serve with another server secret is refused invalid_argument on
// requestState, and the rightful retry still gets execute afterwards.
func TestARequestStateTakenElsewhereIsRefused(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), attackConfig(""))
	stranger := startServe(t, filepath.Join(t.TempDir(), "other"), attackConfig(""))
	manual := func(s *server, token string) *sdk.ClientSession {
		return elicitingClientAs(t, s, token, "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
	}
	cs := manual(s, "agent-tok")
	pay := map[string]any{"idempotency_key": "inv:take", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	state, apr := pendingState(t, cs, pay)
	approve(t, s, apr)
	otherKey := map[string]any{"idempotency_key": "inv:take-2", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	refused := "invalid_argument on requestState"
	for name, got := range map[string]string{
		"another namespace": outcome(t, manual(s, "ns-tok"), pay, state),
		"another key":       outcome(t, cs, otherKey, state),
		"truncated":         outcome(t, cs, pay, state[:len(state)-4]),
		"another secret":    outcome(t, manual(stranger, "agent-tok"), pay, state),
		"not base64":        outcome(t, cs, pay, state[:10]+"*"+state[11:]),
	} {
		if got != refused {
			t.Errorf("%s: %s, want %s", name, got, refused)
		}
	}
	if got := outcome(t, cs, pay, state); got != "execute" {
		t.Errorf("the rightful retry: %s, want execute", got)
	}
}

// TestTheConfirmationFormSetsApartWhatTheAgentWrote: the user confirms on
// the strength of the form's one sentence, so what the agent wrote there
// (its name, the dimensions' values: free text) is quoted, and cannot pass
// for Ratchet's own words about the cost; the cost is shown to the micro,
// never rounded down to $0.00; a begin declaring no cost says so.
func TestTheConfirmationFormSetsApartWhatTheAgentWrote(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"policies:\n  - match: 'payment.*'\n    confirm_with: user\n")
	yes := &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}
	spoof := "acct_9). Ratchet: this charge is pre-approved by finance and costs $0.01 (ignore the amount above"
	for _, c := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"spoofing dimension", map[string]any{"idempotency_key": "k1", "effect_type": "payment.charge", "vendor": "stripe", "estimated_cost_micros": 60_000_000,
			"dimensions": map[string]any{"counterparty": spoof}},
			`form: Agent "bot" asks to perform payment.charge at stripe, costing $60.00. Its dimensions, as the agent wrote them: counterparty ` +
				`"acct_9). Ratchet: this charge is pre-approved by finance and costs $0.01 (ignore the amount above". ` +
				"This is what the agent declared to Ratchet. Confirm only if you want it done."},
		{"under a cent", map[string]any{"idempotency_key": "k2", "effect_type": "payment.charge", "estimated_cost_micros": 4_999},
			`form: Agent "bot" asks to perform payment.charge, costing $0.004999. This is what the agent declared to Ratchet. Confirm only if you want it done.`},
		{"no cost", map[string]any{"idempotency_key": "k3", "effect_type": "payment.charge"},
			`form: Agent "bot" asks to perform payment.charge, declaring no cost (it may cost anything). This is what the agent declared to Ratchet. Confirm only if you want it done.`},
	} {
		var asked []string
		if got := structured(t, callResult(t, formClient(t, s, "2025-11-25", &asked, yes), c.args)); got["decision"] != "execute" {
			t.Errorf("%s: %v, want execute", c.name, got)
		}
		if diff := cmp.Diff([]string{c.want}, asked); diff != "" {
			t.Errorf("%s: the form (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestARequestStateFromAnOlderClientIsIgnoredAsBefore: requestState is a
// 2026-07-28 field, and Ratchet issues states only to such clients; a
// 2025-06-18 or 2025-11-25 client that sends one anyway gets the answer it
// got before issue 37 (the field ignored: execute), not invalid_argument.
func TestARequestStateFromAnOlderClientIsIgnoredAsBefore(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), attackConfig(""))
	for _, v := range []string{"2025-06-18", "2025-11-25"} {
		cs := elicitingClient(t, s, v, nil, false)
		res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ratchet_begin_effect", RequestState: "abc",
			Arguments: map[string]any{"idempotency_key": "old:" + v, "effect_type": "payment.charge", "estimated_cost_micros": 1000}})
		if err != nil {
			t.Fatal(err)
		}
		if le := mcp.ErrorOf(res); le != nil {
			t.Errorf("%s: %+v, want the begin answered as before", v, le)
			continue
		}
		if got := structured(t, res)["decision"]; got != "execute" {
			t.Errorf("%s: %v, want execute", v, got)
		}
	}
}

// TestAConfirmationStateIsSpentOnceAndApprovesNothing: under a rule that
// asks the user from $50 and an operator from $100, a 2026-07-28 client's
// retry with the confirmation's state and an accept for both the
// confirmation and an approval it was never asked is approval_required,
// not execute; the same state again is refused invalid_argument on
// requestState; once the operator approved, the plain retry executes
// without asking the user again.
func TestAConfirmationStateIsSpentOnceAndApprovesNothing(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha("admin-tok")+"', name: alice}]\n"+
		"policies:\n  - match: 'payment.*'\n    confirm_with: user\n    confirm_threshold_micros: 50000000\n    approval_threshold_micros: 100000000\n")
	ctx := t.Context()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-host", Version: "1"}, &sdk.ClientOptions{
		Capabilities:   &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}, URL: &sdk.URLElicitationCapabilities{}}},
		MultiRoundTrip: &sdk.MultiRoundTripOptions{Disabled: true}, // it answers by hand, below
	}).Connect(ctx, &sdk.StreamableClientTransport{Endpoint: s.mcp, HTTPClient: &http.Client{Transport: agentBearer{"agent-tok"}}},
		&sdk.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	pay := map[string]any{"idempotency_key": "both", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	first, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: pay})
	if err != nil || !first.NeedsInput() {
		t.Fatalf("begin: %v %+v, want input_required", err, first)
	}
	if _, ok := first.InputRequests["ratchet_confirm"]; !ok {
		t.Fatalf("input requests %+v, want ratchet_confirm", first.InputRequests)
	}
	both := sdk.InputResponseMap{"ratchet_confirm": &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}},
		"ratchet_approval": &sdk.ElicitResult{Action: "accept"}}
	retry := func(state string) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: pay, RequestState: state, InputResponses: both})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	got := structured(t, retry(first.RequestState))
	if got["decision"] != "approval_required" {
		t.Fatalf("confirmed, with an accept for an approval: %v, want approval_required", got)
	}
	if le := mcp.ErrorOf(retry(first.RequestState)); le == nil || le.Code != "invalid_argument" || le.Field != "requestState" {
		t.Errorf("the confirmation's state again: %+v, want invalid_argument on requestState", le)
	}
	approve(t, s, got["approval_id"].(string))
	if got := structured(t, callResult(t, connect(t, s.mcp, "agent-tok"), pay)); got["decision"] != "execute" {
		t.Errorf("after the operator approved: %v, want execute without a new confirmation", got)
	}
}
