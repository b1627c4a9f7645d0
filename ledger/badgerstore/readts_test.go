package badgerstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// The engine has an Update's transaction begun ahead of it (PrepareUpdate)
// when ops wait for the next batch. A restore's Load writes Badger without Update, at the
// backup's versions, which are newer than that transaction's read
// timestamp when the backup's ledger had more batches: the next Update
// must read the restored keys, not the store as it was before.
func TestAnUpdateAfterARestoreReadsTheRestoredKeys(t *testing.T) {
	ctx := context.Background()
	src, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // many versions: the backup's are past dst's read timestamp
		key := fmt.Sprintf("e\x00%03d", i)
		if err := src.Update(ctx, func(tx ledger.Txn) error { return tx.Set([]byte(key), []byte("restored")) }); err != nil {
			t.Fatal(err)
		}
	}
	var backup bytes.Buffer
	if err := src.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	src.Close()

	dst, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	// One Update, and the next one's transaction begun, as the engine does
	// with ops waiting.
	if err := dst.Update(ctx, func(tx ledger.Txn) error { return tx.Set([]byte("x\x00first"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	dst.PrepareUpdate()
	if err := dst.Restore(&backup); err != nil {
		t.Fatal(err)
	}
	var got []string
	err = dst.Update(ctx, func(tx ledger.Txn) error {
		for _, i := range []int{0, 150, 199} {
			v, err := tx.Get([]byte(fmt.Sprintf("e\x00%03d", i)))
			got = append(got, fmt.Sprintf("%d=%s %v", i, v, err))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"0=restored <nil>", "150=restored <nil>", "199=restored <nil>"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the Update after a restore read (-want +got):\n%s", d)
	}
}

// Every Update reads the one before it, whichever transaction it runs
// in: a batch never decides on a state older than the last one answered.
func TestEachUpdateReadsTheUpdateBeforeIt(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := []byte("c\x00counter")
	for i := range 300 {
		err := s.Update(ctx, func(tx ledger.Txn) error {
			v, err := tx.Get(key)
			if i == 0 {
				if err == nil {
					return fmt.Errorf("read %q before any write", v)
				}
			} else if want := fmt.Sprint(i - 1); err != nil || string(v) != want {
				return fmt.Errorf("update %d read %q (%v), want %q", i, v, err, want)
			}
			return tx.Set(key, []byte(fmt.Sprint(i)))
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%3 != 0 {
			s.PrepareUpdate() // twice, sometimes: a second call keeps the first's
		}
		if i%6 == 1 {
			s.PrepareUpdate()
		}
		if i%50 == 0 { // a checkpoint between some of them, as Close and Compact make
			if err := s.syncBadger(); err != nil {
				t.Fatal(err)
			}
		}
	}
}
