//go:build linux

// The benchmark reads the server processes' CPU from /proc and its own from
// getrusage: Linux only.

package pgstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// BenchmarkBeginReport is make bench's PostgreSQL row from one engine
// (internal/benchreport, section 4) as a Go benchmark, so that the engine
// process's CPU on PostgreSQL can be profiled alone:
//
//	go test -run XXX -bench BeginReport -benchtime 20000x -cpuprofile /tmp/pg.prof ./ledger/pgstore
//
// 64 callers begin and report distinct effects, each under a global and a
// per-counterparty ceiling, with the audit log on. Besides the time, it
// reports the CPU time a pair took in this process (engine-µs) and in the
// server processes serving its sessions (server-µs, when the server runs
// on this machine; in 10 ms ticks), pairs per commit and statements per
// pair. Under callgrind (GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off, 2000x and 4000x, the
// difference over 2000) it gives the engine process's instructions a pair
// (docs/design.md).
func BenchmarkBeginReport(b *testing.B) {
	dsn := pgtest.DSN(b)
	schema := pgtest.Schema(b, dsn, "b_")
	app := " application_name=" + schema // its sessions, for serverCPU
	if strings.Contains(dsn, "://") {
		app = "&application_name=" + schema
		if !strings.Contains(dsn, "?") {
			app = "?application_name=" + schema
		}
	}
	st, err := Open(context.Background(), dsn+app, &Options{Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	limit := int64(1 << 60)
	eng, err := ledger.New(ledger.Options{Store: st, Secret: make([]byte, 32), ReapInterval: -1, PurgeInterval: -1, Audit: true,
		Policies: []ledger.Rule{{Match: "bench.*", Ceilings: []ledger.Ceiling{
			{Name: "global-spend", LimitMicros: &limit, Window: "24h", Per: "global"},
			{Name: "per-counterparty", LimitMicros: &limit, Window: "24h", Per: "dimension:counterparty"},
		}}}})
	if err != nil {
		b.Fatal(err)
	}
	defer eng.Close(context.Background())
	ctx := context.Background()
	var seq atomic.Int64
	server0, ok0 := serverCPU(b, dsn, schema)
	self0 := selfCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			cost := int64(1000)
			for {
				k := seq.Add(1)
				if k > int64(b.N) {
					return
				}
				res, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprint("bench:", k), EffectType: "bench.charge",
					AgentID: "bench", EstimatedCostMicros: &cost, Payload: []byte(`{"amount":1000,"currency":"usd"}`),
					Dimensions: map[string]string{"counterparty": fmt.Sprint("acct_", k%50)}})
				if err != nil || res.Decision != ledger.DecisionExecute {
					b.Errorf("begin: %v %+v", err, res)
					return
				}
				if _, err := eng.Report(ctx, ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded, Result: []byte(`{"id":"pi_1"}`)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if server, ok := serverCPU(b, dsn, schema); ok && ok0 {
		b.ReportMetric(float64(server-server0)/float64(b.N)/1e3, "server-µs/pair")
	}
	b.ReportMetric(float64(selfCPU()-self0)/float64(b.N)/1e3, "engine-µs/pair")
	s := st.Stats()
	b.ReportMetric(float64(b.N)/float64(max(s.Commits, 1)), "pairs/commit")
	b.ReportMetric(float64(s.Statements)/float64(b.N), "stmts/pair")
}

// serverCPU is the CPU time of the server processes serving the sessions
// named app (their /proc stat, in clock ticks of 10 ms); false when they
// cannot be read (a server on another machine).
func serverCPU(b *testing.B, dsn, app string) (time.Duration, bool) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	rows, _ := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", app)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var d time.Duration
	for _, pid := range pids {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		d += time.Duration(u+s) * 10 * time.Millisecond
	}
	return d, true
}

// selfCPU is this process's CPU time, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
