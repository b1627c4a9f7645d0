package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestACorrectedForwardClockJumpForgetsNoSpend: $1000 of a $1000/h
// ceiling is spent, the clock jumps two hours ahead (a begin, and in half
// the cases the retention sweep, run on that reading), then it is
// corrected. Within the
// real hour nothing more goes through: the spend counted before the jump
// still counts, and so does what was begun on the wrong reading. On one
// engine (both backends) and, on PostgreSQL, across two.
func TestACorrectedForwardClockJumpForgetsNoSpend(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		purge bool
	}{{"one engine", 1, false}, {"one engine, retention run on the wrong reading", 1, true},
		{"two engines", 2, false}, {"two engines, retention run on the wrong reading", 2, true}} {
		n := tc.n
		t.Run(tc.name, func(t *testing.T) {
			if n > 1 && testBackend != "postgres" {
				t.Skip("only a shared store (PostgreSQL) has several engines")
			}
			h, e := fleet(t, globalCeiling(1000, "1h"), n)
			last := e[len(e)-1]
			a := fleetBeginWant(t, e[0], spend("a", "bot", "x", 1000), ledger.DecisionExecute)
			fleetReport(t, e[0], a, ledger.OutcomeSucceeded, nil)
			h.clock.Advance(2 * time.Hour)
			fleetBeginWant(t, last, spend("b", "bot", "x", 1), ledger.DecisionExecute) // as far as this reading knows, the hour has passed
			if tc.purge {
				if _, err := last.Purge(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			h.clock.Advance(-2*time.Hour + time.Minute) // corrected: a minute after a
			for _, eng := range e {
				res := fleetBeginWant(t, eng, spend("c", "bot", "x", 999), ledger.DecisionDenied)
				if res.Ceiling == nil {
					t.Errorf("res.Ceiling == nil: c refused with %+v, want 1001 counted", res.Ceiling)
				} else if res.Ceiling.Counted != 1001 {
					t.Errorf("res.Ceiling.Counted != 1001: c refused with %+v, want 1001 counted", res.Ceiling)
				}
			}
			if got := counted(t, h, "fleet"); got != 1001 {
				t.Errorf("after the correction the ceiling counts %d, want 1001", got)
			}
			h.clock.Advance(time.Hour) // a has left the window; b, stamped ahead, has not
			fleetBeginWant(t, last, spend("d", "bot", "x", 999), ledger.DecisionExecute)
			fleetBeginWant(t, e[0], spend("e", "bot", "x", 1), ledger.DecisionDenied)
		})
	}
}
