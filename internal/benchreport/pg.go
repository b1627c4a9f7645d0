package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
// the tests use (pgtest.DSNOrDefault).
func openPG(schema string) (*ledger.Engine, *pgstore.Store, error) {
	st, err := pgstore.Open(context.Background(), pgtest.DSNOrDefault(), &pgstore.Options{Schema: schema})
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
	eng, st, err := openPG(schema)
	if err != nil {
		return out, err
	}
	out.one = pairs(eng, 64, d, 0)
	out.oneRetries = float64(eng.Reruns()) / float64(max(out.one.ops, 1))
	out.oneStats = st.Stats()
	eng.Close(context.Background())
	var retries int64
	if out.three, retries, out.threeStats, err = threeProcesses(schema, d); err != nil {
		return out, err
	}
	out.threeRetries = float64(retries) / float64(max(out.three.ops, 1))
	out.naive, err = naivePG(context.Background(), schema, d)
	return out, err
}

// workerResult is what a worker process reports.
type workerResult struct {
	PerSec  float64       `json:"per_sec"`
	P99     time.Duration `json:"p99"`
	Pairs   int           `json:"pairs"`
	Retries int64         `json:"retries"`
	Stats   pgstore.Stats `json:"stats"`
}

// threeProcesses runs three worker processes (this program with
// -pg-worker), 22, 21 and 21 callers each, each its own engine with its own
// pool and writer on the shared schema, as three sidecars would run, all
// starting at the same moment; their rates add up. It also returns their
// batches re-run and their stores' counts, summed.
func threeProcesses(schema string, d time.Duration) (result, int64, pgstore.Stats, error) {
	var st pgstore.Stats
	self, err := os.Executable()
	if err != nil {
		return result{}, 0, st, err
	}
	start := time.Now().Add(2 * time.Second).UnixNano()
	var out result
	var retries int64
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
			retries += r.Retries
			st.Commits += r.Stats.Commits
			st.RoundTrips += r.Stats.RoundTrips
			st.Statements += r.Stats.Statements
		})
	}
	wg.Wait()
	return out, retries, st, firstErr
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
	eng, st, err := openPG(parts[0])
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	keyPrefix = "bench:" + parts[4] + ":"
	time.Sleep(time.Until(time.Unix(0, start)))
	r := pairs(eng, callers, d, 0)
	return json.NewEncoder(os.Stdout).Encode(workerResult{PerSec: r.perSec, P99: r.p99, Pairs: r.ops, Retries: eng.Reruns(), Stats: st.Stats()})
}

// naivePG is the design Ratchet's batching replaces: every call its own
// transaction, the budget a single row updated in place.
func naivePG(ctx context.Context, schema string, d time.Duration) (result, error) {
	cfg, err := pgxpool.ParseConfig(pgtest.DSNOrDefault())
	if err != nil {
		return result{}, err
	}
	cfg.MaxConns = 64
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	for _, q := range []string{
		"CREATE TABLE naive_keys (k text PRIMARY KEY, state text NOT NULL)",
		"CREATE TABLE naive_budget (name text PRIMARY KEY, counted bigint NOT NULL, lim bigint NOT NULL)",
		"INSERT INTO naive_budget VALUES ('global', 0, 9223372036854775807)",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return result{}, err
		}
	}
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
	return r, err
}
