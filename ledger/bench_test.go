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
func BenchmarkBeginReport(b *testing.B) { benchBeginReport(b, 64) }

// BenchmarkBeginReport16 is BenchmarkBeginReport from the adapters' 16
// callers (batches of a few ops: each batch's fixed cost shows more).
func BenchmarkBeginReport16(b *testing.B) { benchBeginReport(b, 16) }

func benchBeginReport(b *testing.B, callers int) {
	rules := []ledger.Rule{{Match: "bench.*", Ceilings: []ledger.Ceiling{
		{Name: "global-spend", LimitMicros: i64(1 << 60), Window: "24h", Per: "global"},
		{Name: "per-counterparty", LimitMicros: i64(1 << 60), Window: "24h", Per: "dimension:counterparty"},
	}}}
	h := newHarness(b, rules)
	ctx := context.Background()
	var seq atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/callers + 1
	for c := range callers {
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

// BenchmarkBeginReportSerial is BenchmarkBeginReport from one caller with
// syncing off: every batch holds one op, whatever the machine's load, so
// the instructions a pair executes repeat from run to run. It is the A/B
// figure for changes to what one op costs (docs/design.md):
//
//	go test -c -o /tmp/ledger.test ./ledger
//	GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind /tmp/ledger.test -test.run XXX -test.bench BenchmarkBeginReportSerial -test.benchtime 2000x
//
// once with 2000x and once with 4000x; the difference over 2000 is one pair.
func BenchmarkBeginReportSerial(b *testing.B) { benchBeginReportSerial(b, false) }

// BenchmarkBeginReportSerialDurable is BenchmarkBeginReportSerial with
// syncing on, as Ratchet runs: each op a batch through the store's log
// (record, write, fdatasync, then Badger's commit), so it shows what a
// batch costs whatever its ops, the part larger batches share out. Under
// callgrind the fdatasyncs are the kernel's, not counted.
func BenchmarkBeginReportSerialDurable(b *testing.B) { benchBeginReportSerial(b, true) }

func benchBeginReportSerial(b *testing.B, durable bool) {
	rules := []ledger.Rule{{Match: "bench.*", Ceilings: []ledger.Ceiling{
		{Name: "global-spend", LimitMicros: i64(1 << 60), Window: "24h", Per: "global"},
		{Name: "per-counterparty", LimitMicros: i64(1 << 60), Window: "24h", Per: "dimension:counterparty"},
	}}}
	h := newHarness(b, rules)
	if !durable {
		h.opts.NoSync = true
		h.reopen()
	}
	ctx := context.Background()
	cost := int64(1000)
	b.ResetTimer()
	for k := range b.N {
		res, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprint("bench:", k), EffectType: "bench.charge",
			AgentID: "bench", EstimatedCostMicros: &cost, Payload: []byte(`{"amount":1000,"currency":"usd"}`),
			Dimensions: map[string]string{"counterparty": fmt.Sprint("acct_", k%50)}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded, Result: []byte(`{"id":"pi_1"}`)}); err != nil {
			b.Fatal(err)
		}
	}
}
