package ledger_test

// TEMPORARY (p99 brief): where the slowest begins' time goes.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

type beginRec struct {
	call, ret time.Time
	tr        ledger.OpTrace
}

func TestP99Trace(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("P99_SECS"))
	if secs == 0 {
		t.Skip("P99_SECS unset")
	}
	callers := 64
	if c, _ := strconv.Atoi(os.Getenv("P99_CALLERS")); c > 0 {
		callers = c
	}
	dir := t.TempDir()
	st, err := badgerstore.Open(dir, &badgerstore.Options{MinFreeBytes: -1, NoSync: os.Getenv("P99_NOSYNC") != ""})
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := ledger.LoadOrCreateSecret(dir + "/hmac.key")
	rules := []ledger.Rule{{Match: "bench.*", Ceilings: []ledger.Ceiling{
		{Name: "global-spend", LimitMicros: i64(1 << 60), Window: "24h", Per: "global"},
		{Name: "per-counterparty", LimitMicros: i64(1 << 60), Window: "24h", Per: "dimension:counterparty"},
	}}}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, Policies: rules, ReapInterval: -1, PurgeInterval: -1, Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	ledger.Batches = make([]ledger.BatchTrace, 40000)
	recs := make([]beginRec, 250000)
	var nrec atomic.Int64
	var seq atomic.Int64
	var measuring atomic.Bool
	stop := make(chan struct{})
	var wg sync.WaitGroup
	cost := int64(1000)
	for range callers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := seq.Add(1)
				ctx := context.Background()
				var r *beginRec
				if measuring.Load() {
					if i := nrec.Add(1) - 1; int(i) < len(recs) {
						r = &recs[i]
						ctx = ledger.WithOpTrace(ctx, &r.tr)
					}
				}
				t0 := time.Now()
				res, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprint("bench:", k), EffectType: "bench.charge",
					AgentID: "bench", EstimatedCostMicros: &cost, Payload: []byte(`{"amount":1000,"currency":"usd"}`),
					Dimensions: map[string]string{"counterparty": fmt.Sprint("acct_", k%50)}})
				if r != nil {
					r.call, r.ret = t0, time.Now()
				}
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := eng.Report(context.Background(), ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded, Result: []byte(`{"id":"pi_1"}`)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	warm, _ := strconv.Atoi(os.Getenv("P99_WARM"))
	time.Sleep(time.Duration(max(warm, 1)) * time.Second)
	names := []string{"/sched/latencies:seconds", "/sched/pauses/total/gc:seconds", "/gc/cycles/total:gc-cycles", "/gc/heap/allocs:bytes", "/cpu/classes/gc/total:cpu-seconds", "/cpu/classes/total:cpu-seconds"}
	before := make([]metrics.Sample, len(names))
	for i, n := range names {
		before[i].Name = n
	}
	metrics.Read(before)
	ledger.TraceOn = true
	b0 := ledger.BatchCount()
	measuring.Store(true)
	if tf := os.Getenv("P99_TRACE"); tf != "" {
		f, _ := os.Create(tf)
		trace.Start(f)
		defer f.Close()
	}
	tStart := time.Now()
	time.Sleep(time.Duration(secs) * time.Second)
	measuring.Store(false)
	if os.Getenv("P99_TRACE") != "" {
		trace.Stop()
	}
	tEnd := time.Now()
	after := make([]metrics.Sample, len(names))
	for i, n := range names {
		after[i].Name = n
	}
	metrics.Read(after)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	close(stop)
	wg.Wait()
	ledger.TraceOn = false
	b1 := ledger.BatchCount()
	n := min(int(nrec.Load()), len(recs))
	rs := recs[:n]
	rs = slices.DeleteFunc(rs, func(r beginRec) bool {
		return r.ret.IsZero() || r.tr.Recv.IsZero() || r.tr.Batch <= b0 || r.tr.Batch >= int64(len(ledger.Batches))
	})
	fmt.Printf("begins %d in %v (%.0f/s), batches %d (%.1f ops/batch)\n", len(rs), tEnd.Sub(tStart).Round(time.Millisecond), float64(len(rs))/tEnd.Sub(tStart).Seconds(), b1-b0, float64(2*len(rs))/float64(b1-b0))
	slices.SortFunc(rs, func(a, b beginRec) int { return int(a.ret.Sub(a.call) - b.ret.Sub(b.call)) })
	tot := func(r beginRec) time.Duration { return r.ret.Sub(r.call) }
	pct := func(p float64) time.Duration { return tot(rs[int(p*float64(len(rs)-1))]) }
	fmt.Printf("begin p50 %v p90 %v p99 %v p99.9 %v max %v\n", pct(.5), pct(.9), pct(.99), pct(.999), tot(rs[len(rs)-1]))
	B := ledger.Batches
	comp := []string{"pre", "chan", "queue", "decide", "logwrite", "fdatasync", "zerofill", "checkpoint", "badgercommit", "upd-other", "answerpos", "wake", "post", "TOTAL"}
	split := func(r beginRec) []time.Duration {
		b := B[r.tr.Batch]
		s := b.Store
		updOther := b.UpdateEnd.Sub(b.DecideEnd) - s.Write - s.Sync - s.ZeroFill - s.Checkpoint - s.Commit
		return []time.Duration{r.tr.Enq.Sub(r.call), r.tr.Sent.Sub(r.tr.Enq), b.DecideStart.Sub(r.tr.Sent), b.DecideEnd.Sub(b.DecideStart), s.Write, s.Sync, s.ZeroFill, s.Checkpoint, s.Commit, updOther, r.tr.Answered.Sub(b.UpdateEnd), r.tr.Recv.Sub(r.tr.Answered), r.ret.Sub(r.tr.Recv), tot(r)}
	}
	show := func(label string, sub []beginRec) {
		sums := make([]time.Duration, len(comp))
		for _, r := range sub {
			for i, d := range split(r) {
				sums[i] += d
			}
		}
		fmt.Printf("%-14s", label)
		for i := range comp {
			fmt.Printf(" %s=%v", comp[i], (sums[i] / time.Duration(len(sub))).Round(time.Microsecond))
		}
		fmt.Println()
	}
	show("all", rs)
	show("p50-p90", rs[len(rs)/2:len(rs)*9/10])
	show("p90-p99", rs[len(rs)*9/10:len(rs)*99/100])
	slow := rs[len(rs)*99/100:]
	show("slowest1%", slow)
	show("slowest0.1%", rs[len(rs)*999/1000:])
	// each slow begin's largest single delay, over its own batch and the one
	// before it (whose remainder it waited through)
	cause := map[string]int{}
	for _, r := range slow {
		b, p := B[r.tr.Batch], B[r.tr.Batch-1]
		type c struct {
			n string
			d time.Duration
		}
		cs := []c{{"wake(scheduler)", r.tr.Recv.Sub(r.tr.Answered)}}
		for _, x := range []ledger.BatchTrace{b, p} {
			cs = append(cs, c{"commit", x.Store.Commit}, c{"fdatasync", x.Store.Sync + x.Store.Write}, c{"checkpoint", x.Store.Checkpoint}, c{"zerofill", x.Store.ZeroFill},
				c{"decide", x.DecideEnd.Sub(x.DecideStart)}, c{"take(writer waits for a P)", x.DecideStart.Sub(x.Start)})
		}
		// the gap between the batches (writer off CPU)
		cs = append(cs, c{"gap between batches", b.Start.Sub(p.AnswerEnd)})
		m := cs[0]
		for _, x := range cs {
			if x.d > m.d {
				m = x
			}
		}
		if m.d < 2*time.Millisecond {
			m.n = "none over 2 ms"
		}
		cause[m.n]++
	}
	fmt.Printf("slowest1%% by largest single delay: %v\n", cause)
	// queue wait: how many batch boundaries did the slow begins wait through?
	var waited []int
	for _, r := range slow {
		nb := 0
		for id := r.tr.Batch - 1; id >= b0 && B[id].DecideStart.After(r.tr.Sent); id-- {
			nb++
		}
		waited = append(waited, nb)
	}
	slices.Sort(waited)
	fmt.Printf("slowest1%%: whole batches waited before its own: p50 %d p90 %d max %d\n", waited[len(waited)/2], waited[len(waited)*9/10], waited[len(waited)-1])
	// batch stage percentiles
	bs := slices.DeleteFunc(slices.Clone(B[b0:min(b1, int64(len(B)))]), func(b ledger.BatchTrace) bool { return b.Start.IsZero() || b.DecideStart.IsZero() })
	stage := func(name string, f func(b ledger.BatchTrace) time.Duration) {
		ds := make([]time.Duration, len(bs))
		for i, b := range bs {
			ds[i] = f(b)
		}
		slices.Sort(ds)
		q := func(p float64) time.Duration { return ds[int(p*float64(len(ds)-1))].Round(time.Microsecond) }
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		fmt.Printf("batch %-12s mean %v p50 %v p90 %v p99 %v p99.9 %v max %v\n", name, (sum / time.Duration(len(ds))).Round(time.Microsecond), q(.5), q(.9), q(.99), q(.999), ds[len(ds)-1].Round(time.Microsecond))
	}
	stage("whole", func(b ledger.BatchTrace) time.Duration { return b.AnswerEnd.Sub(b.Start) })
	stage("take->decide", func(b ledger.BatchTrace) time.Duration { return b.DecideStart.Sub(b.Start) })
	stage("decide", func(b ledger.BatchTrace) time.Duration { return b.DecideEnd.Sub(b.DecideStart) })
	stage("write", func(b ledger.BatchTrace) time.Duration { return b.Store.Write })
	stage("fdatasync", func(b ledger.BatchTrace) time.Duration { return b.Store.Sync })
	stage("zerofill", func(b ledger.BatchTrace) time.Duration { return b.Store.ZeroFill })
	stage("checkpoint", func(b ledger.BatchTrace) time.Duration { return b.Store.Checkpoint })
	stage("commit", func(b ledger.BatchTrace) time.Duration { return b.Store.Commit })
	stage("answer", func(b ledger.BatchTrace) time.Duration { return b.AnswerEnd.Sub(b.UpdateEnd) })
	stage("gap-to-next", func(b ledger.BatchTrace) time.Duration { return 0 })
	ops := make([]int, len(bs))
	for i, b := range bs {
		ops[i] = b.Ops
	}
	slices.Sort(ops)
	fmt.Printf("batch ops p10 %d p50 %d p90 %d max %d\n", ops[len(ops)/10], ops[len(ops)/2], ops[len(ops)*9/10], ops[len(ops)-1])
	// long batches: what made them long
	slices.SortFunc(bs, func(a, b ledger.BatchTrace) int { return int(a.AnswerEnd.Sub(a.Start) - b.AnswerEnd.Sub(b.Start)) })
	top := bs[len(bs)*98/100:]
	var agg [7]time.Duration
	dom := map[string]int{}
	for _, b := range top {
		st := []time.Duration{b.DecideStart.Sub(b.Start), b.DecideEnd.Sub(b.DecideStart), b.Store.Write + b.Store.Sync, b.Store.ZeroFill, b.Store.Checkpoint, b.Store.Commit, b.AnswerEnd.Sub(b.UpdateEnd)}
		nm := []string{"take", "decide", "write+sync", "zerofill", "checkpoint", "commit", "answer"}
		mx := 0
		for i, d := range st {
			agg[i] += d
			if d > st[mx] {
				mx = i
			}
		}
		dom[nm[mx]]++
	}
	fmt.Printf("slowest 2%% batches (n=%d, > %v): mean take %v decide %v write+sync %v zerofill %v checkpoint %v commit %v answer %v; largest stage: %v\n", len(top), top[0].AnswerEnd.Sub(top[0].Start).Round(time.Microsecond),
		agg[0]/time.Duration(len(top)), agg[1]/time.Duration(len(top)), agg[2]/time.Duration(len(top)), agg[3]/time.Duration(len(top)), agg[4]/time.Duration(len(top)), agg[5]/time.Duration(len(top)), agg[6]/time.Duration(len(top)), dom)
	badgerstore.EventsMu.Lock()
	evs := slices.Clone(badgerstore.Events)
	badgerstore.EventsMu.Unlock()
	kinds := map[string]int{}
	for _, ev := range evs {
		k := ev.Msg
		if len(k) > 40 {
			k = k[:40]
		}
		kinds[k]++
	}
	fmt.Printf("badger events: %v\n", kinds)
	// long commits and the nearest flush event
	var nLong, nNear int
	for _, b := range bs {
		if b.Store.Commit < 5*time.Millisecond {
			continue
		}
		nLong++
		cs := b.UpdateEnd.Add(-b.Store.Commit)
		for _, ev := range evs {
			if strings.HasPrefix(ev.Msg, "Flushing memtable") && ev.At.After(cs.Add(-time.Millisecond)) && ev.At.Before(b.UpdateEnd) {
				nNear++
				break
			}
		}
	}
	fmt.Printf("commits over 5 ms: %d, with a memtable rotation during them: %d\n", nLong, nNear)
	for _, b := range bs {
		if b.Store.Checkpoint > 0 {
			fmt.Printf("checkpoint %v: badger update %v, log sync %v (of it directory %v)\n", b.Store.Checkpoint.Round(time.Microsecond), b.Store.CPUpdate.Round(time.Microsecond), b.Store.CPLogSync.Round(time.Microsecond), b.Store.CPDir.Round(time.Microsecond))
		}
	}
	for _, b := range bs[len(bs)-8:] {
		fmt.Printf("long batch %v: ops %d decide %v write %v sync %v zf %v cp %v commit %v answer %v\n", b.AnswerEnd.Sub(b.Start).Round(time.Microsecond), b.Ops, b.DecideEnd.Sub(b.DecideStart).Round(time.Microsecond), b.Store.Write.Round(time.Microsecond), b.Store.Sync.Round(time.Microsecond), b.Store.ZeroFill.Round(time.Microsecond), b.Store.Checkpoint.Round(time.Microsecond), b.Store.Commit.Round(time.Microsecond), b.AnswerEnd.Sub(b.UpdateEnd).Round(time.Microsecond))
	}
	for i := range names {
		switch after[i].Value.Kind() {
		case metrics.KindUint64:
			fmt.Printf("%s: %d\n", names[i], after[i].Value.Uint64()-before[i].Value.Uint64())
		case metrics.KindFloat64:
			fmt.Printf("%s: %.3f\n", names[i], after[i].Value.Float64()-before[i].Value.Float64())
		case metrics.KindFloat64Histogram:
			h, h0 := after[i].Value.Float64Histogram(), before[i].Value.Float64Histogram()
			var total uint64
			cnt := make([]uint64, len(h.Counts))
			for j := range h.Counts {
				cnt[j] = h.Counts[j] - h0.Counts[j]
				total += cnt[j]
			}
			fmt.Printf("%s: n=%d", names[i], total)
			for _, p := range []float64{.5, .9, .99, .999} {
				var acc uint64
				for j := range cnt {
					acc += cnt[j]
					if float64(acc) >= p*float64(total) {
						fmt.Printf(" p%g<=%v", p*100, time.Duration(h.Buckets[j+1]*1e9))
						break
					}
				}
			}
			fmt.Println()
		}
	}
	fmt.Printf("heap in use %d MiB, GC %d total\n", ms.HeapInuse>>20, ms.NumGC)
	// slow begins overlapping a GC pause (the last 256 pauses)
	type pause struct{ s, e time.Time }
	var ps []pause
	for i := range 256 {
		if ms.PauseEnd[i] == 0 {
			continue
		}
		e := time.Unix(0, int64(ms.PauseEnd[i]))
		ps = append(ps, pause{e.Add(-time.Duration(ms.PauseNs[i])), e})
	}
	_ = ps
}
