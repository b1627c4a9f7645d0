package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// openPG starts an engine on the PostgreSQL ledger in schema of the server
// the tests use (pgtest.DSNOrDefault), its sessions named app (see
// serverCPU).
func openPG(schema, app string) (*ledger.Engine, *pgstore.Store, error) {
	st, err := pgstore.Open(context.Background(), withApp(pgtest.DSNOrDefault(), app), &pgstore.Options{Schema: schema})
	if err != nil {
		return nil, nil, err
	}
	eng, err := startEngine(st, make([]byte, 32))
	return eng, st, err
}

type pgResults struct {
	one, three, naive result
	// batches re-run per pair (Ratchet: a key lock was busy; the naive
	// design re-runs nothing, it waits on row locks)
	oneRetries, threeRetries float64
	// what the store's batches sent, from pgstore's Stats (load-insensitive
	// where rates are not)
	oneStats, threeStats pgstore.Stats
	// the server's CPU time per pair, from its processes serving each
	// design (false: not measured, see serverCPU)
	oneServer, threeServer, naiveServer time.Duration
	serverOK                            bool
}

// serverPerPair is a design's server CPU time per pair, for the table.
func (r pgResults) serverPerPair(d time.Duration) string {
	if !r.serverOK {
		return "n/a"
	}
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}

// withApp adds application_name to a DSN of either form (URL or
// keyword=value).
func withApp(dsn, app string) string {
	if !strings.Contains(dsn, "://") {
		return dsn + " application_name=" + app
	}
	if strings.Contains(dsn, "?") {
		return dsn + "&application_name=" + url.QueryEscape(app)
	}
	return dsn + "?application_name=" + url.QueryEscape(app)
}

// serverCPU measures the CPU time of the server processes serving the
// sessions named app, when the server runs on this machine: the processes
// are found in pg_stat_activity, their times read from /proc (backendCPU).
// The figure per pair moves far less with the machine's load than a rate
// does, so it is what an A/B of the store's SQL compares.
type serverCPU struct {
	dsn, app string
	before   map[uint32]time.Duration
}

// startServerCPU notes the CPU time app's server processes used so far.
func startServerCPU(dsn, app string) (*serverCPU, bool) {
	m := &serverCPU{dsn: dsn, app: app}
	before, ok := m.read()
	m.before = before
	return m, ok
}

// read is the CPU time of each of app's server processes.
func (m *serverCPU) read() (map[uint32]time.Duration, bool) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, m.dsn)
	if err != nil {
		return nil, false
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", m.app)
	if err != nil {
		return nil, false
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	if err != nil {
		return nil, false
	}
	out := map[uint32]time.Duration{}
	for _, pid := range pids {
		d, ok := backendCPU(pid)
		if !ok {
			return nil, false
		}
		out[pid] = d
	}
	return out, true
}

// used is the CPU time app's server processes used since startServerCPU
// (a process started since then, all of its time); false when it cannot
// be read.
func (m *serverCPU) used() (time.Duration, bool) {
	after, ok := m.read()
	if !ok || m.before == nil {
		return 0, false
	}
	var d time.Duration
	for pid, t := range after {
		d += t - m.before[pid]
	}
	return d, true
}

// perPair is a store's round trips and statements per pair and its pairs
// per commit, for the table.
func (r pgResults) perPair(st pgstore.Stats, pairs int) string {
	n := float64(max(pairs, 1))
	return fmt.Sprintf("%.2f | %.2f | %.1f", float64(st.RoundTrips)/n, float64(st.Statements)/n, n/float64(max(st.Commits, 1)))
}

// benchPG measures durable begin+report pairs on the PostgreSQL ledger at
// 64 callers, from one engine and from three worker processes sharing the
// database (threeProcesses), and the naive design: one transaction per call
// against an idempotency table and a budget row.
func benchPG(d time.Duration) (pgResults, error) {
	var out pgResults
	dsn := pgtest.DSNOrDefault()
	if err := pgtest.Reachable(dsn); err != nil {
		return out, err
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	defer pgtest.Drop(dsn, schema)
	eng, st, err := openPG(schema, schema+"-one")
	if err != nil {
		return out, err
	}
	meter, ok := startServerCPU(dsn, schema+"-one")
	out.one = pairs(eng, 64, d, 0)
	server, ok2 := meter.used()
	out.oneServer, out.serverOK = server/time.Duration(max(out.one.ops, 1)), ok && ok2
	out.oneRetries = float64(eng.Reruns()) / float64(max(out.one.ops, 1))
	out.oneStats = st.Stats()
	eng.Close(context.Background())
	var w workerResult
	if out.three, w, err = threeProcesses(schema, d); err != nil {
		return out, err
	}
	out.threeRetries, out.threeStats = float64(w.Retries)/float64(max(out.three.ops, 1)), w.Stats
	out.threeServer, out.serverOK = w.ServerCPU/time.Duration(max(out.three.ops, 1)), out.serverOK && w.ServerCPUOK
	var naiveServer time.Duration
	out.naive, naiveServer, ok, err = naivePG(context.Background(), schema, d)
	out.naiveServer, out.serverOK = naiveServer/time.Duration(max(out.naive.ops, 1)), out.serverOK && ok
	return out, err
}

// workerResult is what a worker process reports.
type workerResult struct {
	PerSec  float64       `json:"per_sec"`
	P99     time.Duration `json:"p99"`
	Pairs   int           `json:"pairs"`
	Retries int64         `json:"retries"`
	Stats   pgstore.Stats `json:"stats"`
	// the CPU time of the server processes serving the worker's store
	ServerCPU   time.Duration `json:"server_cpu"`
	ServerCPUOK bool          `json:"server_cpu_ok"`
}

// threeProcesses runs three worker processes (this program with
// -pg-worker), 22, 21 and 21 callers each, each its own engine with its own
// pool and writer on the shared schema, as three sidecars would run, all
// starting at the same moment; their rates add up. It also returns their
// batches re-run, their stores' counts and their server CPU time, summed.
func threeProcesses(schema string, d time.Duration) (result, workerResult, error) {
	sum := workerResult{ServerCPUOK: true}
	self, err := os.Executable()
	if err != nil {
		return result{}, sum, err
	}
	start := time.Now().Add(2 * time.Second).UnixNano()
	var out result
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	for i, callers := range []int{22, 21, 21} {
		wg.Go(func() {
			arg := fmt.Sprintf("%s:%d:%s:%d:w%d", schema, callers, d, start, i)
			b, err := exec.Command(self, "-pg-worker", arg).Output()
			var r workerResult
			if err == nil {
				err = json.Unmarshal(b, &r)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, fmt.Errorf("worker %d: %w", i, err))
				return
			}
			out.perSec += r.PerSec
			out.p99 = max(out.p99, r.P99)
			out.ops += r.Pairs
			sum.Retries += r.Retries
			sum.Stats.Commits += r.Stats.Commits
			sum.Stats.RoundTrips += r.Stats.RoundTrips
			sum.Stats.Statements += r.Stats.Statements
			sum.ServerCPU += r.ServerCPU
			sum.ServerCPUOK = sum.ServerCPUOK && r.ServerCPUOK
		})
	}
	wg.Wait()
	return out, sum, firstErr
}

// pgWorker is one of threeProcesses' workers: arg is
// schema:callers:duration:start-unix-nanos:key-prefix.
func pgWorker(arg string) error {
	parts := strings.Split(arg, ":")
	if len(parts) != 5 {
		return fmt.Errorf("-pg-worker %q: want schema:callers:duration:start:prefix", arg)
	}
	callers, err1 := strconv.Atoi(parts[1])
	d, err2 := time.ParseDuration(parts[2])
	start, err3 := strconv.ParseInt(parts[3], 10, 64)
	if err := cmp.Or(err1, err2, err3); err != nil {
		return fmt.Errorf("-pg-worker %q: %w", arg, err)
	}
	app := parts[0] + "-" + parts[4]
	eng, st, err := openPG(parts[0], app)
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	keyPrefix = "bench:" + parts[4] + ":"
	meter, ok := startServerCPU(pgtest.DSNOrDefault(), app)
	time.Sleep(time.Until(time.Unix(0, start)))
	r := pairs(eng, callers, d, 0)
	server, ok2 := meter.used()
	return json.NewEncoder(os.Stdout).Encode(workerResult{PerSec: r.perSec, P99: r.p99, Pairs: r.ops, Retries: eng.Reruns(), Stats: st.Stats(),
		ServerCPU: server, ServerCPUOK: ok && ok2})
}

// naivePG is the design Ratchet's batching replaces: every call its own
// transaction, the budget a single row updated in place. It also returns
// the server CPU time its sessions used during the load (false: not
// measured).
func naivePG(ctx context.Context, schema string, d time.Duration) (result, time.Duration, bool, error) {
	app := schema + "-naive"
	cfg, err := pgxpool.ParseConfig(pgtest.DSNOrDefault())
	if err != nil {
		return result{}, 0, false, err
	}
	cfg.MaxConns = 64
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, 0, false, err
	}
	defer pool.Close()
	for _, q := range []string{
		"CREATE TABLE naive_keys (k text PRIMARY KEY, state text NOT NULL)",
		"CREATE TABLE naive_budget (name text PRIMARY KEY, counted bigint NOT NULL, lim bigint NOT NULL)",
		"INSERT INTO naive_budget VALUES ('global', 0, 9223372036854775807)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return result{}, 0, false, err
		}
	}
	// Every session starts before the meter does, so that the figure is
	// the load's, not the sessions' start.
	conns := make([]*pgxpool.Conn, 0, cfg.MaxConns)
	for range cfg.MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return result{}, 0, false, err
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	meter, ok := startServerCPU(pgtest.DSNOrDefault(), app)
	var lat latencies
	r, err := load(64, d, 0, func(k int64) error {
		key := fmt.Sprint("naive:", k)
		t0 := time.Now()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO naive_keys VALUES ($1, 'pending') ON CONFLICT DO NOTHING", key); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE naive_budget SET counted = counted + 1000 WHERE name = 'global' AND counted + 1000 <= lim")
			return err
		})
		lat.add([]time.Duration{time.Since(t0)})
		if err != nil {
			return err
		}
		_, err = pool.Exec(ctx, "UPDATE naive_keys SET state = 'succeeded' WHERE k = $1", key)
		return err
	})
	r.p50, r.p99 = lat.pct(0.5), lat.pct(0.99)
	server, ok2 := meter.used()
	return r, server, ok && ok2, err
}
