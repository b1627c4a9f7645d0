package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// BenchmarkBeginReport measures durable begin+report pairs from 64
// concurrent callers on distinct keys, with a global and a per-counterparty
// ceiling on every effect (the hot counters). make bench runs the full
// comparison against the disk's limit (internal/benchreport).
func BenchmarkBeginReport(b *testing.B) {
	rules := []ledger.Rule{{Match: "bench.*", Ceilings: []ledger.Ceiling{
		{Name: "global-spend", LimitMicros: i64(1 << 60), Window: "24h", Per: "global"},
		{Name: "per-counterparty", LimitMicros: i64(1 << 60), Window: "24h", Per: "dimension:counterparty"},
	}}}
	h := newHarness(b, rules)
	ctx := context.Background()
	var seq atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/64 + 1
	for c := range 64 {
		wg.Go(func() {
			cost := int64(1000)
			for range per {
				k := seq.Add(1)
				res, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprint("bench:", k), EffectType: "bench.charge",
					AgentID: "bench", EstimatedCostMicros: &cost, Payload: []byte(`{"amount":1000}`),
					Dimensions: map[string]string{"counterparty": fmt.Sprint("acct_", (int(k)+c)%50)}})
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
