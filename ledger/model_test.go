package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// modelKey is the test's own idea of one key's state.
type modelKey struct {
	effectID string
	state    ledger.State
	attempt  int
	approval string
	approved bool
	big      bool
}

// TestModelUnderConcurrency runs goroutines that each own their keys and
// agent, mixing begin, report, resolve, approve and reject at random. Each
// goroutine predicts every answer from a simple model of the state machine
// and of its per-agent ceiling, and the ledger must agree at every step and
// at the end. All of it goes through the one writer at once, under -race.
func TestModelUnderConcurrency(t *testing.T) {
	const limit = 6
	rules := []ledger.Rule{{Match: "model.*", ApprovalThresholdMicros: i64(100),
		Ceilings: []ledger.Ceiling{{Name: "per-agent", LimitCount: i64(limit), Window: "24h", Per: "agent"}}}}
	h := newHarness(t, rules)
	ctx := context.Background()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	models := make([]map[string]*modelKey, 8)
	for g := range models {
		models[g] = map[string]*modelKey{}
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			agent := fmt.Sprint("agent-", g)
			keys := models[g]
			held := 0 // executes holding a reservation in this agent's ceiling
			for i := range 6 {
				keys[fmt.Sprint(agent, "/k", i)] = &modelKey{big: i%3 == 0}
			}
			names := make([]string, 0, len(keys))
			for k := range keys {
				names = append(names, k)
			}
			for step := range 300 {
				name := names[rng.IntN(len(names))]
				m := keys[name]
				fail := func(format string, args ...any) {
					t.Errorf("agent %d step %d key %s (%+v): %s", g, step, name, *m, fmt.Sprintf(format, args...))
				}
				switch op := rng.IntN(5); {
				case op <= 1: // begin
					cost := int64(1)
					if m.big {
						cost = 200
					}
					res, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: name, EffectType: "model.op", AgentID: agent, EstimatedCostMicros: &cost})
					if err != nil {
						fail("begin: %v", err)
						return
					}
					want := ledger.DecisionExecute
					switch m.state {
					case ledger.StatePending:
						want = ledger.DecisionInFlight
					case ledger.StateSucceeded:
						want = ledger.DecisionDuplicate
					case ledger.StateIndeterminate:
						want = ledger.DecisionBlocked
					case ledger.StateAwaitingApproval:
						want = ledger.DecisionApprovalRequired
					case ledger.StateRejected:
						want = ledger.DecisionDenied
					default: // new, failed, approved: evaluated
						switch {
						case held+1 > limit:
							want = ledger.DecisionDenied
						case m.big && !m.approved:
							want = ledger.DecisionApprovalRequired
						}
					}
					if res.Decision != want {
						fail("begin: got %s (%s), model says %s", res.Decision, res.Reason, want)
						return
					}
					switch {
					case want == ledger.DecisionExecute:
						m.effectID, m.state, m.attempt = res.EffectID, ledger.StatePending, m.attempt+1
						m.approved = false // an approval is for one execute
						held++
						if res.Attempt != m.attempt {
							fail("attempt %d, model %d", res.Attempt, m.attempt)
						}
					case want == ledger.DecisionApprovalRequired && m.state != ledger.StateAwaitingApproval:
						m.effectID, m.state, m.approval = res.EffectID, ledger.StateAwaitingApproval, res.ApprovalID
					case want == ledger.DecisionApprovalRequired && res.ApprovalID != m.approval:
						fail("approval id changed")
					}
				case op == 2 && m.state == ledger.StatePending: // report
					o := []ledger.Outcome{ledger.OutcomeSucceeded, ledger.OutcomeFailed, ledger.OutcomeUnknown}[rng.IntN(3)]
					eff, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: m.effectID, Outcome: o, Attempt: m.attempt})
					if err != nil {
						fail("report: %v", err)
						return
					}
					m.state = map[ledger.Outcome]ledger.State{ledger.OutcomeSucceeded: ledger.StateSucceeded,
						ledger.OutcomeFailed: ledger.StateFailed, ledger.OutcomeUnknown: ledger.StateIndeterminate}[o]
					if o == ledger.OutcomeFailed {
						held--
					}
					if eff.State != m.state {
						fail("report: state %s", eff.State)
					}
				case op == 3 && m.state == ledger.StateIndeterminate: // resolve
					o := []ledger.Outcome{ledger.OutcomeSucceeded, ledger.OutcomeFailed}[rng.IntN(2)]
					eff, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: m.effectID, Resolution: o, ResolvedBy: agent})
					if err != nil {
						fail("resolve: %v", err)
						return
					}
					m.state = map[ledger.Outcome]ledger.State{ledger.OutcomeSucceeded: ledger.StateSucceeded, ledger.OutcomeFailed: ledger.StateFailed}[o]
					if o == ledger.OutcomeFailed {
						held--
					}
					if eff.State != m.state {
						fail("resolve: state %s", eff.State)
					}
				case op == 4 && m.state == ledger.StateAwaitingApproval: // decide
					var err error
					if rng.IntN(4) == 0 {
						_, err = h.eng.Reject(ctx, m.approval, "op", "")
						m.state = ledger.StateRejected
					} else {
						_, err = h.eng.Approve(ctx, m.approval, "op", "")
						m.state, m.approved = ledger.StateApproved, true
					}
					if err != nil {
						fail("decide: %v", err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	page, err := h.eng.List(ctx, ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]ledger.Effect{}
	for _, e := range page.Effects {
		got[e.IdempotencyKey] = e
	}
	n := 0
	for _, keys := range models {
		for name, m := range keys {
			e, ok := got[name]
			if m.state == "" {
				if ok {
					t.Errorf("%s: ledger has %+v, model has nothing", name, e)
				}
				continue
			}
			n++
			if !ok {
				t.Errorf("!ok: %s: ledger %s attempt %d, model %s attempt %d", name, e.State, e.Attempt, m.state, m.attempt)
			} else if e.State != m.state {
				t.Errorf("e.State != m.state: %s: ledger %s attempt %d, model %s attempt %d", name, e.State, e.Attempt, m.state, m.attempt)
			} else if e.Attempt != m.attempt {
				t.Errorf("e.Attempt != m.attempt: %s: ledger %s attempt %d, model %s attempt %d", name, e.State, e.Attempt, m.state, m.attempt)
			} else if e.EffectID != m.effectID {
				t.Errorf("e.EffectID != m.effectID: %s: ledger %s attempt %d, model %s attempt %d", name, e.State, e.Attempt, m.state, m.attempt)
			}
		}
	}
	if n != len(page.Effects) {
		t.Errorf("ledger has %d effects, model %d", len(page.Effects), n)
	}
	assertStateCounts(t, h)
}
