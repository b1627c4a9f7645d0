package badger

import (
	"runtime/metrics"
	"testing"
)

// A commit is written to the memtable by the write goroutine itself
// (Ratchet's seventh patch, doWrites): v4.9.6 started a goroutine for the
// write of every commit.
func TestACommitStartsNoGoroutine(t *testing.T) {
	db, err := Open(DefaultOptions(t.TempDir()).WithMemTableLog(false).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	commit := func(i int) {
		if err := db.Update(func(txn *Txn) error { return txn.Set([]byte{byte(i), byte(i >> 8)}, []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		commit(i)
	}
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	const n = 200
	before := created()
	for i := range n {
		commit(10 + i)
	}
	if got := created() - before; got >= n/10 {
		t.Fatalf("%d commits started %d goroutines, want next to none", n, got)
	}
}
