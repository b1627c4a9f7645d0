// Package pgtest gives tests, and the benchmarks, a PostgreSQL server and a
// fresh schema on it. The server is RATCHET_TEST_PG_DSN, by default the
// local one with trust auth and database test. Without one, tests skip and
// say so; with RATCHET_REQUIRE_PG set (CI), they fail instead.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratchet-mcp/ratchet/internal/suites"
)

// DSNOrDefault is the server tests and benchmarks use.
func DSNOrDefault() string {
	if d := os.Getenv("RATCHET_TEST_PG_DSN"); d != "" {
		return d
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// Reachable reports why the server cannot be used, or nil. Its answer
// is the suite's fate, noted for make test's summary (package suites).
func Reachable(dsn string) error {
	err := reachable(dsn)
	if err != nil {
		suites.Skipped(suites.PostgreSQL, "no server answers (set RATCHET_TEST_PG_DSN): "+err.Error())
	} else {
		suites.Ran(suites.PostgreSQL)
	}
	return err
}

func reachable(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// Required reports whether CI demands the PostgreSQL suite.
func Required() bool { return os.Getenv("RATCHET_REQUIRE_PG") != "" }

// DSN returns the server, or skips (fails when required) without one.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := DSNOrDefault()
	if err := Reachable(dsn); err != nil {
		if Required() {
			t.Fatalf("PostgreSQL required (RATCHET_REQUIRE_PG) but unreachable: %v", err)
		}
		t.Skipf("PostgreSQL suite skipped: no server answers (set RATCHET_TEST_PG_DSN): %v", err)
	}
	return dsn
}

// Schema returns a new schema name with prefix, dropped when the test ends.
func Schema(t testing.TB, dsn, prefix string) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := prefix + hex.EncodeToString(b[:])
	t.Cleanup(func() { Drop(dsn, name) })
	return name
}

// Drop removes a schema and everything in it.
func Drop(dsn, schema string) {
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		return
	}
	defer conn.Close(context.Background())
	conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
}
