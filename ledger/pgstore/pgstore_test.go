package pgstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

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
	dsn := pgtest.DSN(t)
	s, err := Open(context.Background(), dsn, &Options{Schema: pgtest.Schema(t, dsn, "s_")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 1300 // more than two pages
	err = s.Update(func(tx ledger.Txn) error {
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
