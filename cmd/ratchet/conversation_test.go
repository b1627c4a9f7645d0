package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// conversationConfig is a serve with an agent, an operator and a payment
// threshold; console is the console's public address (notify.console_url),
// or "" for none.
func conversationConfig(console string) string {
	cfg := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}, " +
		"{token_sha256: '" + sha("other-tok") + "', namespace: default, agent_id: other}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	if console != "" {
		cfg += "notify:\n  console_url: '" + console + "'\n"
	}
	return cfg
}

// TestApprovalRequiredSaysWhereToDecide (issue 37.1): with the console's
// public address configured, a real serve's approval_required answer
// carries the approval's console page and its expiry, and its one-line
// text tells the agent to show the page to its user; without it, the
// answer has no approval_url.
func TestApprovalRequiredSaysWhereToDecide(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com/"))
	cs := connect(t, s.mcp, "agent-tok")
	pay := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	res := callResult(t, cs, pay)
	a := res.StructuredContent.(map[string]any)
	if a["decision"] != "approval_required" {
		t.Fatalf("begin: %v", a)
	}
	want := "https://ratchet.example.com/approvals/" + a["approval_id"].(string)
	if diff := cmp.Diff(want, a["approval_url"]); diff != "" {
		t.Errorf("approval_url (-want +got):\n%s", diff)
	}
	if exp, err := time.Parse(time.RFC3339, a["expires_at"].(string)); err != nil || !exp.After(time.Now()) {
		t.Errorf("expires_at %v: %v", a["expires_at"], err)
	}
	if text := res.Content[0].(*sdk.TextContent).Text; !strings.Contains(text, "Show the user where an operator decides: "+want) {
		t.Errorf("the summary does not tell the agent to show the page: %q", text)
	}

	plain := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig(""))
	b := callResult(t, connect(t, plain.mcp, "agent-tok"), pay).StructuredContent.(map[string]any)
	if _, ok := b["approval_url"]; ok {
		t.Errorf("without notify.console_url the answer carries approval_url %v", b["approval_url"])
	}
}

func callResult(t *testing.T, cs *sdk.ClientSession, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	return res
}

// agentBearer adds the agent's token to every request.
type agentBearer struct{ token string }

func (b agentBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// elicitingClient connects to a real serve as an agent whose client
// declares URL-mode elicitation (when onElicit is set) and speaks version.
func elicitingClient(t *testing.T, s *server, version string, onElicit func(*sdk.ElicitParams) *sdk.ElicitResult, manual bool) *sdk.ClientSession {
	t.Helper()
	return elicitingClientAs(t, s, "agent-tok", version, onElicit, manual)
}

func elicitingClientAs(t *testing.T, s *server, token, version string, onElicit func(*sdk.ElicitParams) *sdk.ElicitResult, manual bool) *sdk.ClientSession {
	t.Helper()
	opts := &sdk.ClientOptions{}
	if onElicit != nil {
		opts.Capabilities = &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}}
		opts.ElicitationHandler = func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			return onElicit(req.Params), nil
		}
	}
	if manual {
		opts.MultiRoundTrip = &sdk.MultiRoundTripOptions{Disabled: true}
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "test-host", Version: "1"}, opts)
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: s.mcp, HTTPClient: &http.Client{Transport: agentBearer{token}}},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func approve(t *testing.T, s *server, approval string) {
	t.Helper()
	if code, out, errs := cli(t, "admin-tok", nil, "approvals", "approve", approval, "--admin", s.admin); code != 0 {
		t.Fatalf("approve %s: %d %s %s", approval, code, out, errs)
	}
}

func approvalIDOf(url string) string { return url[strings.LastIndex(url, "/")+1:] }

func structured(t *testing.T, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

// TestA2026ClientsRetryAfterTheDecisionGetsExecute (issue 37 item 2): a
// 2026-07-28 client that declares URL-mode elicitation gets input_required
// asking it to open the approval's page; its user opens it and an operator
// approves meanwhile; the SDK's retry with the sealed requestState gets
// execute, with no new begin by the agent. A client whose user accepts
// without anyone deciding gets today's approval_required: accepting
// approves nothing.
func TestA2026ClientsRetryAfterTheDecisionGetsExecute(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	var asked []string
	cs := elicitingClient(t, s, "2026-07-28", func(p *sdk.ElicitParams) *sdk.ElicitResult {
		asked = append(asked, p.Mode+" "+p.URL)
		approve(t, s, approvalIDOf(p.URL)) // the user went to the page; an operator approved there
		return &sdk.ElicitResult{Action: "accept"}
	}, false)
	pay := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	got := structured(t, callResult(t, cs, pay))
	if got["decision"] != "execute" {
		t.Fatalf("the retry after the decision: %v, want execute", got)
	}
	if len(asked) != 1 || !strings.HasPrefix(asked[0], "url https://ratchet.example.com/approvals/apr_") {
		t.Errorf("elicitations %q, want one url-mode for the approval's page", asked)
	}

	idle := elicitingClient(t, s, "2026-07-28", func(p *sdk.ElicitParams) *sdk.ElicitResult {
		return &sdk.ElicitResult{Action: "accept"} // a host that accepts on its own
	}, false)
	pay["idempotency_key"] = "inv:big-2"
	if got := structured(t, callResult(t, idle, pay)); got["decision"] != "approval_required" {
		t.Fatalf("accepted, nobody decided: %v, want approval_required", got)
	}
	if got := structured(t, callResult(t, connect(t, s.mcp, "agent-tok"), pay)); got["decision"] != "approval_required" {
		t.Fatalf("after the accept, a plain begin: %v, want approval_required (an accept approves nothing)", got)
	}
}

// TestARequestStateIsRedeemedOnceAndBound: the retry with a requestState
// gets the decision once; the same state again, an altered one, one sent
// with another cost and one sent by another agent are refused with invalid_argument naming
// requestState; an expired one asks again (a new input_required).
func TestARequestStateIsRedeemedOnceAndBound(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com")+
		"defaults:\n  approval_ttl: 3s\n")
	cs := elicitingClient(t, s, "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
	ctx := t.Context()
	pay := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	first, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: pay})
	if err != nil || !first.NeedsInput() || first.RequestState == "" {
		t.Fatalf("first call: %v %+v, want input_required with a requestState", err, first)
	}
	el, ok := first.InputRequests["ratchet_approval"].(*sdk.ElicitParams)
	if !ok || el.Mode != "url" {
		t.Fatalf("input requests %+v, want a url-mode elicitation", first.InputRequests)
	}
	if el.ElicitationID != "" {
		t.Errorf("elicitationId %q in a 2026-07-28 input request: that revision dropped it", el.ElicitationID)
	}
	approve(t, s, approvalIDOf(el.URL))
	other := elicitingClientAs(t, s, "other-tok", "2026-07-28", func(*sdk.ElicitParams) *sdk.ElicitResult { return nil }, true)
	retryAs := func(cs *sdk.ClientSession, args map[string]any, state string) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: args, RequestState: state,
			InputResponses: sdk.InputResponseMap{"ratchet_approval": &sdk.ElicitResult{Action: "accept"}}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	retry := func(args map[string]any, state string) *sdk.CallToolResult {
		t.Helper()
		return retryAs(cs, args, state)
	}
	refused := func(name string, res *sdk.CallToolResult) {
		t.Helper()
		le := mcp.ErrorOf(res)
		if le == nil || le.Code != "invalid_argument" || le.Field != "requestState" {
			t.Errorf("%s: %+v, want invalid_argument on requestState", name, le)
		}
	}
	cheaper := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 1}
	refused("another cost", retry(cheaper, first.RequestState))
	refused("another agent", retryAs(other, pay, first.RequestState))
	b := []byte(first.RequestState)
	b[len(b)/2] ^= 1
	refused("altered", retry(pay, string(b)))
	if got := structured(t, retry(pay, first.RequestState)); got["decision"] != "execute" {
		t.Fatalf("the retry: %v, want execute", got)
	}
	refused("replayed", retry(pay, first.RequestState))

	pay["idempotency_key"] = "inv:late"
	late, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: pay})
	if err != nil || !late.NeedsInput() {
		t.Fatalf("late: %v %+v", err, late)
	}
	time.Sleep(3500 * time.Millisecond) // the approval, and the state, lapse
	again := retry(pay, late.RequestState)
	if !again.NeedsInput() || again.RequestState == late.RequestState {
		t.Fatalf("an expired state: %+v, want a new input_required", again)
	}
	if el2 := again.InputRequests["ratchet_approval"].(*sdk.ElicitParams); el2.URL == late.InputRequests["ratchet_approval"].(*sdk.ElicitParams).URL {
		t.Errorf("asked again for the lapsed approval %s, want a new one", el2.URL)
	}
}

// TestASessionClientIsAskedToOpenThePage: a 2025-11-25 client with
// URL-mode elicitation is sent elicitation/create for the approval's page
// while the call waits, then gets approval_required; its accept approves
// nothing. Clients without the capability, old or new, get the same bytes.
func TestASessionClientIsAskedToOpenThePage(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	var asked []string
	cs := elicitingClient(t, s, "2025-11-25", func(p *sdk.ElicitParams) *sdk.ElicitResult {
		asked = append(asked, p.Mode+" "+p.URL+" "+p.ElicitationID)
		return &sdk.ElicitResult{Action: "accept"}
	}, false)
	pay := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	got := structured(t, callResult(t, cs, pay))
	if got["decision"] != "approval_required" {
		t.Fatalf("begin: %v", got)
	}
	want := []string{"url " + got["approval_url"].(string) + " " + got["approval_id"].(string)}
	if diff := cmp.Diff(want, asked); diff != "" {
		t.Errorf("elicitations (-want +got):\n%s", diff)
	}
	if again := structured(t, callResult(t, connect(t, s.mcp, "agent-tok"), pay)); again["decision"] != "approval_required" {
		t.Errorf("after the accept: %v, want approval_required", again)
	}

	var texts []string
	for _, v := range []string{"2025-06-18", "2025-11-25", "2026-07-28"} {
		res := callResult(t, elicitingClient(t, s, v, nil, false), pay)
		b, _ := json.Marshal(res.Content)
		texts = append(texts, string(b))
	}
	for i, v := range []string{"2025-11-25", "2026-07-28"} {
		if diff := cmp.Diff(texts[0], texts[i+1]); diff != "" {
			t.Errorf("a %s client without elicitation gets another answer than a 2025-06-18 one (-want +got):\n%s", v, diff)
		}
	}
}

// TestASessionClientGetsTheDecisionMadeWhileItsUserWasOnThePage (issue
// 37): a 2025-11-25 client's begin waits on its elicitation/create; when
// an operator decides while the user is on the page, the call's answer is
// the decision (execute, or denied after a rejection), whatever the client
// answered, with no new begin by the agent. A client that accepts at once
// with nobody deciding gets approval_required and the approval is still
// pending: an accept approves nothing. On one serve with Badger, and on two
// serves sharing a PostgreSQL ledger, the operator deciding on the other.
func TestASessionClientGetsTheDecisionMadeWhileItsUserWasOnThePage(t *testing.T) {
	run := func(t *testing.T, s, operator *server) {
		decide := func(verb string, p *sdk.ElicitParams) {
			if code, out, errs := cli(t, "admin-tok", nil, "approvals", verb, p.ElicitationID, "--admin", operator.admin); code != 0 {
				t.Errorf("%s %s: %d %s %s", verb, p.ElicitationID, code, out, errs)
			}
		}
		for _, c := range []struct {
			name, operator, answer, want string
		}{
			{"approved, the client accepts", "approve", "accept", "execute"},
			{"approved, the client declines", "approve", "decline", "execute"},
			{"rejected, the client cancels", "reject", "cancel", "denied approval_rejected"},
			{"nobody decided, the client accepts", "", "accept", "approval_required"},
		} {
			cs := elicitingClient(t, s, "2025-11-25", func(p *sdk.ElicitParams) *sdk.ElicitResult {
				if c.operator != "" {
					decide(c.operator, p) // the user went to the page; an operator decided there
				}
				return &sdk.ElicitResult{Action: c.answer}
			}, false)
			pay := map[string]any{"idempotency_key": "inv:" + c.name, "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
			got := structured(t, callResult(t, cs, pay))
			answer := fmt.Sprint(got["decision"])
			if r, ok := got["reason"].(string); ok {
				answer += " " + r
			}
			if answer != c.want {
				t.Errorf("%s: the call's answer is %v, want %s", c.name, got, c.want)
			}
			if c.operator == "" {
				code, out, errs := cli(t, "admin-tok", nil, "approvals", "list", "-o", "json", "--admin", operator.admin)
				var pending []ledger.Approval
				if err := json.Unmarshal([]byte(out), &pending); code != 0 || err != nil ||
					!slices.ContainsFunc(pending, func(a ledger.Approval) bool { return a.ApprovalID == got["approval_id"] }) {
					t.Errorf("after an accept with nobody deciding, pending approvals: %d %s %s, want %v among them", code, out, errs, got["approval_id"])
				}
			}
		}
	}
	onOneAndTwoServes(t, "convsession_", run)
}

// formClient connects as an agent whose client shows form elicitations and
// answers each with answer (counting the prompts in asked).
func formClient(t *testing.T, s *server, version string, asked *[]string, answer *sdk.ElicitResult) *sdk.ClientSession {
	t.Helper()
	opts := &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}}},
		ElicitationHandler: func(_ context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			*asked = append(*asked, req.Params.Mode+": "+req.Params.Message)
			return answer, nil
		},
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-host", Version: "1"}, opts).Connect(t.Context(),
		&sdk.StreamableClientTransport{Endpoint: s.mcp, HTTPClient: &http.Client{Transport: agentBearer{"agent-tok"}}},
		&sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// TestAUserConfirmsThroughAFormElicitation (issue 37 item 4): under
// confirm_with: user from $50, a client that shows forms asks its user
// (what and how much, as the agent declared it), and the begin executes on
// an accept with confirm true, over a session (2025-11-25) and as
// input_required (2026-07-28); a decline, and a client that shows no
// forms, get confirmation_required and nothing is recorded.
func TestAUserConfirmsThroughAFormElicitation(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"policies:\n  - match: 'payment.*'\n    confirm_with: user\n    confirm_threshold_micros: 50000000\n")
	yes := &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true}}
	pay := func(key string) map[string]any {
		return map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "vendor": "stripe", "estimated_cost_micros": 60_000_000,
			"dimensions": map[string]any{"counterparty": "acct_9"}}
	}
	for _, v := range []string{"2025-11-25", "2026-07-28"} {
		var asked []string
		got := structured(t, callResult(t, formClient(t, s, v, &asked, yes), pay("conf:"+v)))
		if got["decision"] != "execute" {
			t.Errorf("%s, confirmed: %v, want execute", v, got)
		}
		want := []string{`form: Agent "bot" asks to perform payment.charge at stripe, costing $60.00. Its dimensions, as the agent wrote them: counterparty "acct_9". This is what the agent declared to Ratchet. Confirm only if you want it done.`}
		if diff := cmp.Diff(want, asked); diff != "" {
			t.Errorf("%s: prompts (-want +got):\n%s", v, diff)
		}
	}
	var asked []string
	for name, cs := range map[string]*sdk.ClientSession{
		"declined": formClient(t, s, "2025-11-25", &asked, &sdk.ElicitResult{Action: "decline"}),
		"no forms": connect(t, s.mcp, "agent-tok"),
		"unticked": formClient(t, s, "2026-07-28", &asked, &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": false}}),
	} {
		res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: pay("conf:" + name)})
		if err != nil {
			t.Fatal(err)
		}
		if le := mcp.ErrorOf(res); le == nil || le.Code != "confirmation_required" {
			t.Errorf("%s: %+v, want confirmation_required", name, le)
		}
	}
}
