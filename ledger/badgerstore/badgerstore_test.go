package badgerstore

import (
	"bytes"
	"errors"
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
	err = s.Update(func(tx ledger.Txn) error {
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
	if err := s.Update(func(tx ledger.Txn) error { tx.Set([]byte("p\x00x"), nil); return failed }); !errors.Is(err, failed) {
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
	err = s.View(func(r ledger.Reader) error {
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
	if err := s.Update(func(tx ledger.Txn) error { return tx.Set([]byte("e\x00big"), big) }); err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "e\x00big", big)
}

// wantValue fails unless s holds want under key.
func wantValue(t *testing.T, s *Store, key string, want []byte) {
	t.Helper()
	err := s.View(func(r ledger.Reader) error {
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
