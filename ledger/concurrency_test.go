package ledger_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestSameKeyManyGoroutines(t *testing.T) {
	h := newHarness(t, testRules())
	const n = 64
	var wg sync.WaitGroup
	decisions := make(chan *ledger.BeginResult, n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			res, err := h.eng.Begin(context.Background(), pay("hot:key", "acct_1", 1_000_000))
			if err != nil {
				t.Error(err)
				return
			}
			decisions <- res
		})
	}
	close(start)
	wg.Wait()
	close(decisions)
	counts := map[ledger.Decision]int{}
	ids := map[string]bool{}
	for d := range decisions {
		counts[d.Decision]++
		ids[d.EffectID] = true
	}
	if counts[ledger.DecisionExecute] != 1 {
		t.Fatalf("counts[ledger.DecisionExecute] != 1: decisions %v over %d effect ids; want 1 execute, %d in_flight, one effect", counts, len(ids), n-1)
	}
	if counts[ledger.DecisionInFlight] != n-1 {
		t.Fatalf("counts[ledger.DecisionInFlight] != n-1: decisions %v over %d effect ids; want 1 execute, %d in_flight, one effect", counts, len(ids), n-1)
	}
	if len(ids) != 1 {
		t.Fatalf("len(ids) != 1: decisions %v over %d effect ids; want 1 execute, %d in_flight, one effect", counts, len(ids), n-1)
	}
	if got := budgetsByName(t, h)["daily-spend"]; got != 1_000_000 {
		t.Fatalf("counted %d, want one reservation", got)
	}
}

func TestCeilingUnderRace(t *testing.T) {
	// 64 goroutines, distinct keys, each asking for 7 of a 100-unit
	// ceiling a few times over: at most 14 may execute, and the counter
	// must equal the sum of what was granted.
	rules := []ledger.Rule{{Match: "*", Ceilings: []ledger.Ceiling{
		{Name: "total", LimitMicros: i64(100), Window: "24h", Per: "global"},
	}}}
	h := newHarness(t, rules)
	const n = 64
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted, deniedN := int64(0), 0
	for g := range n {
		wg.Go(func() {
			for j := range 3 {
				req := ledger.BeginRequest{IdempotencyKey: "k" + itoa(int64(g*10+j)), EffectType: "spend.money", EstimatedCostMicros: i64(7)}
				res, err := h.eng.Begin(context.Background(), req)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				switch res.Decision {
				case ledger.DecisionExecute:
					granted += 7
				case ledger.DecisionDenied:
					deniedN++
				default:
					t.Errorf("unexpected %s", res.Decision)
				}
				mu.Unlock()
				if res.Decision == ledger.DecisionExecute && j == 1 {
					// Some reports interleave: failures release spend.
					if _, err := h.eng.Report(context.Background(), ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeFailed}); err != nil {
						t.Error(err)
					}
					mu.Lock()
					granted -= 7
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	counted := budgetsByName(t, h)["total"]
	if counted > 100 {
		t.Fatalf("counted > 100: counted %d, granted %d (denied %d): the ceiling must hold and be filled", counted, granted, deniedN)
	}
	if counted != granted {
		t.Fatalf("counted != granted: counted %d, granted %d (denied %d): the ceiling must hold and be filled", counted, granted, deniedN)
	}
	if granted < 100-6 {
		t.Fatalf("granted < 100-6: counted %d, granted %d (denied %d): the ceiling must hold and be filled", counted, granted, deniedN)
	}
}

func TestMixedLoadKeepsInvariants(t *testing.T) {
	// Many goroutines mix begin, report, resolve and unwind on a small set
	// of keys; afterwards every key has exactly one effect and no ceiling
	// is over its limit.
	h := newHarness(t, testRules())
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 40 {
				key := "mix:" + itoa(int64(i%10))
				req := pay(key, "acct_"+itoa(int64(i%3)), 30_000_000)
				req.GroupKey = "grp:" + itoa(int64(i%2))
				res, err := h.eng.Begin(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				settle(h, res, []ledger.Outcome{ledger.OutcomeFailed, ledger.OutcomeUnknown, ledger.OutcomeSucceeded}[(g+i)%3])
				if i == 30 && g == 0 {
					h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "grp:1"})
				}
			}
		})
	}
	wg.Wait()
	page, err := h.eng.List(ctx, ledger.Filter{Namespace: "default", Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, e := range page.Effects {
		keys[e.IdempotencyKey]++
	}
	held := heldSpend(page.Effects)
	for k, n := range keys {
		if n != 1 {
			t.Fatalf("key %s has %d effects", k, n)
		}
	}
	b := budgetsByName(t, h)
	if b["daily-spend"] > 500_000_000 {
		t.Fatalf("b[\"daily-spend\"] > 500_000_000: daily-spend counted %d, effects hold %d", b["daily-spend"], held)
	}
	if b["daily-spend"] != held {
		t.Fatalf("b[\"daily-spend\"] != held: daily-spend counted %d, effects hold %d", b["daily-spend"], held)
	}
	assertStateCounts(t, h)
}

// assertStateCounts checks the persisted per-state counts against a full
// listing.
func assertStateCounts(t testing.TB, h *harness) {
	t.Helper()
	page, err := h.eng.List(context.Background(), ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	want := map[ledger.State]int64{}
	for _, e := range page.Effects {
		want[e.State]++
	}
	got, err := h.eng.StateCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []ledger.State{ledger.StatePending, ledger.StateSucceeded, ledger.StateFailed, ledger.StateIndeterminate,
		ledger.StateAwaitingApproval, ledger.StateApproved, ledger.StateRejected, ledger.StateCompensated} {
		if got[st] != want[st] {
			t.Fatalf("state counts %v, listing %v", got, want)
		}
	}
}

// TestEnginesSharingOneStore runs three engines on one PostgreSQL ledger,
// as three sidecars would, with concurrent callers on each spending against
// one global ceiling: no caller may see a serialization failure (they are
// retried inside Ratchet), keys dedupe across engines, and the ceiling
// holds, exactly as with one writer.
func TestEnginesSharingOneStore(t *testing.T) {
	// 480 keys of 3 each against 600: the ceiling binds after 200.
	h, engines := replicas(t, "shared", 600, "24h", 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	executes := map[string]int{}
	for g := range 48 {
		wg.Go(func() {
			eng := engines[g%3]
			for i := range 30 {
				key := "k" + itoa(int64(i)) + "-" + itoa(int64(g%16)) // shared across engines
				res, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: key, EffectType: "shared.spend", EstimatedCostMicros: i64(3)})
				if err != nil {
					t.Errorf("engine %d: %v", g%3, err)
					return
				}
				if res.Decision == ledger.DecisionExecute {
					mu.Lock()
					executes[key]++
					mu.Unlock()
					// Reported through another engine: each keeps state
					// counts of its own, which must still add up.
					if _, err := engines[(g+1)%3].Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded}); err != nil {
						t.Errorf("report: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for k, n := range executes {
		if n != 1 {
			t.Errorf("key %s executed %d times", k, n)
		}
		total += n
	}
	// Exactly as one writer would: no begin refused while room was left.
	if got := budgetsByName(t, h)["shared"]; got != int64(total*3) || total != 200 {
		t.Fatalf("ceiling counted %d for %d executes, want 600 for 200", got, total)
	}
	assertStateCounts(t, h)
}

// replicas opens a PostgreSQL ledger with one global ceiling (limit in
// micros over window), then n more engines on it, as n more sidecars
// would. Badger allows one process per ledger: on Badger it skips.
func replicas(t *testing.T, ceiling string, limit int64, window string, n int) (*harness, []*ledger.Engine) {
	t.Helper()
	if testBackend != "postgres" {
		t.Skip("only a shared store (PostgreSQL) has several engines")
	}
	return fleet(t, []ledger.Rule{{Match: "*", Ceilings: []ledger.Ceiling{{Name: ceiling, LimitMicros: i64(limit), Window: window, Per: "global"}}}}, n)
}

// TestSharesDecideExactlyAtTheLimit: each replica counts in a share of its
// own (see the ledger's "Shares"), yet a begin is refused exactly when the
// sum over every replica would pass the limit, as with one writer.
func TestSharesDecideExactlyAtTheLimit(t *testing.T) {
	h, e := replicas(t, "ten", 10, "24h", 2)
	ctx := context.Background()
	step := func(eng *ledger.Engine, key string, cost int64, want ledger.Decision, counted int64) {
		t.Helper()
		res, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: key, EffectType: "shared.spend", EstimatedCostMicros: i64(cost)})
		if err != nil {
			t.Fatal(err)
		}
		if res.Decision != want {
			t.Fatalf("%s: %s, want %s (%+v)", key, res.Decision, want, res)
		}
		if want == ledger.DecisionDenied && (res.Ceiling == nil || res.Ceiling.Counted != counted) {
			t.Fatalf("%s: refused with %+v, want %d counted", key, res.Ceiling, counted)
		}
		if got := budgetsByName(t, h)["ten"]; got != counted {
			t.Fatalf("after %s: the ceiling counts %d, want %d", key, got, counted)
		}
	}
	step(e[0], "a6", 6, ledger.DecisionExecute, 6)
	step(e[1], "b5", 5, ledger.DecisionDenied, 6) // 11 > 10, though b's own share counts nothing
	step(e[1], "b4", 4, ledger.DecisionExecute, 10)
	step(e[0], "a1", 1, ledger.DecisionDenied, 10)
	step(e[1], "b1", 1, ledger.DecisionDenied, 10)
	// A failed effect gives its amount back, to whichever replica asks.
	res, err := e[0].Get(ctx, "default", "", "b4")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e[0].Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeFailed}); err != nil {
		t.Fatal(err)
	}
	if got := budgetsByName(t, h)["ten"]; got != 6 {
		t.Fatalf("after b4 failed, reported through another replica: %d counted, want 6", got)
	}
	step(e[0], "a4", 4, ledger.DecisionExecute, 10)
}

// TestAStoppedReplicasGrantComesBack: a replica that stops leaves its
// share's grant behind; another replica reclaims what it did not use, and
// retention removes the share once its window is empty.
func TestAStoppedReplicasGrantComesBack(t *testing.T) {
	h, e := replicas(t, "hundred", 100, "1h", 2)
	ctx := context.Background()
	if res, err := e[0].Begin(ctx, ledger.BeginRequest{IdempotencyKey: "a", EffectType: "shared.spend", EstimatedCostMicros: i64(1)}); err != nil || res.Decision != ledger.DecisionExecute {
		t.Fatalf("a: %v %+v", err, res)
	}
	e[0].Close(ctx) // it took 1 and a sixteenth of the limit more
	if res, err := e[1].Begin(ctx, ledger.BeginRequest{IdempotencyKey: "b", EffectType: "shared.spend", EstimatedCostMicros: i64(99)}); err != nil || res.Decision != ledger.DecisionExecute {
		t.Fatalf("b, the rest of the limit: %v %+v", err, res)
	}
	if got := budgetsByName(t, h)["hundred"]; got != 100 {
		t.Fatalf("counted %d, want 100", got)
	}
	h.clock.Advance(2 * time.Hour)
	if _, err := e[1].Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if bs, err := e[1].Budgets(ctx, ""); err != nil || len(bs) != 0 {
		t.Fatalf("budgets after the window emptied and a purge: %+v, %v", bs, err)
	}
}

// TestReplicasReapTogether: every replica runs its reaper, at the same
// moments; each lapsed lease is expired once, by one of them.
func TestReplicasReapTogether(t *testing.T) {
	h, e := replicas(t, "spend", 1_000_000, "24h", 3)
	ctx := context.Background()
	const n = 60
	for i := range n {
		res, err := e[i%3].Begin(ctx, ledger.BeginRequest{IdempotencyKey: "r" + itoa(int64(i)), EffectType: "shared.spend",
			AgentID: "agent-" + itoa(int64(i%2)), EstimatedCostMicros: i64(1), LeaseSeconds: 30})
		if err != nil {
			t.Fatalf("err != nil: begin %d: %v %+v", i, err, res)
		}
		if res.Decision != ledger.DecisionExecute {
			t.Fatalf("res.Decision != ledger.DecisionExecute: begin %d: %v %+v", i, err, res)
		}
	}
	h.clock.Advance(time.Minute)
	var wg sync.WaitGroup
	var reaped atomic.Int64
	for _, eng := range append(e, h.eng) {
		for range 2 {
			wg.Go(func() {
				k, err := eng.Reap(ctx)
				if err != nil {
					t.Error(err)
				}
				reaped.Add(int64(k))
			})
		}
	}
	wg.Wait()
	if got := reaped.Load(); got != n {
		t.Fatalf("the reapers expired %d leases between them, want %d, each once", got, n)
	}
	assertStateCounts(t, h)
	for _, agent := range []string{"agent-0", "agent-1"} {
		res, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "after-" + agent, EffectType: "shared.spend", AgentID: agent, EstimatedCostMicros: i64(1)})
		if err != nil {
			t.Fatal(err)
		}
		if w := res.IntegrationWarning; w == nil || w.UnreportedCount != n/2 {
			t.Fatalf("%s: integration warning %+v, want %d unreported", agent, w, n/2)
		}
	}
}

// TestSweepsUnderLoadKeepInvariants runs the reaper (and, in a second
// round, retention) while many goroutines begin, report and resolve on a
// small set of keys and the clock moves: sweeps share batches with the
// callers' ops. Afterwards the ceilings equal what the effects hold and the
// persisted state counts equal the listing.
func TestSweepsUnderLoadKeepInvariants(t *testing.T) {
	for _, purge := range []bool{false, true} {
		t.Run(map[bool]string{false: "reaper", true: "reaper and retention"}[purge], func(t *testing.T) {
			h := newHarness(t, testRules())
			if purge {
				h.eng.Close(context.Background())
				h.defs.Retention = time.Minute
				h.open()
			}
			ctx := context.Background()
			stop := make(chan struct{})
			var sweeper sync.WaitGroup
			var reaped, purged int
			sweeper.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					// The clock moves at most 9.7 h in all, inside the
					// ceilings' 24 h window, however many sweeps a slow
					// machine fits in, so the check below stays exact.
					if i < 5000 {
						h.clock.Advance(7 * time.Second)
					}
					n, err := h.eng.Reap(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					reaped += n
					if purge && i%3 == 0 {
						n, err := h.eng.Purge(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						purged += n
					}
				}
			})
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					for i := range 50 {
						res, err := h.eng.Begin(ctx, pay("sweep:"+itoa(int64((g*7+i)%15)), "acct_"+itoa(int64(i%3)), 5_000_000))
						if err != nil {
							t.Error(err)
							return
						}
						// "": left to the reaper
						settle(h, res, []ledger.Outcome{ledger.OutcomeFailed, ledger.OutcomeSucceeded, "", ledger.OutcomeUnknown}[(g+i)%4])
					}
				})
			}
			wg.Wait()
			close(stop)
			sweeper.Wait()
			if reaped == 0 {
				t.Fatalf("reaped == 0: the sweeps did nothing (reaped %d, purged %d): the test would prove nothing", reaped, purged)
			}
			if purge && purged == 0 {
				t.Fatalf("purge && purged == 0: the sweeps did nothing (reaped %d, purged %d): the test would prove nothing", reaped, purged)
			}
			// A begin decided before the clock's last step but committed
			// after the last reap's scan holds a lease that has run out and
			// that no reap has seen yet: the listing shows it expired, the
			// counts pending, until the next reap (as StateCounts says).
			// One more reap, with the clock still, settles that.
			if _, err := h.eng.Reap(ctx); err != nil {
				t.Fatal(err)
			}
			assertStateCounts(t, h)
			if purge {
				return // purged effects leave their spend in the window
			}
			page, err := h.eng.List(ctx, ledger.Filter{Namespace: "default", Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			held := heldSpend(page.Effects)
			if b := budgetsByName(t, h); b["daily-spend"] != held {
				t.Fatalf("daily-spend counted %d, effects hold %d", b["daily-spend"], held)
			}
		})
	}
}

// settle acts on a begin's answer as a caller would: an execute is
// reported with outcome ("" leaves it to the reaper), a blocked effect is
// resolved failed by an operator.
func settle(h *harness, res *ledger.BeginResult, outcome ledger.Outcome) {
	ctx := context.Background()
	switch {
	case res.Decision == ledger.DecisionExecute && outcome != "":
		h.eng.Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Attempt: res.Attempt, Outcome: outcome})
	case res.Decision == ledger.DecisionBlocked:
		h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: res.EffectID, Resolution: ledger.OutcomeFailed, ResolvedBy: "op"})
	}
}

// heldSpend is what effects hold against a money ceiling: the estimates
// of those pending, indeterminate or succeeded.
func heldSpend(effects []ledger.Effect) int64 {
	var held int64
	for _, e := range effects {
		if e.State == ledger.StatePending || e.State == ledger.StateIndeterminate || e.State == ledger.StateSucceeded {
			held += *e.EstimatedCostMicros
		}
	}
	return held
}

// TestLargeBatchesAreSplit: many concurrent reports each carrying the
// largest result allowed add up to more than one store transaction may
// hold; the writer splits them over several commits and every one
// succeeds.
func TestLargeBatchesAreSplit(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	const n = 120 // about 120 x 2 x 64 KiB: several times Badger's limit
	ids := make([]string, n)
	for i := range n {
		res, err := h.eng.Begin(ctx, pay("big:"+itoa(int64(i)), "acct_1", 1))
		if err != nil {
			t.Fatalf("err != nil: begin %d: %v %+v", i, err, res)
		}
		if res.Decision != ledger.DecisionExecute {
			t.Fatalf("res.Decision != ledger.DecisionExecute: begin %d: %v %+v", i, err, res)
		}
		ids[i] = res.EffectID
	}
	result := []byte(`"` + strings.Repeat("r", ledger.MaxResultBytes-2) + `"`)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			<-start
			if _, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: id, Outcome: ledger.OutcomeSucceeded, Result: result}); err != nil {
				t.Errorf("report %s: %v", id, err)
			}
		})
	}
	close(start)
	wg.Wait()
	page, err := h.eng.List(ctx, ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, e := range page.Effects {
		if e.State == ledger.StateSucceeded && len(e.Result) == len(result) {
			succeeded++
		}
	}
	if succeeded != n {
		t.Fatalf("%d of %d reports recorded with their result", succeeded, n)
	}
}

// TestNeighbouringWindowKeysAreOneActionUnderRace: the proxy's content keys
// for two windows (each begin naming the other as SameAs), begun by many
// goroutines at once on either side of a window's turn: one execute; and
// an effect under a neighbour's key older than the window does not count.
func TestNeighbouringWindowKeysAreOneActionUnderRace(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	req := func(key, other string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "email.send", AgentID: "bot",
			SameAs: []string{other}, SameWithin: time.Hour}
	}
	var wg sync.WaitGroup
	var executes atomic.Int32
	for i := range 64 {
		wg.Go(func() {
			r := req("w:before", "w:after")
			if i%2 == 1 {
				r = req("w:after", "w:before")
			}
			res, err := h.eng.Begin(ctx, r)
			if err != nil {
				t.Error(err)
				return
			}
			if res.Decision == ledger.DecisionExecute {
				executes.Add(1)
			}
		})
	}
	wg.Wait()
	if n := executes.Load(); n != 1 {
		t.Fatalf("%d executes, want 1", n)
	}
	// An hour later the neighbour's effect no longer makes it the same.
	first := h.beginWant(req("x:before", "x:after"), ledger.DecisionExecute)
	h.clock.Advance(time.Hour)
	if r := h.beginWant(req("x:after", "x:before"), ledger.DecisionExecute); r.EffectID == first.EffectID {
		t.Fatal("an effect a window old was taken as the same action")
	}
}
