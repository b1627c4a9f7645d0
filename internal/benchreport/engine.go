package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// result is one measured configuration.
type result struct {
	perSec   float64 // operations (pairs or records) per second
	p50, p99 time.Duration
	ops      int
	// cpu is the CPU time the whole process (load generator included)
	// used per operation, and busy how many cores it kept busy on
	// average: together they tell a run bound by CPU from one bound by
	// waiting (for the disk, or for a serial stage).
	cpu  time.Duration
	busy float64
}

// latencies collects per-call latencies from many goroutines.
type latencies struct {
	mu  sync.Mutex
	all []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.all = append(l.all, d...)
	l.mu.Unlock()
}

func (l *latencies) pct(p float64) time.Duration {
	if len(l.all) == 0 {
		return 0
	}
	slices.Sort(l.all)
	return l.all[min(len(l.all)-1, int(float64(len(l.all))*p))]
}

// load runs callers that each repeat op (given a fresh sequence number)
// until d has passed or, when limit > 0, limit operations are done, and
// measures the rate and each op's latency. The first error stops a caller
// and is returned.
func load(callers int, d time.Duration, limit int64, op func(k int64) error) (result, error) {
	var n atomic.Int64
	var lat latencies
	var firstErr atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for range callers {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(deadline) && (limit == 0 || n.Load() < limit) {
				t0 := time.Now()
				if err := op(keySeq.Add(1)); err != nil {
					firstErr.CompareAndSwap(nil, err)
					break
				}
				mine = append(mine, time.Since(t0))
				n.Add(1)
			}
			lat.add(mine)
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, err
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	ops := n.Load()
	return result{perSec: float64(ops) / elapsed.Seconds(), p50: lat.pct(0.5), p99: lat.pct(0.99), ops: int(ops),
		cpu: cpu / time.Duration(max(ops, 1)), busy: cpu.Seconds() / elapsed.Seconds()}, nil
}

// baseline is the disk's physical limit for this workload: callers append
// 200-byte records to one file through a single writer that fsyncs each
// batch once (group commit), answering every caller after its fsync.
func baseline(dir string, callers int, d time.Duration) (result, error) {
	f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("baseline-%d.log", callers)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return result{}, err
	}
	defer f.Close()
	type req struct{ done chan struct{} }
	reqs := make(chan req, 4096)
	stop := make(chan struct{})
	go func() {
		rec := make([]byte, 200)
		var batch []req
		for {
			select {
			case r := <-reqs:
				batch = append(batch[:0], r)
			case <-stop:
				return
			}
		drain:
			for {
				select {
				case r := <-reqs:
					batch = append(batch, r)
				default:
					break drain
				}
			}
			buf := make([]byte, 0, len(batch)*len(rec))
			for range batch {
				buf = append(buf, rec...)
			}
			f.Write(buf)
			f.Sync()
			for _, r := range batch {
				close(r.done)
			}
		}
	}()
	r, err := load(callers, d, 0, func(int64) error {
		q := req{done: make(chan struct{})}
		reqs <- q
		<-q.done
		return nil
	})
	close(stop)
	return r, err
}

func i64(v int64) *int64 { return &v }

// benchRules is the benchmark policy: a global spend ceiling and a
// per-counterparty ceiling, both large enough never to refuse, so every
// begin reads and writes both hot counters.
func benchRules() []ledger.Rule {
	return []ledger.Rule{{Match: "bench.*", Ceilings: []ledger.Ceiling{
		{Name: "global-spend", LimitMicros: i64(1 << 60), Window: "24h", Per: "global"},
		{Name: "per-counterparty", LimitMicros: i64(1 << 60), Window: "24h", Per: "dimension:counterparty"},
	}}}
}

// openEngine opens an engine on dir.
func openEngine(dir string, sync bool) (*ledger.Engine, time.Duration, error) {
	eng, _, open, err := openEngineStore(dir, sync)
	return eng, open, err
}

// openEngineStore is openEngine, also returning the engine's store.
func openEngineStore(dir string, sync bool) (*ledger.Engine, *badgerstore.Store, time.Duration, error) {
	t0 := time.Now()
	st, err := badgerstore.Open(dir, &badgerstore.Options{MinFreeBytes: -1, NoSync: !sync})
	if err != nil {
		return nil, nil, 0, err
	}
	// The key sits where "ratchet serve --data-dir" of the parent looks for
	// it, so the scale section's server opens the ledger with it.
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(filepath.Dir(dir), "hmac.key"))
	if err != nil {
		st.Close()
		return nil, nil, 0, err
	}
	eng, err := startEngine(st, secret)
	if err != nil {
		return nil, nil, 0, err
	}
	return eng, st, time.Since(t0), nil
}

// startEngine starts an engine with the benchmark's policy on st, without
// background loops, and with the audit log on, as ratchet serve runs it by
// default; st is closed if it cannot start.
func startEngine(st ledger.Store, secret []byte) (*ledger.Engine, error) {
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, Policies: benchRules(), ReapInterval: -1, PurgeInterval: -1, Audit: true})
	if err != nil {
		st.Close()
		return nil, err
	}
	return eng, nil
}

var keySeq atomic.Int64

// keyPrefix starts every benchmark key; worker processes sharing a ledger
// each get their own.
var keyPrefix = "bench:"

// pairs runs callers that each begin and report distinct effects for d,
// or until limit pairs are done when limit > 0; the latencies are of the
// begins. A refusal is a bug in the benchmark and stops it.
func pairs(eng *ledger.Engine, callers int, d time.Duration, limit int64) result {
	return pairsInto(&latencies{}, eng, callers, d, limit)
}

// pairsInto is pairs adding the begins' latencies to lat, whose
// percentiles (of every run added to it) the result carries.
func pairsInto(lat *latencies, eng *ledger.Engine, callers int, d time.Duration, limit int64) result {
	ctx := context.Background()
	cost := int64(1000)
	r, err := load(callers, d, limit, func(k int64) error {
		t0 := time.Now()
		res, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprint(keyPrefix, k), EffectType: "bench.charge",
			AgentID: "bench", EstimatedCostMicros: &cost, Payload: []byte(`{"amount":1000,"currency":"usd"}`),
			Dimensions: map[string]string{"counterparty": fmt.Sprint("acct_", k%50)}})
		lat.add([]time.Duration{time.Since(t0)})
		if err != nil || res.Decision != ledger.DecisionExecute {
			return fmt.Errorf("begin: %v %+v", err, res)
		}
		_, err = eng.Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded, Result: []byte(`{"id":"pi_1"}`)})
		return err
	})
	if err != nil {
		fail(err)
	}
	r.p50, r.p99 = lat.pct(0.5), lat.pct(0.99)
	return r
}
