package badger

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/dgraph-io/badger/v4/y"
)

// A value read from a memtable keeps its bytes after the memtable is flushed
// and the next memtable is built on its arena (Ratchet's patch: keepArena,
// openMemTable, and the copy in DB.get).
func TestAValueReadFromAMemtableKeepsItsBytesAfterItsArenaIsReused(t *testing.T) {
	opt := DefaultOptions(t.TempDir()).
		WithMemTableSize(1 << 20).
		WithValueThreshold(1 << 10).
		WithMemTableLog(false).
		WithLogger(nil)
	db, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	want := bytes.Repeat([]byte("A"), 100)
	if err := db.Update(func(txn *Txn) error { return txn.Set([]byte("k"), want) }); err != nil {
		t.Fatal(err)
	}
	vs, err := db.get(y.KeyWithTs([]byte("k"), math.MaxUint64))
	if err != nil {
		t.Fatal(err)
	}
	got := vs.Value

	// The first memtable goes to a table and its arena to the spare; the
	// next rotation (an empty memtable is not rotated) builds the third
	// memtable on it.
	if err := db.FlushMemTables(); err != nil {
		t.Fatal(err)
	}
	db.arenaMu.Lock()
	kept := db.spareArena != nil
	db.arenaMu.Unlock()
	if !kept {
		t.Fatal("after a flush no arena is kept")
	}
	if err := db.Update(func(txn *Txn) error { return txn.Set([]byte("second"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushMemTables(); err != nil {
		t.Fatal(err)
	}
	for batch := 0; batch < 4; batch++ {
		err := db.Update(func(txn *Txn) error {
			for i := 0; i < 100; i++ {
				k := []byte(fmt.Sprintf("z%d-%03d", batch, i))
				if err := txn.Set(k, bytes.Repeat([]byte("Z"), 100)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the value read before the flush now reads %q, want %q", got, want)
	}
}
