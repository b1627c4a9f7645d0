package badgerstore

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// runningCompactors counts the goroutines in Badger's compactor loop.
func runningCompactors() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "badger/v4.(*levelsController).runCompactor(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitCompactors waits up to 10 s for want compactor goroutines.
func waitCompactors(t *testing.T, want int, why string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := runningCompactors()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d compactor goroutines, want %d", why, got, want)
		}
	}
}

func set(t *testing.T, s *Store, k string) {
	t.Helper()
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte(k), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
}

// TestCompactorsStopWhenIdle: Badger's three compactors wake every 50 ms
// each; a store that has written nothing for its idle spell stops them,
// and the next write starts them again before it commits.
func TestCompactorsStopWhenIdle(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{MinFreeBytes: -1, idleAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Badger starts its compactors with go statements during Open; on a
	// loaded machine under -race, CI once saw none of them in the stack
	// dump right after Open returned, so this waits for them.
	waitCompactors(t, 3, "just opened")
	set(t, s, "a")
	waitCompactors(t, 0, "idle")
	if !s.comp.stopped.Load() {
		t.Error("compactors gone but not marked stopped")
	}
	set(t, s, "b")
	if got := runningCompactors(); got != 3 {
		t.Fatalf("after a write: %d compactor goroutines, want 3", got)
	}
	waitCompactors(t, 0, "idle again")
	// Close with the compactors stopped returns (Badger stops them again).
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := runningCompactors(); got != 0 {
		t.Errorf("after Close: %d compactor goroutines", got)
	}
}

// TestCompactorsWithWritesRacingIdle: writers that pause about as long as
// the idle spell, so stops and starts race with writes (run with -race);
// every write lands, and afterwards they still stop when idle and start
// on a write.
func TestCompactorsWithWritesRacingIdle(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{MinFreeBytes: -1, idleAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 40 {
				if err := s.Update(context.Background(), func(tx ledger.Txn) error {
					return tx.Set(fmt.Appendf(nil, "k%d-%d", w, i), []byte("v"))
				}); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(i%3) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	n := 0
	if err := s.View(context.Background(), func(r ledger.Reader) error {
		return r.Scan([]byte("k"), nil, func(k, v []byte) (bool, error) { n++; return true, nil })
	}); err != nil {
		t.Fatal(err)
	}
	if n != 8*40 {
		t.Errorf("%d keys written, want %d", n, 8*40)
	}
	// Stopped and started any number of times, they still stop when idle
	// and start on a write.
	waitCompactors(t, 0, "idle after the race")
	s.comp.mu.Lock()
	s.comp.idleAfter = time.Hour // so that they do not stop again before the count
	s.comp.mu.Unlock()
	set(t, s, "last")
	if got := runningCompactors(); got != 3 {
		t.Errorf("after a write: %d compactor goroutines, want 3", got)
	}
}
