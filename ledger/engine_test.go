package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func email(key, agent string) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: key, EffectType: "email.send", AgentID: agent,
		Payload: json.RawMessage(`{"to":"u1","template":"welcome"}`)}
}

func TestExecuteInFlightDuplicate(t *testing.T) {
	h := newHarness(t, testRules())
	req := email("welcome:u1", "bot")
	req.Vendor = "stripe"
	req.LeaseSeconds = 30
	first := h.beginWant(req, ledger.DecisionExecute)
	if first.Attempt != 1 {
		t.Fatalf("first.Attempt != 1: execute: %+v", first)
	}
	if first.State != ledger.StatePending {
		t.Fatalf("first.State != ledger.StatePending: execute: %+v", first)
	}
	if first.EffectID == "" {
		t.Fatalf("first.EffectID == \"\": execute: %+v", first)
	}
	if !strings.HasPrefix(first.EffectID, "eff_") {
		t.Fatalf("!strings.HasPrefix(first.EffectID, \"eff_\"): execute: %+v", first)
	}
	if len(first.EffectID) != 30 {
		t.Fatalf("len(first.EffectID) != 30: execute: %+v", first)
	}
	if got := first.LeaseExpiresAt.Sub(h.clock.Now()); got != 30*time.Second {
		t.Fatalf("lease %v, want 30s", got)
	}
	vk := first.VendorIdempotencyKey
	if vk == nil {
		t.Fatalf("vk == nil: vendor key: %+v", vk)
	}
	if vk.Name != "Idempotency-Key" {
		t.Fatalf("vk.Name != \"Idempotency-Key\": vendor key: %+v", vk)
	}
	if vk.Location != "header" {
		t.Fatalf("vk.Location != \"header\": vendor key: %+v", vk)
	}
	if !vk.Enforced {
		t.Fatalf("!vk.Enforced: vendor key: %+v", vk)
	}
	if len(vk.Value) != 36 {
		t.Fatalf("len(vk.Value) != 36: vendor key: %+v", vk)
	}

	h.clock.Advance(10 * time.Second)
	second := h.beginWant(req, ledger.DecisionInFlight)
	if second.EffectID != first.EffectID {
		t.Fatalf("second.EffectID != first.EffectID: in_flight: %+v", second)
	}
	if second.RetryAfterSeconds != 20 {
		t.Fatalf("second.RetryAfterSeconds != 20: in_flight: %+v", second)
	}
	h.clock.Advance(19*time.Second + 500*time.Millisecond)
	if r := h.beginWant(req, ledger.DecisionInFlight); r.RetryAfterSeconds != 1 {
		t.Fatalf("retry_after with 0.5s left = %d, want 1", r.RetryAfterSeconds)
	}

	eff := h.report(first.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) {
		r.Result = json.RawMessage(`{"message_id": "m_1"}`)
		r.VendorReference = "m_1"
	})
	if eff.State != ledger.StateSucceeded {
		t.Fatalf("eff.State != ledger.StateSucceeded: after report: %+v", eff)
	}
	if eff.CompletedAt == nil {
		t.Fatalf("eff.CompletedAt == nil: after report: %+v", eff)
	}
	dup := h.beginWant(req, ledger.DecisionDuplicate)
	if string(dup.Result) != `{"message_id":"m_1"}` {
		t.Fatalf("string(dup.Result) != `{\"message_id\":\"m_1\"}`: duplicate: %+v (result %s)", dup, dup.Result)
	}
	if dup.VendorReference != "m_1" {
		t.Fatalf("dup.VendorReference != \"m_1\": duplicate: %+v (result %s)", dup, dup.Result)
	}
	if dup.CompletedAt == nil {
		t.Fatalf("dup.CompletedAt == nil: duplicate: %+v (result %s)", dup, dup.Result)
	}
	if dup.EffectID != first.EffectID {
		t.Fatalf("dup.EffectID != first.EffectID: duplicate: %+v (result %s)", dup, dup.Result)
	}
	// Same payload with other key order and whitespace is the same action.
	req.Payload = json.RawMessage(` { "template" : "welcome", "to":"u1" } `)
	h.beginWant(req, ledger.DecisionDuplicate)
}

func TestIdempotencyKeyConflict(t *testing.T) {
	h := newHarness(t, testRules())
	req := email("k1", "bot")
	h.beginWant(req, ledger.DecisionExecute)
	for name, mod := range map[string]func(*ledger.BeginRequest){
		"payload":     func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(`{"to":"u2","template":"welcome"}`) },
		"effect_type": func(r *ledger.BeginRequest) { r.EffectType = "email.blast" },
		"vendor":      func(r *ledger.BeginRequest) { r.Vendor = "sendgrid" },
	} {
		t.Run(name, func(t *testing.T) {
			r := req
			mod(&r)
			_, err := h.eng.Begin(context.Background(), r)
			wantCode(t, err, ledger.CodeIdempotencyKeyConflict)
		})
	}
}

func TestFailedStartsNextAttemptWithNewVendorKey(t *testing.T) {
	h := newHarness(t, testRules())
	req := pay("inv:1", "acct_1", 50_000_000)
	a1 := h.beginWant(req, ledger.DecisionExecute)
	h.report(a1.EffectID, ledger.OutcomeFailed, func(r *ledger.ReportRequest) { r.Error = "card_declined" })
	if b := budgetsByName(t, h); b["daily-spend"] != 0 {
		t.Fatalf("failed attempt still counted: %v", b)
	}
	a2 := h.beginWant(req, ledger.DecisionExecute)
	if a2.EffectID != a1.EffectID {
		t.Fatalf("a2.EffectID != a1.EffectID: attempt 2: %+v", a2)
	}
	if a2.Attempt != 2 {
		t.Fatalf("a2.Attempt != 2: attempt 2: %+v", a2)
	}
	if a1.VendorIdempotencyKey.Value == a2.VendorIdempotencyKey.Value {
		t.Fatal("a new attempt must get a new vendor key")
	}
	// The vendor key is a pure function of secret, namespace, key, attempt
	// and vendor: reopening (same secret) and failing attempt 2 then gives
	// attempt 3 a key distinct from both.
	h.reopen()
	h.report(a2.EffectID, ledger.OutcomeFailed, func(r *ledger.ReportRequest) { r.Attempt = 2 })
	a3 := h.beginWant(req, ledger.DecisionExecute)
	if a3.Attempt != 3 {
		t.Fatalf("a3.Attempt != 3: attempt 3: %+v", a3)
	}
	if a3.VendorIdempotencyKey.Value == a2.VendorIdempotencyKey.Value {
		t.Fatalf("a3.VendorIdempotencyKey.Value == a2.VendorIdempotencyKey.Value: attempt 3: %+v", a3)
	}
	// A report naming an older attempt is stale.
	_, err := h.eng.Report(context.Background(), ledger.ReportRequest{EffectID: a3.EffectID, Outcome: ledger.OutcomeSucceeded, Attempt: 2})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
}

func TestVendorKeyIsDeterministic(t *testing.T) {
	// Two engines sharing a secret derive the same key for the same
	// namespace, key and attempt; a different secret derives another.
	h1 := newHarness(t, nil)
	h2 := newHarnessWithSecret(t, nil, h1.secret)
	h3 := newHarness(t, nil)
	req := ledger.BeginRequest{IdempotencyKey: "sq:1", EffectType: "square.payments.create", Vendor: "square"}
	k1 := h1.begin(req).VendorIdempotencyKey
	k2 := h2.begin(req).VendorIdempotencyKey
	k3 := h3.begin(req).VendorIdempotencyKey
	if k1.Value != k2.Value {
		t.Fatalf("k1.Value != k2.Value: keys %s %s %s", k1.Value, k2.Value, k3.Value)
	}
	if k1.Value == k3.Value {
		t.Fatalf("k1.Value == k3.Value: keys %s %s %s", k1.Value, k2.Value, k3.Value)
	}
	if k1.Location != "body" {
		t.Fatalf("k1.Location != \"body\": square key %+v", k1)
	}
	if k1.Name != "idempotency_key" {
		t.Fatalf("k1.Name != \"idempotency_key\": square key %+v", k1)
	}
	if len(k1.Value) > 45 {
		t.Fatalf("len(k1.Value) > 45: square key %+v", k1)
	}
	other := req
	other.Vendor = "acme"
	if k := h1.begin(ledger.BeginRequest{IdempotencyKey: "x:1", EffectType: "acme.thing.create", Vendor: "acme"}).VendorIdempotencyKey; k.Enforced || k.Location != "header" {
		t.Fatalf("unknown vendor key %+v", k)
	}
}

func TestLeaseExpiryBlocksUntilResolved(t *testing.T) {
	h := newHarness(t, testRules())
	req := pay("inv:2", "acct_1", 10_000_000)
	req.LeaseSeconds = 60
	a := h.beginWant(req, ledger.DecisionExecute)

	h.clock.Advance(59 * time.Second)
	h.beginWant(req, ledger.DecisionInFlight) // one tick before expiry
	h.clock.Advance(time.Second)              // exactly at expiry
	b := h.beginWant(req, ledger.DecisionBlocked)
	if b.Reason != ledger.ReasonLeaseExpired {
		t.Fatalf("b.Reason != ledger.ReasonLeaseExpired: blocked: %+v", b)
	}
	if b.Since == nil {
		t.Fatalf("b.Since == nil: blocked: %+v", b)
	}
	if !b.Since.Equal(*a.LeaseExpiresAt) {
		t.Fatalf("!b.Since.Equal(*a.LeaseExpiresAt): blocked: %+v", b)
	}
	if b.State != ledger.StateIndeterminate {
		t.Fatalf("b.State != ledger.StateIndeterminate: blocked: %+v", b)
	}
	// The agent is now warned on every begin, whatever the key.
	w := h.beginWant(pay("inv:3", "acct_2", 1), ledger.DecisionExecute).IntegrationWarning
	if w == nil {
		t.Fatalf("w == nil: integration warning: %+v", w)
	}
	if w.UnreportedCount != 1 {
		t.Fatalf("w.UnreportedCount != 1: integration warning: %+v", w)
	}
	if w.OldestEffectID != a.EffectID {
		t.Fatalf("w.OldestEffectID != a.EffectID: integration warning: %+v", w)
	}
	// Spend stays reserved while the outcome is unknown.
	if got := budgetsByName(t, h)["daily-spend"]; got != 10_000_001 {
		t.Fatalf("daily-spend counted %d, want 10000001", got)
	}
	_, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{Namespace: "default", IdempotencyKey: "inv:2", Resolution: ledger.OutcomeSucceeded, VendorReference: "pi_9", Note: "seen in dashboard", ResolvedBy: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	d := h.beginWant(req, ledger.DecisionDuplicate)
	if d.VendorReference != "pi_9" {
		t.Fatalf("duplicate after resolve: %+v", d)
	}
	eff := h.get(a.EffectID)
	if eff.ResolvedBy != "alice" {
		t.Fatalf("eff.ResolvedBy != \"alice\": resolution not recorded: %+v", eff)
	}
	if eff.ResolutionNote != "seen in dashboard" {
		t.Fatalf("eff.ResolutionNote != \"seen in dashboard\": resolution not recorded: %+v", eff)
	}
	// A resolve within the namespace (an agent's) settles the effect but
	// leaves the unreported expiry; an operator's agreement clears it.
	if w := h.beginWant(pay("inv:4", "acct_2", 1), ledger.DecisionExecute).IntegrationWarning; w == nil || w.UnreportedCount != 1 {
		t.Fatalf("warning after the agent's resolve: %+v", w)
	}
	if _, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: a.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:bob"}); err != nil {
		t.Fatal(err)
	}
	if w := h.beginWant(pay("inv:6", "acct_2", 1), ledger.DecisionExecute).IntegrationWarning; w != nil {
		t.Fatalf("warning after the operator's resolve: %+v", w)
	}
	if eff := h.get(a.EffectID); eff.ResolvedBy != "admin:bob" {
		t.Fatalf("the operator's resolution not recorded: %+v", eff)
	}
}

func TestReportedUnknownThenResolvedFailedFreesKeyAndSpend(t *testing.T) {
	h := newHarness(t, testRules())
	req := pay("inv:5", "acct_1", 40_000_000)
	a := h.beginWant(req, ledger.DecisionExecute)
	eff := h.report(a.EffectID, ledger.OutcomeUnknown, func(r *ledger.ReportRequest) { r.Error = "timeout" })
	if eff.State != ledger.StateIndeterminate {
		t.Fatalf("eff.State != ledger.StateIndeterminate: after unknown: %+v", eff)
	}
	if eff.Reason != ledger.ReasonReportedUnknown {
		t.Fatalf("eff.Reason != ledger.ReasonReportedUnknown: after unknown: %+v", eff)
	}
	if b := h.beginWant(req, ledger.DecisionBlocked); b.Reason != ledger.ReasonReportedUnknown {
		t.Fatalf("blocked: %+v", b)
	}
	if got := budgetsByName(t, h)["daily-spend"]; got != 40_000_000 {
		t.Fatalf("indeterminate must keep its reservation; counted %d", got)
	}
	if _, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: a.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if got := budgetsByName(t, h)["daily-spend"]; got != 0 {
		t.Fatalf("resolve failed must release; counted %d", got)
	}
	if r := h.beginWant(req, ledger.DecisionExecute); r.Attempt != 2 {
		t.Fatalf("attempt %d, want 2", r.Attempt)
	}
	// Resolving an effect that is in flight is refused.
	_, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: a.EffectID, Resolution: ledger.OutcomeFailed})
	wantCode(t, err, ledger.CodeInvalidStateTransition)
}

func TestLateReportAfterReaperSettles(t *testing.T) {
	h := newHarness(t, testRules())
	a := h.beginWant(email("late", "bot"), ledger.DecisionExecute)
	h.clock.Advance(61 * time.Second)
	n, err := h.eng.Reap(context.Background())
	if err != nil {
		t.Fatalf("err != nil: reap = %d, %v; want 1", n, err)
	}
	if n != 1 {
		t.Fatalf("n != 1: reap = %d, %v; want 1", n, err)
	}
	if eff := h.get(a.EffectID); eff.State != ledger.StateIndeterminate || eff.Reason != ledger.ReasonLeaseExpired {
		t.Fatalf("after reap: %+v", eff)
	}
	if n, _ := h.eng.Reap(context.Background()); n != 0 {
		t.Fatalf("second reap expired %d", n)
	}
	eff := h.report(a.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Attempt = 1 })
	if eff.State != ledger.StateSucceeded {
		t.Fatalf("late report: %+v", eff)
	}
	// The late report settles the effect, but only an operator clears the
	// unreported expiry it counts as (SPEC section 4).
	if r := h.beginWant(email("other", "bot"), ledger.DecisionExecute); r.IntegrationWarning == nil || r.IntegrationWarning.UnreportedCount != 1 {
		t.Fatalf("a late report cleared the unreported count: %+v", r.IntegrationWarning)
	}
	if _, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: a.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:bob"}); err != nil {
		t.Fatal(err)
	}
	if r := h.beginWant(email("third", "bot"), ledger.DecisionExecute); r.IntegrationWarning != nil {
		t.Fatalf("the operator's resolve left the unreported count: %+v", r.IntegrationWarning)
	}
}

func TestReportTwice(t *testing.T) {
	h := newHarness(t, testRules())
	a := h.beginWant(email("twice", "bot"), ledger.DecisionExecute)
	first := h.report(a.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Result = json.RawMessage(`1`) })
	again := h.report(a.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Result = json.RawMessage(`2`) })
	if string(again.Result) != "1" {
		t.Fatalf("string(again.Result) != \"1\": second identical report changed the effect: %+v", again)
	}
	if !again.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("!again.UpdatedAt.Equal(first.UpdatedAt): second identical report changed the effect: %+v", again)
	}
	for _, o := range []ledger.Outcome{ledger.OutcomeFailed, ledger.OutcomeUnknown} {
		_, err := h.eng.Report(context.Background(), ledger.ReportRequest{EffectID: a.EffectID, Outcome: o})
		wantCode(t, err, ledger.CodeInvalidStateTransition)
	}
	_, err := h.eng.Report(context.Background(), ledger.ReportRequest{EffectID: "eff_nope", Outcome: ledger.OutcomeFailed})
	wantCode(t, err, ledger.CodeEffectNotFound)
}

func TestPolicyDenyAndRequirements(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "drop", EffectType: "db.drop.table"}, ledger.DecisionDenied)
	if r.Reason != ledger.ReasonPolicyDenied {
		t.Fatalf("r.Reason != ledger.ReasonPolicyDenied: deny: %+v", r)
	}
	if r.EffectID != "" {
		t.Fatalf("r.EffectID != \"\": deny: %+v", r)
	}
	if _, err := h.eng.Get(ctx, "default", "", "drop"); err == nil {
		t.Fatal("a denied new key must record nothing")
	}

	noDim := pay("p1", "acct_1", 1)
	noDim.Dimensions = nil
	_, err := h.eng.Begin(ctx, noDim)
	wantCode(t, err, ledger.CodeDimensionRequired)
	if le := err.(*ledger.Error); !strings.Contains(le.Message, "counterparty") {
		t.Fatalf("message does not name the dimension: %s", le.Message)
	}

	noCost := pay("p1", "acct_1", 1)
	noCost.EstimatedCostMicros = nil
	_, err = h.eng.Begin(ctx, noCost)
	wantCode(t, err, ledger.CodeCostRequired)
	page, _ := h.eng.List(ctx, ledger.Filter{Namespace: "default"})
	if len(page.Effects) != 0 {
		t.Fatalf("refused begins recorded %d effects", len(page.Effects))
	}
}

func TestBudgetWarningWhenNoCostDeclared(t *testing.T) {
	h := newHarness(t, testRules())
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "vm1", EffectType: "cloud.vm.create"}, ledger.DecisionExecute)
	if r.BudgetWarning == nil {
		t.Fatalf("r.BudgetWarning == nil: budget warning: %+v", r.BudgetWarning)
	}
	if r.BudgetWarning.Ceilings[0] != "cloud-spend" {
		t.Fatalf("r.BudgetWarning.Ceilings[0] != \"cloud-spend\": budget warning: %+v", r.BudgetWarning)
	}
	r = h.beginWant(ledger.BeginRequest{IdempotencyKey: "vm2", EffectType: "cloud.vm.create", EstimatedCostMicros: i64(5)}, ledger.DecisionExecute)
	if r.BudgetWarning != nil {
		t.Fatalf("r.BudgetWarning != nil: declared: %+v", r)
	}
	if len(r.Budgets) != 1 {
		t.Fatalf("len(r.Budgets) != 1: declared: %+v", r)
	}
	if r.Budgets[0].Counted != 5 {
		t.Fatalf("r.Budgets[0].Counted != 5: declared: %+v", r)
	}
	if r.Budgets[0].Remaining != 995 {
		t.Fatalf("r.Budgets[0].Remaining != 995: declared: %+v", r)
	}
	if r := h.beginWant(email("e", "a"), ledger.DecisionExecute); r.BudgetWarning != nil {
		t.Fatal("a count ceiling needs no cost")
	}
}

func budgetsByName(t testing.TB, h *harness) map[string]int64 {
	t.Helper()
	bs, err := h.eng.Budgets(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, b := range bs {
		out[b.Name] += b.Counted
	}
	return out
}

func TestBackgroundReaperAndClose(t *testing.T) {
	h := newHarness(t, testRules())
	// Restart with the background reaper on.
	h.eng.Close(context.Background())
	store := h.openStore()
	eng, err := ledger.New(ledger.Options{Store: store, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: 5 * time.Millisecond, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	a := h.beginWant(email("bg", "bot"), ledger.DecisionExecute)
	h.clock.Advance(time.Hour)
	deadline := time.Now().Add(10 * time.Second)
	// Get would show the lazy view at once; the unreported count in a
	// warning is only there once the reaper has written the expiry.
	for {
		r := h.begin(email("bg2", "bot")) // execute, then in_flight
		if r.IntegrationWarning != nil && r.IntegrationWarning.OldestEffectID == a.EffectID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("background reaper never recorded the unreported expiry")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	_, err = eng.Begin(context.Background(), email("late", "bot"))
	if err != ledger.ErrClosed {
		t.Fatalf("begin after close: %v", err)
	}
	if _, err := eng.Get(context.Background(), "", a.EffectID, ""); err != ledger.ErrClosed {
		t.Fatalf("get after close: %v", err)
	}
}

// expiries counts the expiries an engine reports (Observer.Expired).
type expiries struct {
	n atomic.Int64
}

func (o *expiries) Begin(string, ledger.Decision, time.Duration) {}
func (o *expiries) Report(ledger.Outcome, time.Duration)         {}
func (o *expiries) Expired(n int)                                { o.n.Add(int64(n)) }
func (o *expiries) WriteFailed(string, int)                      {}

// The background reaper sleeps until the lease it knows of ends, not for
// its whole interval: a lease of one second handed out to an engine whose
// reaper would otherwise sweep once an hour is expired about a second
// later (on the real clock, which the reaper's timer follows).
func TestTheReaperWakesWhenALeaseEnds(t *testing.T) {
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	obs := &expiries{}
	eng, err := ledger.New(ledger.Options{Store: h.openStore(), Secret: h.secret, Policies: h.rules, Observer: obs,
		ReapInterval: time.Hour, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	time.Sleep(50 * time.Millisecond) // the sweep at start has found nothing
	req := email("short", "bot")
	req.LeaseSeconds = 1
	h.beginWant(req, ledger.DecisionExecute)
	deadline := time.Now().Add(10 * time.Second)
	for obs.n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reaper had not expired a one-second lease 10 s later (it slept for its interval)")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := obs.n.Load(); got != 1 {
		t.Errorf("expiries = %d, want 1", got)
	}
}

// viewCounter counts a store's read transactions.
type viewCounter struct {
	ledger.Store
	views atomic.Int64
}

func (s *viewCounter) View(ctx context.Context, fn func(ledger.Reader) error) error {
	s.views.Add(1)
	return s.Store.View(ctx, fn)
}

func (s *viewCounter) Exclusive() bool {
	x, ok := s.Store.(ledger.Exclusive)
	return ok && x.Exclusive()
}

// An idle engine on a store only it writes does not sweep: with nothing
// due, the default reaper reads the store once at start and then not for
// a minute (it used to scan twice a second). On a shared store another
// replica's lease may need reaping at any time, so there it still sweeps
// every second.
func TestAnIdleReaperDoesNotSweep(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("a shared store is swept every second by design")
	}
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	st := &viewCounter{Store: h.openStore()}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	time.Sleep(200 * time.Millisecond)
	atStart := st.views.Load()
	time.Sleep(2500 * time.Millisecond)
	if got := st.views.Load() - atStart; got != 0 {
		t.Errorf("an idle engine read the store %d times in 2.5 s after its first sweep, want 0", got)
	}
}
