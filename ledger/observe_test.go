package ledger_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// observations counts what the engine says observed rules would have done.
type observations struct {
	mu    sync.Mutex
	would map[string]int // effect_type/would → count
}

func (o *observations) Begin(string, ledger.Decision, time.Duration) {}
func (o *observations) Report(ledger.Outcome, time.Duration)         {}
func (o *observations) Expired(int)                                  {}
func (o *observations) WriteFailed(string, int)                      {}
func (o *observations) Observed(effectType, would string) {
	o.mu.Lock()
	o.would[effectType+"/"+would]++
	o.mu.Unlock()
}

func (o *observations) count(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.would[k]
}

// syncBuf is a log sink the writer and the test share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// observedHarness is a harness under rules whose logs and observations the
// test reads.
func observedHarness(t *testing.T, rules []ledger.Rule) (*harness, *observations, *syncBuf) {
	t.Helper()
	h := newHarness(t, rules)
	h.eng.Close(context.Background())
	obs := &observations{would: map[string]int{}}
	logs := &syncBuf{}
	h.obs, h.logger = obs, slog.New(slog.NewJSONHandler(logs, nil))
	h.open()
	return h, obs, logs
}

// observedEvents are the policy.observed records of the audit log.
func observedEvents(t *testing.T, h *harness) []ledger.Event {
	t.Helper()
	recs, _ := auditOf(t, h)
	var out []ledger.Event
	for _, r := range recs {
		if r.Event.Type == ledger.EventPolicyObserved {
			out = append(out, r.Event)
		}
	}
	return out
}

func TestAnObservedRuleThatWouldDenyLogsCountsAndTheAgentExecutes(t *testing.T) {
	h, obs, logs := observedHarness(t, []ledger.Rule{
		{Match: "refund.*", Mode: ledger.ModeObserve, Deny: true, MaxLeaseSeconds: 5},
		{Match: "wire.*", Mode: ledger.ModeObserve, ApprovalThresholdMicros: i64(50), RequireDimensions: []string{"counterparty"},
			Ceilings: []ledger.Ceiling{{Name: "wire-observed", LimitMicros: i64(100), Window: "24h", Per: "global"}}},
	})
	// An observed deny: the agent executes (with the lease it asked for:
	// the observed rule's lease cap does not apply either).
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "refund:1", EffectType: "refund.issue", AgentID: "bot", LeaseSeconds: 60}, ledger.DecisionExecute)
	if obs.count("refund.issue/denied") != 1 {
		t.Fatalf("obs.count(\"refund.issue/denied\") != 1: observations %v, logs:\n%s", obs.would, logs)
	}
	if !strings.Contains(logs.String(), `"msg":"observed rule would have refused"`) {
		t.Fatalf("!strings.Contains(logs.String(), `\"msg\":\"observed rule would have refused\"`): observations %v, logs:\n%s", obs.would, logs)
	}
	if !strings.Contains(logs.String(), `"would":"denied"`) {
		t.Fatalf("!strings.Contains(logs.String(), `\"would\":\"denied\"`): observations %v, logs:\n%s", obs.would, logs)
	}
	evs := observedEvents(t, h)
	want := []ledger.Event{{EffectID: r.EffectID, Decision: ledger.DecisionDenied}}
	if diff := cmp.Diff(want, evs, cmp.Comparer(func(a, b ledger.Event) bool { return a.EffectID == b.EffectID && a.Decision == b.Decision })); diff != "" {
		t.Fatalf("audit, by effect and decision (-want +got):\n%s", diff)
	}
	if evs[0].Reason != ledger.ReasonPolicyDenied {
		t.Fatalf("evs[0].Reason != ledger.ReasonPolicyDenied: audit: %+v", evs)
	}
	if evs[0].Rule != "refund.*" {
		t.Fatalf("evs[0].Rule != \"refund.*\": audit: %+v", evs)
	}

	wire := func(key string, cost int64, dims map[string]string) *ledger.BeginResult {
		return h.beginWant(ledger.BeginRequest{IdempotencyKey: key, EffectType: "wire.send", AgentID: "bot", EstimatedCostMicros: i64(cost), Dimensions: dims}, ledger.DecisionExecute)
	}
	cp := map[string]string{"counterparty": "acct_secret_value"}
	// Each would-be refusal in evaluation order: a missing dimension, an
	// approval, a ceiling; a begin every observed rule allows is not noted.
	if r := wire("w:1", 10, nil); len(r.Budgets) != 0 || r.BudgetWarning != nil {
		t.Fatalf("the agent sees an observed ceiling: %+v", r)
	}
	wire("w:2", 60, cp)
	wire("w:3", 20, cp)       // 90 of 100, under the threshold
	w4 := wire("w:4", 20, cp) // 110 of 100
	for k, n := range map[string]int{"wire.send/dimension_required": 1, "wire.send/approval_required": 1, "wire.send/denied": 1} {
		if obs.count(k) != n {
			t.Fatalf("observations %v", obs.would)
		}
	}
	evs = observedEvents(t, h)
	if len(evs) != 4 {
		t.Fatalf("audit: %d policy.observed events, want 4: %+v", len(evs), evs)
	}
	if got, want := [2]string{evs[3].Reason, evs[3].Rule}, [2]string{ledger.ReasonBudgetExceeded, "wire-observed"}; got != want {
		t.Fatalf("the last observation's reason and rule: %q, want %q", got, want)
	}
	if evs[1].Reason != "counterparty" {
		t.Fatalf("evs[1].Reason != \"counterparty\": audit: %+v", evs)
	}
	if strings.Contains(logs.String(), "acct_secret_value") {
		t.Fatal("a dimension value in the logs")
	}
	// The observed ceiling counts, apart, past its limit.
	bs, err := h.eng.Budgets(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 {
		t.Fatalf("len(bs) != 1: budgets %+v", bs)
	}
	if !bs[0].Observed {
		t.Fatalf("!bs[0].Observed: budgets %+v", bs)
	}
	if bs[0].Counted != 110 {
		t.Fatalf("bs[0].Counted != 110: budgets %+v", bs)
	}
	if bs[0].Remaining != 0 {
		t.Fatalf("bs[0].Remaining != 0: budgets %+v", bs)
	}
	// A failure releases what it counted, as for an enforced ceiling.
	h.report(w4.EffectID, ledger.OutcomeFailed)
	if bs, _ := h.eng.Budgets(context.Background(), ""); bs[0].Counted != 90 {
		t.Fatalf("after a failure: %+v", bs)
	}
	recs, heads := auditOf(t, h)
	if brk := ledger.VerifyAudit(recs, heads); brk != nil {
		t.Fatal(brk)
	}
}

func TestAnObservedRuleNeverLoosensAnEnforcedOne(t *testing.T) {
	h, obs, _ := observedHarness(t, []ledger.Rule{
		{Match: "db.drop.*", Deny: true},
		{Match: "db.*", Mode: ledger.ModeObserve, Deny: true},
		{Match: "cloud.*", Ceilings: []ledger.Ceiling{{Name: "cloud-cap", LimitMicros: i64(100), Window: "1h", Per: "global"}}},
		{Match: "cloud.*", Mode: ledger.ModeObserve, Ceilings: []ledger.Ceiling{{Name: "cloud-observed", LimitMicros: i64(1000), Window: "1h", Per: "global"}}},
		{Match: "wire.*", ApprovalThresholdMicros: i64(100), MaxLeaseSeconds: 30},
		{Match: "wire.*", Mode: ledger.ModeObserve, ApprovalThresholdMicros: i64(1000), MaxLeaseSeconds: 600},
	})
	// The enforced deny still denies, and the observed one (which would
	// have answered the same) notes nothing.
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "drop", EffectType: "db.drop.table", AgentID: "bot"}, ledger.DecisionDenied)
	if r.Reason != ledger.ReasonPolicyDenied {
		t.Fatalf("%+v", r)
	}
	// A looser observed ceiling leaves the enforced one refusing.
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "c1", EffectType: "cloud.vm", AgentID: "bot", EstimatedCostMicros: i64(80)}, ledger.DecisionExecute)
	if r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "c2", EffectType: "cloud.vm", AgentID: "bot", EstimatedCostMicros: i64(30)}, ledger.DecisionDenied); r.Ceiling == nil || r.Ceiling.Name != "cloud-cap" {
		t.Fatalf("%+v", r)
	}
	// A higher observed threshold and a longer observed lease cap loosen
	// nothing.
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "w1", EffectType: "wire.send", AgentID: "bot", EstimatedCostMicros: i64(150)}, ledger.DecisionApprovalRequired)
	_, err := h.eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: "w2", EffectType: "wire.send", AgentID: "bot", EstimatedCostMicros: i64(1), LeaseSeconds: 60})
	wantCode(t, err, ledger.CodeInvalidArgument)
	if len(obs.would) != 0 {
		t.Fatalf("len(obs.would) != 0: observations %v", obs.would)
	}
	if len(observedEvents(t, h)) != 0 {
		t.Fatalf("len(observedEvents(t, h)) != 0: observations %v", obs.would)
	}
	// "ratchet budgets" shows the observed ceiling apart.
	bs, _ := h.eng.Budgets(context.Background(), "")
	for _, b := range bs {
		if b.Observed != (b.Name == "cloud-observed") {
			t.Fatalf("budgets %+v", bs)
		}
	}
}
