package badgerstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	err = s.Update(context.Background(), func(tx ledger.Txn) error {
		for _, k := range []string{"p\x00b", "p\x00a", "p\x00c", "q\x00z"} {
			if err := tx.Set([]byte(k), []byte("v"+k)); err != nil {
				return err
			}
		}
		// A transaction sees its own writes, in Get and in Scan.
		if v, err := tx.Get([]byte("p\x00a")); err != nil || string(v) != "vp\x00a" {
			t.Errorf("own write: %q %v", v, err)
		}
		return tx.Delete([]byte("p\x00c"))
	})
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("boom")
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { tx.Set([]byte("p\x00x"), nil); return failed }); !errors.Is(err, failed) {
		t.Fatalf("failing update: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []string
	err = s.View(context.Background(), func(r ledger.Reader) error {
		if _, err := r.Get([]byte("p\x00x")); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("a failed update left a write: %v", err)
		}
		return r.Scan([]byte("p\x00"), []byte("p\x00b"), func(k, v []byte) (bool, error) {
			got = append(got, string(k))
			if !bytes.Equal(v, append([]byte("v"), k...)) {
				t.Errorf("value of %q = %q", k, v)
			}
			return true, nil
		})
	})
	if err != nil || len(got) != 1 || got[0] != "p\x00b" {
		t.Fatalf("scan from b: %q %v", got, err)
	}
}

// TestInMemoryTakesLargeValues: in memory there is no value log, and an
// effect record is larger than the on-disk value threshold.
func TestInMemoryTakesLargeValues(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := bytes.Repeat([]byte{'r'}, 4<<10)
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("e\x00big"), big) }); err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "e\x00big", big)
}

// wantValue fails unless s holds want under key.
func wantValue(t *testing.T, s *Store, key string, want []byte) {
	t.Helper()
	err := s.View(context.Background(), func(r ledger.Reader) error {
		v, err := r.Get([]byte(key))
		if err == nil && !bytes.Equal(v, want) {
			err = errors.New("value changed")
		}
		return err
	})
	if err != nil {
		t.Fatalf("%q: %v", key, err)
	}
}

// TestLedgerFromBeforeRecordsStayedInTheTree: a ledger whose records went
// to the value log (a lower threshold, as every ledger had before) opens
// with today's options; its old values are read, overwritten and deleted
// alongside new ones, survive value log GC and a reopen.
func TestLedgerFromBeforeRecordsStayedInTheTree(t *testing.T) {
	dir := t.TempDir()
	old := bytes.Repeat([]byte{'o'}, 2048)
	s, err := Open(dir, &Options{MinFreeBytes: -1, valueThreshold: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Update(context.Background(), func(tx ledger.Txn) error {
		for i := range 100 {
			if err := tx.Set(fmt.Appendf(nil, "e\x00old%03d", i), old); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	reopen := func() {
		t.Helper()
		if s, err = Open(dir, &Options{MinFreeBytes: -1}); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	renewed := bytes.Repeat([]byte{'n'}, 2048)
	if err := s.Update(context.Background(), func(tx ledger.Txn) error {
		for i := range 50 { // half rewritten, a fifth of the rest deleted
			if err := tx.Set(fmt.Appendf(nil, "e\x00old%03d", i), renewed); err != nil {
				return err
			}
		}
		for i := 50; i < 60; i++ {
			if err := tx.Delete(fmt.Appendf(nil, "e\x00old%03d", i)); err != nil {
				return err
			}
		}
		return tx.Set([]byte("e\x00new"), renewed)
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	reopen()
	defer s.Close()
	wantValue(t, s, "e\x00new", renewed)
	for i := range 100 {
		k := fmt.Sprintf("e\x00old%03d", i)
		switch {
		case i < 50:
			wantValue(t, s, k, renewed)
		case i < 60:
			s.View(context.Background(), func(r ledger.Reader) error {
				if _, err := r.Get([]byte(k)); err != ledger.ErrNotFound {
					t.Errorf("%q deleted, then read: %v", k, err)
				}
				return nil
			})
		default:
			wantValue(t, s, k, old)
		}
	}
}
