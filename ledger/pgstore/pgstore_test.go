package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "s_")
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			s, err := Open(context.Background(), dsn, &Options{Schema: schema})
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	conn, _ := pgx.Connect(context.Background(), dsn)
	defer conn.Close(context.Background())
	var n int
	conn.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&n)
	if n != 1 {
		t.Fatalf("%d migration rows, want 1", n)
	}
	if _, err := Open(context.Background(), dsn, &Options{Schema: "Bad-Name"}); err == nil {
		t.Fatal("a schema name that is not an identifier was accepted")
	}
}

func TestScanPagesInOrder(t *testing.T) {
	s := openFresh(t)
	const n = 1300 // more than two pages
	err := s.Update(func(tx ledger.Txn) error {
		for i := range n {
			if err := tx.Set([]byte(fmt.Sprintf("p\x00%05d", i)), []byte{byte(i)}); err != nil {
				return err
			}
		}
		tx.Set([]byte("p\x01after"), []byte("x"))
		return tx.Set([]byte("o\xffbefore"), []byte("x"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	err = s.View(func(r ledger.Reader) error {
		return r.Scan([]byte("p\x00"), []byte("p\x0000100"), func(k, _ []byte) (bool, error) {
			got = append(got, k)
			return true, nil
		})
	})
	if err != nil || len(got) != n-100 || string(got[0]) != "p\x0000100" || string(got[len(got)-1]) != fmt.Sprintf("p\x00%05d", n-1) {
		t.Fatalf("scan: %d keys, %v", len(got), err)
	}
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1], got[i]) >= 0 {
			t.Fatal("scan out of order")
		}
	}
	// A failing statement voids the batch: nothing of it is written.
	err = s.Update(func(tx ledger.Txn) error {
		tx.Set([]byte("q\x00kept?"), []byte("x"))
		return fmt.Errorf("the op failed")
	})
	if err == nil {
		t.Fatal("a failed batch committed")
	}
	s.View(func(r ledger.Reader) error {
		if _, err := r.Get([]byte("q\x00kept?")); err != ledger.ErrNotFound {
			t.Fatalf("a failed batch left a write: %v", err)
		}
		return nil
	})
	for in, want := range map[string]string{"p\x00": "p\x01", "a\xff": "b", "\xff\xff": ""} {
		if got := prefixEnd([]byte(in)); string(got) != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrefetchAndLockRelease(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "s_")
	s, err := Open(context.Background(), dsn, &Options{Schema: schema, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(func(tx ledger.Txn) error {
		tx.Set([]byte("a"), []byte("1"))
		return tx.Set([]byte("empty"), nil)
	}); err != nil {
		t.Fatal(err)
	}
	err = s.Update(func(tx ledger.Txn) error {
		tx.Set([]byte("mine"), []byte("2"))
		tx.Delete([]byte("a"))
		vals, err := tx.(ledger.Prefetcher).Prefetch([][]byte{[]byte("a"), []byte("empty"), []byte("none"), []byte("mine"), []byte("empty")})
		if err != nil {
			return err
		}
		// Own writes win (a deleted key is absent); a stored empty value is
		// present; a missing key is nil.
		if vals[0] != nil || vals[1] == nil || len(vals[1]) != 0 || vals[2] != nil || string(vals[3]) != "2" || vals[4] == nil {
			t.Errorf("prefetch = %q", vals)
		}
		if v, err := tx.Get([]byte("empty")); err != nil || len(v) != 0 {
			t.Errorf("get after prefetch = %q, %v", v, err)
		}
		if _, err := tx.Get([]byte("none")); err != ledger.ErrNotFound {
			t.Errorf("get of a prefetched absent key = %v", err)
		}
		return fmt.Errorf("the batch failed")
	})
	if err == nil {
		t.Fatal("a failed batch committed")
	}
	// The failed batch released the ledger lock: another store (another
	// replica) can commit, and so can this one on its only connection.
	other, err := Open(context.Background(), dsn, &Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, st := range []*Store{other, s} {
		if err := st.Update(func(tx ledger.Txn) error { return tx.Set([]byte("after"), []byte("x")) }); err != nil {
			t.Fatal(err)
		}
	}
	s.View(func(r ledger.Reader) error {
		if v, err := r.Get([]byte("a")); err != nil || string(v) != "1" {
			t.Errorf("a = %q, %v: the failed batch's delete leaked", v, err)
		}
		return nil
	})
}

func TestNoAdvisoryLocksIsNamed(t *testing.T) {
	// What PostgreSQL-protocol databases without advisory locks answer
	// (an unknown function, or an unsupported feature) is recognised; other
	// errors are not.
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "42883", Message: "unknown function: pg_advisory_xact_lock()"}:                                   true,
		&pgconn.PgError{Code: "0A000", Message: "pg_advisory_xact_lock is not supported"}:                                      true,
		fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "42883", Message: "function pg_advisory_lock(bigint) does not exist"}): true,
		&pgconn.PgError{Code: "42883", Message: "function foo() does not exist"}:                                               false,
		&pgconn.PgError{Code: "40001", Message: "could not serialize access"}:                                                  false,
		fmt.Errorf("connection refused"): false,
	} {
		if noAdvisoryLocks(err) != want {
			t.Errorf("noAdvisoryLocks(%v) = %v", err, !want)
		}
	}
}

// TestReadsAfterAScanSeeTheWritesItFlushed: a scan sends the buffered
// writes to the server first; a key read before it and written since must
// then read as written, not as first read.
func TestReadsAfterAScanSeeTheWritesItFlushed(t *testing.T) {
	s := openFresh(t)
	if err := s.Update(func(tx ledger.Txn) error {
		tx.Set([]byte("c\x00gone"), []byte("old"))
		return tx.Set([]byte("c\x00counter"), []byte("1"))
	}); err != nil {
		t.Fatal(err)
	}
	err := s.Update(func(tx ledger.Txn) error {
		if _, err := tx.(ledger.Prefetcher).Prefetch([][]byte{[]byte("c\x00counter"), []byte("c\x00gone")}); err != nil {
			return err
		}
		tx.Set([]byte("c\x00counter"), []byte("2"))
		tx.Delete([]byte("c\x00gone"))
		if err := tx.Scan([]byte("m\x00"), nil, func(k, v []byte) (bool, error) { return true, nil }); err != nil {
			return err
		}
		if v, err := tx.Get([]byte("c\x00counter")); err != nil || string(v) != "2" {
			t.Errorf("counter after a scan = %q, %v; want the write before it", v, err)
		}
		if v, err := tx.Get([]byte("c\x00gone")); err != ledger.ErrNotFound {
			t.Errorf("deleted key after a scan = %q, %v; want not found", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openFresh opens a store in a fresh schema, closed when the test ends.
func openFresh(t *testing.T) *Store {
	t.Helper()
	dsn := pgtest.DSN(t)
	s, err := Open(context.Background(), dsn, &Options{Schema: pgtest.Schema(t, dsn, "s_")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
