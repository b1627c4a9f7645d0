package main

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestTwoCallsWaitingOnThePageForOneKeyExecuteOnce (review rev37): two
// 2025-11-25 calls of the same agent with the same key wait on the
// approval's page at once (two sessions, on one serve with Badger and on
// two serves sharing a PostgreSQL ledger); an operator approves while both
// wait; both look again when their clients answer. Exactly one gets
// execute, the other in_flight (the first holds the lease): a look again
// is the agent's idempotent begin, never a second execute.
func TestTwoCallsWaitingOnThePageForOneKeyExecuteOnce(t *testing.T) {
	run := func(t *testing.T, a, b *server) {
		var asked sync.WaitGroup
		asked.Add(2)
		var once sync.Once
		both := make(chan struct{})
		answer := func(p *sdk.ElicitParams) *sdk.ElicitResult {
			asked.Done()
			once.Do(func() {
				go func() { asked.Wait(); approve(t, a, approvalIDOf(p.URL)); close(both) }()
			})
			<-both // both calls wait until the operator approved
			return &sdk.ElicitResult{Action: "accept"}
		}
		clients := []*sdk.ClientSession{elicitingClient(t, a, "2025-11-25", answer, false), elicitingClient(t, b, "2025-11-25", answer, false)}
		pay := map[string]any{"idempotency_key": "inv:twice", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
		got := make([]string, 2)
		var wg sync.WaitGroup
		for i, cs := range clients {
			wg.Go(func() { got[i], _ = structured(t, callResult(t, cs, pay))["decision"].(string) })
		}
		wg.Wait()
		slices.Sort(got)
		if diff := cmp.Diff([]string{"execute", "in_flight"}, got); diff != "" {
			t.Errorf("two waiting calls for one key, approved meanwhile (-want +got):\n%s", diff)
		}
	}
	onOneAndTwoServes(t, "convtwice_", run)
}

// onOneAndTwoServes runs run on one serve with Badger (a and b the same),
// and on two serves sharing a PostgreSQL ledger (schema named from
// prefix), each with conversationConfig and the console's address.
func onOneAndTwoServes(t *testing.T, prefix string, run func(t *testing.T, a, b *server)) {
	cfg := conversationConfig("https://ratchet.example.com")
	t.Run("badger", func(t *testing.T) {
		s := startServe(t, filepath.Join(t.TempDir(), "data"), cfg)
		run(t, s, s)
	})
	t.Run("postgres", func(t *testing.T) {
		shared := sharedLedger(t, prefix)
		run(t, startServe(t, filepath.Join(t.TempDir(), "a"), shared+cfg), startServe(t, filepath.Join(t.TempDir(), "b"), shared+cfg))
	})
}
