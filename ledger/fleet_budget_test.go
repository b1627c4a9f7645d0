package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// fleet opens a ledger under rules and returns n engines on it: on
// PostgreSQL, n more engines on the harness's schema, as n sidecars would
// be; on Badger, which one process owns, the harness's engine n times, so
// that the same sequence runs on both backends and must decide alike.
func fleet(t *testing.T, rules []ledger.Rule, n int) (*harness, []*ledger.Engine) {
	t.Helper()
	h := newHarness(t, rules)
	var engines []*ledger.Engine
	for range n {
		if testBackend != "postgres" {
			engines = append(engines, h.eng)
			continue
		}
		engines = append(engines, fleetEngine(t, h, h.clock))
	}
	return h, engines
}

// fleetEngine is one more engine on the harness's PostgreSQL schema,
// reading clock.
func fleetEngine(t *testing.T, h *harness, clock ledger.Clock) *ledger.Engine {
	t.Helper()
	st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
	if err != nil {
		t.Fatal(err)
	}
	e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: clock, ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

// spend is a begin of cost micros against the fleet's ceilings, by agent
// with counterparty cp.
func spend(key, agent, cp string, cost int64) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: key, EffectType: "fleet.spend", Vendor: "stripe", AgentID: agent,
		Dimensions: map[string]string{"counterparty": cp}, EstimatedCostMicros: i64(cost)}
}

func fleetBegin(t *testing.T, eng *ledger.Engine, req ledger.BeginRequest) *ledger.BeginResult {
	t.Helper()
	res, err := eng.Begin(context.Background(), req)
	if err != nil {
		t.Fatalf("begin %s: %v", req.IdempotencyKey, err)
	}
	return res
}

func fleetBeginWant(t *testing.T, eng *ledger.Engine, req ledger.BeginRequest, want ledger.Decision) *ledger.BeginResult {
	t.Helper()
	res := fleetBegin(t, eng, req)
	if res.Decision != want {
		t.Fatalf("begin %s (cost %d): %s (%s), want %s", req.IdempotencyKey, *req.EstimatedCostMicros, res.Decision, res.Message, want)
	}
	return res
}

func fleetReport(t *testing.T, eng *ledger.Engine, res *ledger.BeginResult, o ledger.Outcome, actual *int64) {
	t.Helper()
	if _, err := eng.Report(context.Background(), ledger.ReportRequest{EffectID: res.EffectID, Attempt: res.Attempt, Outcome: o, ActualCostMicros: actual}); err != nil {
		t.Fatalf("report %s: %v", res.EffectID, err)
	}
}

// wantCounted checks what the operator's listing counts for a ceiling.
func wantCounted(t *testing.T, h *harness, name string, want int64) {
	t.Helper()
	if got := counted(t, h, name); got != want {
		t.Errorf("%s counts %d, want %d", name, got, want)
	}
}

func globalCeiling(limit int64, window string) []ledger.Rule {
	return []ledger.Rule{{Match: "fleet.*", Ceilings: []ledger.Ceiling{{Name: "fleet", LimitMicros: i64(limit), Window: window, Per: "global"}}}}
}

// TestAFleetCountsWhatEffectsSettleAt: a begin on any replica sees every
// unit counted anywhere, whatever an effect settled at and through
// whichever replica, exactly as one engine does (the same sequences run on
// Badger, one engine, and on PostgreSQL with two).
func TestAFleetCountsWhatEffectsSettleAt(t *testing.T) {
	ctx := context.Background()
	t.Run("a report above the estimate", func(t *testing.T) {
		h, e := fleet(t, globalCeiling(100, "1h"), 2)
		a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 10), ledger.DecisionExecute)
		fleetReport(t, e[0], a, ledger.OutcomeSucceeded, i64(90))
		res := fleetBeginWant(t, e[1], spend("b", "bot", "x", 80), ledger.DecisionDenied)
		if res.Ceiling == nil {
			t.Errorf("res.Ceiling == nil: refused with %+v, want 90 counted", res.Ceiling)
		} else if res.Ceiling.Counted != 90 {
			t.Errorf("res.Ceiling.Counted != 90: refused with %+v, want 90 counted", res.Ceiling)
		}
		fleetBeginWant(t, e[1], spend("c", "bot", "x", 10), ledger.DecisionExecute)
		fleetBeginWant(t, e[0], spend("d", "bot", "x", 1), ledger.DecisionDenied)
		wantCounted(t, h, "fleet", 100)
	})
	t.Run("a vendor's record settling an effect that reserved nothing", func(t *testing.T) {
		// A proxied Stripe confirm has no amount: it reserves 0, and the
		// signed payment_intent.succeeded settles it at the full amount.
		h, e := fleet(t, globalCeiling(100, "1h"), 2)
		a := fleetBeginWant(t, e[0], spend("pi_confirm", "bot", "x", 0), ledger.DecisionExecute)
		// The event echoes the key Ratchet handed out (request.idempotency_key).
		if _, err := e[1].Settle(ctx, ledger.SettleRequest{Vendor: "stripe", VendorKey: a.VendorIdempotencyKey.Value,
			Outcome: ledger.OutcomeSucceeded, ActualCostMicros: i64(95), Source: "webhook:stripe", EventID: "evt_1"}); err != nil {
			t.Fatal(err)
		}
		fleetBeginWant(t, e[1], spend("b", "bot", "x", 80), ledger.DecisionDenied)
		fleetBeginWant(t, e[0], spend("c", "bot", "x", 6), ledger.DecisionDenied)
		fleetBeginWant(t, e[0], spend("d", "bot", "x", 5), ledger.DecisionExecute)
		wantCounted(t, h, "fleet", 100)
	})
	t.Run("another replica holding an unused grant", func(t *testing.T) {
		h, e := fleet(t, globalCeiling(100, "1h"), 2)
		a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 10), ledger.DecisionExecute)
		fleetBeginWant(t, e[1], spend("b", "bot", "x", 5), ledger.DecisionExecute) // its share takes more than 5
		fleetReport(t, e[1], a, ledger.OutcomeSucceeded, i64(90))                  // reported through the other one
		fleetBeginWant(t, e[1], spend("c", "bot", "x", 6), ledger.DecisionDenied)  // 90 + 5 + 6 > 100
		fleetBeginWant(t, e[0], spend("d", "bot", "x", 6), ledger.DecisionDenied)
		fleetBeginWant(t, e[1], spend("e", "bot", "x", 5), ledger.DecisionExecute)
		wantCounted(t, h, "fleet", 100)
	})
	t.Run("a report below the estimate frees the rest everywhere", func(t *testing.T) {
		h, e := fleet(t, globalCeiling(100, "1h"), 2)
		a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 90), ledger.DecisionExecute)
		fleetBeginWant(t, e[1], spend("b", "bot", "x", 90), ledger.DecisionDenied)
		fleetReport(t, e[0], a, ledger.OutcomeSucceeded, i64(10))
		fleetBeginWant(t, e[1], spend("c", "bot", "x", 90), ledger.DecisionExecute)
		fleetBeginWant(t, e[0], spend("d", "bot", "x", 1), ledger.DecisionDenied)
		wantCounted(t, h, "fleet", 100)
	})
	t.Run("a failed effect frees everything everywhere", func(t *testing.T) {
		h, e := fleet(t, globalCeiling(100, "1h"), 2)
		a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 10), ledger.DecisionExecute)
		fleetReport(t, e[0], a, ledger.OutcomeSucceeded, i64(60))
		b := fleetBeginWant(t, e[0], spend("b", "bot", "x", 40), ledger.DecisionExecute)
		fleetBeginWant(t, e[1], spend("c", "bot", "x", 40), ledger.DecisionDenied)
		fleetReport(t, e[1], b, ledger.OutcomeFailed, nil)
		fleetBeginWant(t, e[1], spend("d", "bot", "x", 40), ledger.DecisionExecute)
		fleetBeginWant(t, e[0], spend("e", "bot", "x", 1), ledger.DecisionDenied)
		wantCounted(t, h, "fleet", 100)
	})
	t.Run("per-agent and per-counterparty ceilings", func(t *testing.T) {
		h, e := fleet(t, []ledger.Rule{{Match: "fleet.*", Ceilings: []ledger.Ceiling{
			{Name: "per-agent", LimitMicros: i64(100), Window: "1h", Per: "agent"},
			{Name: "per-counterparty", LimitMicros: i64(100), Window: "1h", Per: "dimension:counterparty"},
		}}}, 2)
		a := fleetBeginWant(t, e[0], spend("a", "alice", "acct_x", 10), ledger.DecisionExecute)
		fleetReport(t, e[0], a, ledger.OutcomeSucceeded, i64(90))
		res := fleetBeginWant(t, e[1], spend("b", "alice", "acct_y", 80), ledger.DecisionDenied)
		if res.Ceiling == nil {
			t.Errorf("res.Ceiling == nil: alice refused by %+v, want per-agent", res.Ceiling)
		} else if res.Ceiling.Name != "per-agent" {
			t.Errorf("res.Ceiling.Name != \"per-agent\": alice refused by %+v, want per-agent", res.Ceiling)
		}
		res = fleetBeginWant(t, e[1], spend("c", "bob", "acct_x", 80), ledger.DecisionDenied)
		if res.Ceiling == nil {
			t.Errorf("res.Ceiling == nil: acct_x refused by %+v, want per-counterparty", res.Ceiling)
		} else if res.Ceiling.Name != "per-counterparty" {
			t.Errorf("res.Ceiling.Name != \"per-counterparty\": acct_x refused by %+v, want per-counterparty", res.Ceiling)
		}
		fleetBeginWant(t, e[1], spend("d", "bob", "acct_y", 80), ledger.DecisionExecute)
		if got := counted(t, h, "per-agent"); got != 170 { // alice 90, bob 80
			t.Errorf("per-agent counts %d in all, want 170", got)
		}
	})
	t.Run("the window rolling over", func(t *testing.T) {
		h, e := fleet(t, globalCeiling(100, "1h"), 2)
		a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 10), ledger.DecisionExecute)
		fleetReport(t, e[0], a, ledger.OutcomeSucceeded, i64(90))
		h.clock.Advance(30 * time.Minute)
		fleetBeginWant(t, e[1], spend("b", "bot", "x", 11), ledger.DecisionDenied)
		fleetBeginWant(t, e[1], spend("c", "bot", "x", 10), ledger.DecisionExecute)
		h.clock.Advance(31 * time.Minute) // a's 90 has left the window, c's 10 has not
		fleetBeginWant(t, e[0], spend("d", "bot", "x", 91), ledger.DecisionDenied)
		d := fleetBeginWant(t, e[0], spend("e", "bot", "x", 5), ledger.DecisionExecute)
		fleetReport(t, e[1], d, ledger.OutcomeSucceeded, i64(90))
		fleetBeginWant(t, e[1], spend("f", "bot", "x", 1), ledger.DecisionDenied)
		wantCounted(t, h, "fleet", 100)
	})
}

// TestAFleetStaysUnderItsCeilingWhileSettlementsLand: while callers on
// two replicas spend, effects begun on a third at an estimate of 1 settle
// at 10, reported through the other two. Then callers on the two spend 1
// at a time until refused: the ceiling ends exactly at its limit,
// as with one engine, never past it and never short of it.
func TestAFleetStaysUnderItsCeilingWhileSettlementsLand(t *testing.T) {
	const limit, callers, overshoots = 400, 12, 20
	h, e := fleet(t, globalCeiling(limit, "24h"), 3)
	ctx := context.Background()
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		sum int64 // what every effect settled at
	)
	spendOnes := func(g int, eng *ledger.Engine, n int) {
		for i := range n {
			res, err := eng.Begin(ctx, spend(fmt.Sprint("k", g, "-", i), "bot", "x", 1))
			if err != nil {
				t.Errorf("begin: %v", err)
				return
			}
			if res.Decision != ledger.DecisionExecute {
				continue
			}
			if _, err := e[(g+1)%3].Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Attempt: res.Attempt, Outcome: ledger.OutcomeSucceeded}); err != nil {
				t.Errorf("report: %v", err)
				return
			}
			mu.Lock()
			sum++
			mu.Unlock()
		}
	}
	var high []*ledger.BeginResult
	for i := range overshoots {
		high = append(high, fleetBeginWant(t, e[0], spend(fmt.Sprint("high", i), "bot", "x", 1), ledger.DecisionExecute))
	}
	for g := range callers {
		wg.Go(func() { spendOnes(1000+g, e[1+g%2], 8) }) // at most 96 more: the first phase never fills the ceiling
	}
	for i, res := range high {
		wg.Go(func() {
			if _, err := e[1+i%2].Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Attempt: res.Attempt,
				Outcome: ledger.OutcomeSucceeded, ActualCostMicros: i64(10)}); err != nil {
				t.Errorf("report: %v", err)
			}
			mu.Lock()
			sum += 10
			mu.Unlock()
		})
	}
	wg.Wait()
	for g := range callers {
		wg.Go(func() { spendOnes(g, e[1+g%2], 40) })
	}
	wg.Wait()
	if got := counted(t, h, "fleet"); got != sum {
		t.Errorf("the ceiling counts %d, the effects settled at %d in all", got, sum)
	}
	if sum != limit {
		t.Errorf("effects settled at %d in all against a limit of %d: want the ceiling filled exactly, never passed", sum, limit)
	}
}
