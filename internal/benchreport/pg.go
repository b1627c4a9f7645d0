package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// pgDSN is the server benchmarked: RATCHET_TEST_PG_DSN, or the local one.
func pgDSN() string {
	if d := os.Getenv("RATCHET_TEST_PG_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

type pgResults struct {
	one, three, naive result
}

// benchPG measures durable begin+report pairs on the PostgreSQL ledger at
// 64 callers, from one engine and from three engines sharing the database
// (each with its own pool and writer, as three sidecars would run), and the
// naive design: one transaction per call against an idempotency table and a
// budget row.
func benchPG(d time.Duration) (pgResults, error) {
	var out pgResults
	ctx := context.Background()
	var b [6]byte
	rand.Read(b[:])
	schema := "bench_" + hex.EncodeToString(b[:])
	admin, err := pgx.Connect(ctx, pgDSN())
	if err != nil {
		return out, err
	}
	defer admin.Close(ctx)
	defer admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")

	open := func() (*ledger.Engine, error) {
		st, err := pgstore.Open(ctx, pgDSN(), &pgstore.Options{Schema: schema})
		if err != nil {
			return nil, err
		}
		return ledger.New(ledger.Options{Store: st, Secret: make([]byte, 32), Policies: benchRules(), ReapInterval: -1, PurgeInterval: -1})
	}
	eng, err := open()
	if err != nil {
		return out, err
	}
	out.one = pairs(eng, 64, d, 0)
	var engines []*ledger.Engine
	for range 2 {
		e, err := open()
		if err != nil {
			return out, err
		}
		engines = append(engines, e)
	}
	engines = append(engines, eng)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, e := range engines {
		wg.Go(func() {
			r := pairs(e, []int{22, 21, 21}[i], d, 0)
			mu.Lock()
			out.three.perSec += r.perSec
			out.three.p99 = max(out.three.p99, r.p99)
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, e := range engines {
		e.Close(ctx)
	}
	out.naive, err = naivePG(ctx, schema, d)
	return out, err
}

// naivePG is the design Ratchet's batching replaces: every call its own
// transaction, the budget a single row updated in place.
func naivePG(ctx context.Context, schema string, d time.Duration) (result, error) {
	cfg, err := pgxpool.ParseConfig(pgDSN())
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
