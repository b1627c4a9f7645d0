package ledger_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// thresholdEvents returns the budget.threshold events queued so far, as
// "ceiling threshold" strings, sorted.
func thresholdEvents(t *testing.T, h *harness) []string {
	t.Helper()
	all, err := h.eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range all {
		if en.Event.Type != ledger.EventBudgetThreshold {
			continue
		}
		b := en.Event.Budget
		if b == nil {
			t.Fatalf("b == nil: a threshold event without its ceiling: %+v", en.Event)
		}
		if en.Event.Namespace == "" {
			t.Fatalf("en.Event.Namespace == \"\": a threshold event without its ceiling: %+v", en.Event)
		}
		if en.Event.ID == "" {
			t.Fatalf("en.Event.ID == \"\": a threshold event without its ceiling: %+v", en.Event)
		}
		out = append(out, b.Ceiling+" "+fmtF(b.Threshold))
	}
	sort.Strings(out)
	return out
}

func fmtF(f float64) string {
	switch f {
	case 0.5:
		return "0.5"
	case 0.8:
		return "0.8"
	case 1:
		return "1"
	}
	return "?"
}

// withThresholds reopens h's engine with budget thresholds.
func withThresholds(h *harness, ts ...float64) {
	h.t.Helper()
	if err := h.eng.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.thresholds = ts
	h.open()
}

// drain delivers every queued outbox entry (as a worker would), so that
// the next check sees only what is new.
func drain(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	for {
		es, err := h.eng.ClaimEvents(ctx, "test", time.Minute, 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			return
		}
		for _, en := range es {
			if err := h.eng.EventDelivered(ctx, en.Sink, en.Event.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestBudgetThresholdsFireExactlyOncePerWindowUnder64ConcurrentSpenders(t *testing.T) {
	rules := []ledger.Rule{{Match: "spend.*", Ceilings: []ledger.Ceiling{
		{Name: "total", LimitMicros: i64(100), Window: "24h", Per: "global"},
		{Name: "calls", LimitCount: i64(150), Window: "24h", Per: "global"},
	}}}
	h := newHarness(t, rules)
	withThresholds(h, 1.0, 0.5, 0.8)
	ctx := context.Background()
	spend := func(round string) (executed int, ids []string) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for g := range 64 {
			wg.Go(func() {
				for j := range 3 {
					res, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: round + ":" + itoa(int64(g*10+j)), EffectType: "spend.money", EstimatedCostMicros: i64(1)})
					if err != nil {
						t.Error(err)
						return
					}
					if res.Decision == ledger.DecisionExecute {
						mu.Lock()
						executed++
						ids = append(ids, res.EffectID)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		return executed, ids
	}
	n, ids := spend("a")
	if n != 100 {
		t.Fatalf("%d executed, want the limit of 100", n)
	}
	want := []string{"calls 0.5", "total 0.5", "total 0.8", "total 1"}
	if got := thresholdEvents(t, h); !equal(got, want) {
		t.Fatalf("threshold events %v, want %v (each exactly once)", got, want)
	}
	drain(t, h)

	// Spend falls back below every threshold and rises again in the same
	// window: nothing fires again.
	for _, id := range ids[:60] {
		h.report(id, ledger.OutcomeFailed)
	}
	if testBackend != "postgres" {
		// A restart forgets nothing. (On a shared store a restarted engine
		// is a new replica, and the old one's unspent grant counts until
		// it is reclaimed or purged: its thresholds may fire early.)
		h.reopen()
	}
	if n, _ := spend("b"); n != 60 {
		t.Fatalf("%d executed after the release, want 60", n)
	}
	if got := thresholdEvents(t, h); len(got) != 0 {
		t.Fatalf("fired again in the same window: %v", got)
	}

	// A day later the window is new: each fires once more.
	h.clock.Advance(25 * time.Hour)
	if n, _ := spend("c"); n != 100 {
		t.Fatalf("%d executed in the new window", n)
	}
	if got := thresholdEvents(t, h); !equal(got, want) {
		t.Fatalf("in the new window: %v, want %v", got, want)
	}
}

func TestAThresholdIsPerScopeAndNeedsNoCost(t *testing.T) {
	rules := []ledger.Rule{{Match: "email.send", Ceilings: []ledger.Ceiling{
		{Name: "per-agent", LimitCount: i64(4), Window: "1h", Per: "agent"},
	}}}
	h := newHarness(t, rules)
	withThresholds(h, 0.5)
	for _, agent := range []string{"a", "b"} {
		for i := range 3 {
			h.beginWant(email(agent+itoa(int64(i)), agent), ledger.DecisionExecute)
		}
	}
	all, _ := h.eng.Outbox(context.Background(), false)
	scopes := map[string]int{}
	for _, en := range all {
		if en.Event.Type == ledger.EventBudgetThreshold {
			scopes[en.Event.Budget.Scope]++
			if en.Event.AgentID == "" {
				t.Fatalf("en.Event.AgentID == \"\": event: %+v %+v", en.Event, en.Event.Budget)
			}
			if en.Event.EffectType != "email.send" {
				t.Fatalf("en.Event.EffectType != \"email.send\": event: %+v %+v", en.Event, en.Event.Budget)
			}
			if en.Event.Budget.Counted != 2 {
				t.Fatalf("en.Event.Budget.Counted != 2: event: %+v %+v", en.Event, en.Event.Budget)
			}
		}
	}
	if len(scopes) != 2 {
		t.Fatalf("len(scopes) != 2: per scope: %v", scopes)
	}
	if scopes["a"] != 1 {
		t.Fatalf("scopes[\"a\"] != 1: per scope: %v", scopes)
	}
	if scopes["b"] != 1 {
		t.Fatalf("scopes[\"b\"] != 1: per scope: %v", scopes)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
