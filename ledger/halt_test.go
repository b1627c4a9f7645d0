package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// jsonDiff is "" when want and got are equal as JSON, else both.
func jsonDiff(want, got any) string {
	w, _ := json.MarshalIndent(want, "", "  ")
	g, _ := json.MarshalIndent(got, "", "  ")
	if string(w) == string(g) {
		return ""
	}
	return string(w) + "\n" + string(g)
}

func halt(t *testing.T, h *harness, req ledger.HaltRequest) *ledger.Halt {
	t.Helper()
	if req.Note == "" {
		req.Note = "incident 42: refunds looping"
	}
	req.CreatedBy = "admin:alice"
	hl, err := h.eng.Halt(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return hl
}

func lift(t *testing.T, h *harness, id string) {
	t.Helper()
	if _, err := h.eng.Lift(context.Background(), id, "admin:bob"); err != nil {
		t.Fatal(err)
	}
}

// wantHalted checks a begin is refused by the halt hl, with its note.
func wantHalted(t *testing.T, res *ledger.BeginResult, hl *ledger.Halt) {
	t.Helper()
	if res.Decision != ledger.DecisionDenied {
		t.Fatalf("decision %s (%s), want denied", res.Decision, res.Message)
	}
	if res.Reason != ledger.ReasonHalted {
		t.Errorf("reason %q, want %q", res.Reason, ledger.ReasonHalted)
	}
	if res.HaltID != hl.HaltID {
		t.Errorf("halt_id %q, want %q", res.HaltID, hl.HaltID)
	}
	if !strings.Contains(res.Message, hl.Note) {
		t.Errorf("message %q does not carry the operator's note %q", res.Message, hl.Note)
	}
	if !strings.Contains(res.Message, "tell the user") {
		t.Errorf("message %q does not tell the agent to stop and tell the user", res.Message)
	}
}

func TestAHaltDeniesEveryNewBeginInItsScopeUntilLifted(t *testing.T) {
	h := newHarness(t, testRules())
	email := func(k, agent string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: k, EffectType: "email.send", AgentID: agent}
	}
	for _, c := range []struct {
		name  string
		scope ledger.HaltRequest
		in    ledger.BeginRequest // in scope
		out   ledger.BeginRequest // not in scope
	}{
		{"namespace", ledger.HaltRequest{HaltScope: ledger.HaltScope{Namespace: "default"}}, email("ns:1", "b1"),
			ledger.BeginRequest{Namespace: "other", IdempotencyKey: "ns:2", EffectType: "email.send", AgentID: "bot"}},
		{"effect type", ledger.HaltRequest{HaltScope: ledger.HaltScope{EffectType: "payment.*"}}, pay("et:1", "acct_1", 1_000_000), email("et:2", "b2")},
		{"agent", ledger.HaltRequest{HaltScope: ledger.HaltScope{AgentID: "rogue"}}, email("ag:1", "rogue"), email("ag:2", "b3")},
		{"vendor", ledger.HaltRequest{HaltScope: ledger.HaltScope{Vendor: "Stripe"}}, pay("v:1", "acct_1", 1_000_000), email("v:2", "b4")},
		{"everything", ledger.HaltRequest{All: true}, email("all:1", "b5"), ledger.BeginRequest{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			hl := halt(t, h, c.scope)
			wantHalted(t, h.begin(c.in), hl)
			if c.out.IdempotencyKey != "" {
				h.beginWant(c.out, ledger.DecisionExecute)
			}
			lift(t, h, hl.HaltID)
			h.beginWant(c.in, ledger.DecisionExecute)
		})
	}
}

func TestWhatIsInFlightKeepsWorkingWhileHalted(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testRules())
	done := h.beginWant(pay("f:done", "acct_1", 1_000_000), ledger.DecisionExecute)
	h.report(done.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Result = json.RawMessage(`{"id":"ch_1"}`) })
	live := h.beginWant(pay("f:live", "acct_1", 1_000_000), ledger.DecisionExecute)
	unknown := unknownCharge(t, h, "f:unknown")
	settled := unknownCharge(t, h, "f:settled")
	failed := h.beginWant(pay("f:failed", "acct_1", 1_000_000), ledger.DecisionExecute)
	h.report(failed.EffectID, ledger.OutcomeFailed)

	hl := halt(t, h, ledger.HaltRequest{All: true})
	// Answers that start nothing still answer.
	if res := h.beginWant(pay("f:done", "acct_1", 1_000_000), ledger.DecisionDuplicate); string(res.Result) != `{"id":"ch_1"}` {
		t.Errorf("duplicate's result %s", res.Result)
	}
	h.beginWant(pay("f:live", "acct_1", 1_000_000), ledger.DecisionInFlight)
	h.beginWant(pay("f:unknown", "acct_1", 40_000_000), ledger.DecisionBlocked)
	// A new attempt after a failure is a new begin: refused.
	wantHalted(t, h.begin(pay("f:failed", "acct_1", 1_000_000)), hl)
	// Reports, resolves, settlements and reads are not held.
	h.report(live.EffectID, ledger.OutcomeSucceeded)
	if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: unknown.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "admin:alice"}); err != nil {
		t.Errorf("resolve while halted: %v", err)
	}
	if res, err := settleByKey(h, settled, ledger.OutcomeSucceeded); err != nil || !res.Applied {
		t.Errorf("settlement while halted: %+v %v", res, err)
	}
	if eff := h.get(live.EffectID); eff.State != ledger.StateSucceeded {
		t.Errorf("the in-flight effect is %s after its report, want succeeded", eff.State)
	}
}

func TestAHaltSurvivesARestartAndIsListed(t *testing.T) {
	h := newHarness(t, testRules())
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{Namespace: "default", EffectType: "payment.*"}})
	again := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{Namespace: "default", EffectType: "payment.*"}, Note: "twice"})
	if again.HaltID != hl.HaltID {
		t.Errorf("halting a halted scope again made halt %s beside %s", again.HaltID, hl.HaltID)
	}
	h.reopen()
	wantHalted(t, h.begin(pay("r:1", "acct_1", 1_000_000)), hl)
	got, err := h.eng.ListHalts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []ledger.Halt{{HaltID: hl.HaltID, HaltScope: ledger.HaltScope{Namespace: "default", EffectType: "payment.*"},
		Note: "incident 42: refunds looping", CreatedAt: hl.CreatedAt, CreatedBy: "admin:alice"}}
	if d := jsonDiff(want, got); d != "" {
		t.Errorf("halts after a restart (want, got):\n%s", d)
	}
	lift(t, h, hl.HaltID)
	h.reopen()
	h.beginWant(pay("r:1", "acct_1", 1_000_000), ledger.DecisionExecute)
	_, err = h.eng.Lift(context.Background(), hl.HaltID, "admin:bob")
	wantCode(t, err, ledger.CodeHaltNotFound)
}

func TestAnApprovalInAHaltedScopeCanBeRejectedButNotApproved(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testRules())
	waiting := h.beginWant(pay("a:1", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	rejected := h.beginWant(pay("a:2", "acct_2", 150_000_000), ledger.DecisionApprovalRequired)
	approved := h.beginWant(pay("a:3", "acct_3", 150_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, approved.ApprovalID, "admin:alice", ""); err != nil {
		t.Fatal(err)
	}
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{EffectType: "payment.charge"}})
	_, err := h.eng.Approve(ctx, waiting.ApprovalID, "admin:alice", "")
	wantCode(t, err, ledger.CodeHalted)
	if _, err := h.eng.Reject(ctx, rejected.ApprovalID, "admin:alice", "no"); err != nil {
		t.Errorf("reject while halted: %v", err)
	}
	// An approval given before the halt starts nothing while it holds.
	wantHalted(t, h.begin(pay("a:3", "acct_3", 150_000_000)), hl)
	h.beginWant(pay("a:1", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	lift(t, h, hl.HaltID)
	h.beginWant(pay("a:3", "acct_3", 150_000_000), ledger.DecisionExecute)
	if _, err := h.eng.Approve(ctx, waiting.ApprovalID, "admin:alice", ""); err != nil {
		t.Errorf("approve after the halt was lifted: %v", err)
	}
}

func TestAGrantCoversNothingWhileHalted(t *testing.T) {
	h := newHarness(t, grantRules())
	waiting := h.beginWant(pay("g:wait", "acct_1", 2_000_000), ledger.DecisionApprovalRequired)
	g := grant(t, h, ledger.GrantRequest{EffectType: "payment.*", AgentID: "bot", MaxEffects: i64(5)})
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{AgentID: "bot"}})
	wantHalted(t, h.begin(pay("g:1", "acct_1", 2_000_000)), hl)
	wantHalted(t, h.begin(pay("g:wait", "acct_1", 2_000_000)), hl)
	if got := grantByID(t, h, g.GrantID); got.UsedEffects != 0 {
		t.Errorf("the grant counted %d effects while halted", got.UsedEffects)
	}
	if eff := h.get(waiting.EffectID); eff.State != ledger.StateAwaitingApproval {
		t.Errorf("the waiting request is %s, want still awaiting approval", eff.State)
	}
	lift(t, h, hl.HaltID)
	if res := h.beginWant(pay("g:1", "acct_1", 2_000_000), ledger.DecisionExecute); res.GrantID != g.GrantID {
		t.Errorf("after the lift, grant %q covered it, want %s", res.GrantID, g.GrantID)
	}
}

func TestAHaltRefusesCompensationsInItsScope(t *testing.T) {
	h := newHarness(t, testRules())
	req := ledger.BeginRequest{IdempotencyKey: "c:1", EffectType: "email.send", AgentID: "bot", GroupKey: "trip",
		Compensation: &ledger.Compensation{EffectType: "email.send", Description: "send a correction"}}
	r := h.beginWant(req, ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	u, err := h.eng.Unwind(context.Background(), ledger.UnwindRequest{Namespace: "default", GroupKey: "trip", Reason: "rollback"})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Compensations) != 1 {
		t.Fatalf("unwind returned %d compensations", len(u.Compensations))
	}
	c := u.Compensations[0]
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{EffectType: "email.*"}})
	undo := ledger.BeginRequest{IdempotencyKey: c.IdempotencyKey, EffectType: c.EffectType, AgentID: "bot",
		CompensatesEffectID: c.CompensatesEffectID, Payload: c.Payload}
	wantHalted(t, h.begin(undo), hl)
	lift(t, h, hl.HaltID)
	h.beginWant(undo, ledger.DecisionExecute)
}

func TestARecoveryResendPausesWhileHalted(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testRules())
	r := unknownCharge(t, h, "rc:1")
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{Vendor: "stripe"}})
	_, err := h.eng.ClaimRecovery(ctx, r.EffectID, 1, time.Minute)
	wantCode(t, err, ledger.CodeHalted)
	lift(t, h, hl.HaltID)
	if _, err := h.eng.ClaimRecovery(ctx, r.EffectID, 1, time.Minute); err != nil {
		t.Errorf("claim after the lift: %v", err)
	}
}

func TestAHaltAndItsLiftingAreAuditedAndNotified(t *testing.T) {
	h := newHarness(t, testRules())
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{Namespace: "default", Vendor: "stripe"}})
	lift(t, h, hl.HaltID)
	want := []ledger.Event{
		{Type: ledger.EventHaltStarted, Namespace: "default", Vendor: "stripe", HaltID: hl.HaltID, Actor: "admin:alice", Note: hl.Note},
		{Type: ledger.EventHaltLifted, Namespace: "default", Vendor: "stripe", HaltID: hl.HaltID, Actor: "admin:bob", Note: hl.Note},
	}
	strip := func(ev ledger.Event) ledger.Event {
		if ev.At.IsZero() {
			t.Errorf("ev.At.IsZero(): event %s without its time or id", ev.Type)
		} else if ev.ID == "" {
			t.Errorf("ev.ID == \"\": event %s without its time or id", ev.Type)
		}
		ev.At, ev.ID = time.Time{}, ""
		return ev
	}
	recs, _ := auditOf(t, h)
	var audited []ledger.Event
	for _, r := range recs {
		if strings.HasPrefix(r.Event.Type, "halt.") {
			audited = append(audited, strip(r.Event))
		}
	}
	if d := jsonDiff(want, audited); d != "" {
		t.Errorf("audit (want, got):\n%s", d)
	}
	box, err := h.eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var queued []ledger.Event
	for _, en := range box {
		if strings.HasPrefix(en.Event.Type, "halt.") {
			queued = append(queued, strip(en.Event))
		}
	}
	if d := jsonDiff(want, queued); d != "" {
		t.Errorf("outbox (want, got):\n%s", d)
	}
}

func TestAHaltRequestNeedsAScopeAndANote(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testRules())
	for name, req := range map[string]ledger.HaltRequest{
		"no scope":          {Note: "x"},
		"all and a scope":   {All: true, HaltScope: ledger.HaltScope{Namespace: "default"}, Note: "x"},
		"no note":           {All: true},
		"bad glob":          {HaltScope: ledger.HaltScope{EffectType: "Payment[*"}, Note: "x"},
		"bad namespace":     {HaltScope: ledger.HaltScope{Namespace: "Not Valid"}, Note: "x"},
		"bad vendor":        {HaltScope: ledger.HaltScope{Vendor: "st ripe"}, Note: "x"},
		"control character": {HaltScope: ledger.HaltScope{AgentID: "bot\x00"}, Note: "x"},
	} {
		_, err := h.eng.Halt(ctx, req)
		t.Run(name, func(t *testing.T) { wantCode(t, err, ledger.CodeInvalidArgument) })
	}
	if hs, err := h.eng.ListHalts(ctx); err != nil || len(hs) != 0 {
		t.Errorf("after refused requests: %d halts (%v)", len(hs), err)
	}
}

// TestAHaltStopsEveryReplicaOfAFleetAtOnce: four engines on one
// PostgreSQL ledger begin without pause; once Halt has returned on one of
// them, no begin that starts afterwards on any of them executes.
func TestAHaltStopsEveryReplicaOfAFleetAtOnce(t *testing.T) {
	if testBackend != "postgres" {
		t.Skip("a fleet shares the PostgreSQL backend: the suite's PostgreSQL run has this test")
	}
	h := newHarness(t, testRules())
	engines := []*ledger.Engine{h.eng}
	for range 3 {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			t.Fatal(err)
		}
		e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		engines = append(engines, e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var acked atomic.Bool
	var after, executedAfter, before atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			e := engines[i%len(engines)]
			for j := 0; ctx.Err() == nil; j++ {
				started := acked.Load()
				res, err := e.Begin(ctx, ledger.BeginRequest{IdempotencyKey: itoa(int64(i*100000 + j)), EffectType: "email.send", AgentID: "a" + itoa(int64(j))})
				if err != nil {
					if ctx.Err() == nil {
						t.Error(err)
					}
					return
				}
				switch {
				case !started:
					before.Add(1)
				case res.Decision == ledger.DecisionExecute:
					executedAfter.Add(1)
				case res.Reason == ledger.ReasonHalted:
					after.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := engines[1].Halt(context.Background(), ledger.HaltRequest{HaltScope: ledger.HaltScope{EffectType: "email.*"}, Note: "stop", CreatedBy: "admin:alice"}); err != nil {
		t.Fatal(err)
	}
	acked.Store(true)
	for deadline := time.Now().Add(5 * time.Second); after.Load()+executedAfter.Load() < 200 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if n := executedAfter.Load(); n != 0 {
		t.Errorf("%d begins that started after the halt returned executed (%d refused, %d before)", n, after.Load(), before.Load())
	}
	if before.Load() == 0 {
		t.Errorf("no begin ran before the halt: the test shows nothing")
	}
}

func TestACeilingWithOnThresholdHaltHaltsItsRuleWhenItsLastThresholdFires(t *testing.T) {
	rules := []ledger.Rule{
		{Match: "spend.*", Ceilings: []ledger.Ceiling{{Name: "total", LimitMicros: i64(100), Window: "24h", Per: "agent", OnThreshold: ledger.OnThresholdHalt}}},
		{Match: "email.*"},
	}
	h := newHarness(t, rules)
	withThresholds(h, 0.5, 1.0)
	spend := func(k, agent string, cost int64) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: k, EffectType: "spend.x", AgentID: agent, EstimatedCostMicros: i64(cost)}
	}
	h.beginWant(spend("s:1", "bot", 60), ledger.DecisionExecute) // 0.5 fires: an alert, no halt
	if hs, _ := h.eng.ListHalts(context.Background()); len(hs) != 0 {
		t.Fatalf("halted at the first threshold: %+v", hs)
	}
	h.beginWant(spend("s:2", "bot", 40), ledger.DecisionExecute) // 1.0 fires: halted in the same write
	hs, err := h.eng.ListHalts(context.Background())
	if err != nil {
		t.Fatalf("err != nil: halts after the last threshold: %+v %v", hs, err)
	}
	if len(hs) != 1 {
		t.Fatalf("len(hs) != 1: halts after the last threshold: %+v %v", hs, err)
	}
	want := ledger.HaltScope{Namespace: "default", EffectType: "spend.*", AgentID: "bot"}
	if hs[0].HaltScope != want {
		t.Errorf("hs[0].HaltScope != want: halt %+v, want scope %+v by budget:total", hs[0], want)
	} else if hs[0].CreatedBy != "budget:total" {
		t.Errorf("hs[0].CreatedBy != \"budget:total\": halt %+v, want scope %+v by budget:total", hs[0], want)
	} else if !strings.Contains(hs[0].Note, "total") {
		t.Errorf("!strings.Contains(hs[0].Note, \"total\"): halt %+v, want scope %+v by budget:total", hs[0], want)
	}
	wantHalted(t, h.begin(spend("s:3", "bot", 0)), &hs[0])
	h.beginWant(spend("s:4", "other-bot", 1), ledger.DecisionExecute)
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "e:1", EffectType: "email.send", AgentID: "bot"}, ledger.DecisionExecute)
	errs := ledger.ValidatePolicies([]ledger.Rule{{Match: "x.*", Ceilings: []ledger.Ceiling{{Name: "c", LimitCount: i64(1), Window: "1h", Per: "global", OnThreshold: "page"}}}})
	if len(errs) != 1 {
		t.Errorf("len(errs) != 1: on_threshold: page: %v", errs)
	} else if errs[0].Path != "policies[0].ceilings[0].on_threshold" {
		t.Errorf("errs[0].Path != \"policies[0].ceilings[0].on_threshold\": on_threshold: page: %v", errs)
	}
}

// TestAHaltOnTheProxysOldNamesStopsTheCallsTheyName: rules and grants
// match a proxied call's operation as well as its effect type, so an
// operator halting "stripe.*" (the names their rules were written in)
// must stop the proxied Stripe calls typed payment.charge: its begins,
// approving their waiting requests and their recovery resends.
func TestAHaltOnTheProxysOldNamesStopsTheCallsTheyName(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testRules())
	proxied := func(key string, cost int64) ledger.BeginRequest {
		r := pay(key, "acct_1", cost)
		r.Operation = "stripe.payment_intents.create"
		return r
	}
	waiting := h.beginWant(proxied("op:wait", 150_000_000), ledger.DecisionApprovalRequired)
	r := h.beginWant(proxied("op:unknown", 40_000_000), ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeUnknown)
	hl := halt(t, h, ledger.HaltRequest{HaltScope: ledger.HaltScope{EffectType: "stripe.*"}})
	wantHalted(t, h.begin(proxied("op:1", 1_000_000)), hl)
	_, err := h.eng.Approve(ctx, waiting.ApprovalID, "admin:alice", "")
	wantCode(t, err, ledger.CodeHalted)
	_, err = h.eng.ClaimRecovery(ctx, r.EffectID, 1, time.Minute)
	wantCode(t, err, ledger.CodeHalted)
	// An MCP begin has no operation: the old name is not its type.
	h.beginWant(pay("op:mcp", "acct_1", 1_000_000), ledger.DecisionExecute)
	lift(t, h, hl.HaltID)
	h.beginWant(proxied("op:1", 1_000_000), ledger.DecisionExecute)
}
