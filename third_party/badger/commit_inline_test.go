package badger

import (
	"fmt"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
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

type roundCounter struct{ rounds atomic.Int64 }

func (l *roundCounter) Errorf(string, ...interface{})   {}
func (l *roundCounter) Warningf(string, ...interface{}) {}
func (l *roundCounter) Infof(string, ...interface{})    {}
func (l *roundCounter) Debugf(f string, _ ...interface{}) {
	if strings.HasPrefix(f, "writeRequests called") {
		l.rounds.Add(1)
	}
}

// With the write done in doWrites, requests that arrive during one write
// still go out together as the next round, as v4.9.6 grouped them (about
// 20 commits a round here); a select that offered pendingCh beside
// writeCh ended rounds after about two (the review of the seventh patch).
func TestConcurrentCommitsAreWrittenInRounds(t *testing.T) {
	lg := &roundCounter{}
	db, err := Open(DefaultOptions(t.TempDir()).WithLogger(lg).WithSyncWrites(true))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lg.rounds.Store(0)
	const callers, each = 64, 50
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if err := db.Update(func(txn *Txn) error { return txn.Set(fmt.Appendf(nil, "%d-%d", c, i), []byte("v")) }); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rounds := lg.rounds.Load()
	if per := float64(callers*each) / float64(rounds); per < 5 {
		t.Fatalf("%d commits in %d rounds: %.1f a round, want 5 or more", callers*each, rounds, per)
	}
}
