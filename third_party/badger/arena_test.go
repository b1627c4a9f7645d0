package badger

import (
	"runtime"
	"runtime/metrics"
	"testing"

	"github.com/dgraph-io/badger/v4/skl"
)

// heapObjects is the Go heap's live and unswept objects in bytes, after a
// collection.
func heapObjects() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// A memtable's arena is outside the Go heap (Ratchet's patch:
// skl.NewArenaBuffer), so the collector's goal, twice the live heap, does
// not count it twice.
func TestAMemtablesArenaIsNotInTheGoHeap(t *testing.T) {
	opt := DefaultOptions(t.TempDir()).
		WithMemTableSize(64 << 20).
		WithMemTableLog(false).
		WithLogger(nil)
	before := heapObjects()
	db, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(txn *Txn) error { return txn.Set([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	grew := heapObjects() - before
	if grew >= 32<<20 {
		t.Fatalf("opening a DB with a 64 MiB memtable grew the Go heap by %d MiB, want under 32 (its arena outside it)", grew>>20)
	}
	runtime.KeepAlive(db)
}

// Closing a DB frees every arena it mapped, the spare included (Ratchet's
// patch: freeArenas), and an arena given back after Close is freed too.
func TestAClosedDBFreesItsArenas(t *testing.T) {
	opt := DefaultOptions(t.TempDir()).
		WithMemTableSize(1 << 20).
		WithValueThreshold(1 << 10).
		WithMemTableLog(false).
		WithLogger(nil)
	before := skl.ArenaBytes()
	db, err := Open(opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if err := db.Update(func(txn *Txn) error { return txn.Set([]byte(k), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
		if err := db.FlushMemTables(); err != nil {
			t.Fatal(err)
		}
	}
	db.arenaMu.Lock()
	kept := db.spareArena != nil
	db.arenaMu.Unlock()
	if !kept {
		t.Fatal("after three flushes no arena is kept")
	}
	if got, want := skl.ArenaBytes()-before, 2*arenaSize(db.opt); got != want {
		t.Fatalf("with a memtable and a spare %d bytes of arenas are mapped, want %d", got, want)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if got := skl.ArenaBytes() - before; got != 0 {
		t.Fatalf("after Close %d bytes of arenas are still mapped, want 0", got)
	}
	db.keepArena(skl.NewArenaBuffer(1 << 20))
	if got := skl.ArenaBytes() - before; got != 0 {
		t.Fatalf("an arena given back after Close left %d bytes mapped, want 0", got)
	}
}
