package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// faultyStore is the Badger store with commits or syncs that fail on
// demand, as a full or failing disk would make them.
type faultyStore struct {
	*badgerstore.Store
	failCommit, failSync atomic.Bool
	rerun                atomic.Bool // run the next batch twice, discarding the first run
	// failAfterRun makes commits fail after the batch ran (its writes
	// discarded), as a commit failing in Badger would.
	failAfterRun atomic.Bool
}

var errDiscardRun = errors.New("injected serialization failure")

func (s *faultyStore) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	if s.failCommit.Load() {
		return errors.New("injected commit failure")
	}
	if s.failAfterRun.Load() || s.failSync.Load() {
		err := s.Store.Update(ctx, func(tx ledger.Txn) error {
			if err := fn(tx); err != nil {
				return err
			}
			if s.failSync.Load() {
				// As the store's log failing to sync: the batch may or
				// may not be on disk, and the store refuses writes.
				return fmt.Errorf("injected sync failure: %w", ledger.ErrStoreFailed)
			}
			return errors.New("injected commit failure after the batch ran")
		})
		return err
	}
	if s.rerun.Swap(false) {
		// As a shared store does after a serialization failure: the
		// first run's writes are discarded and fn runs again.
		err := s.Store.Update(ctx, func(tx ledger.Txn) error {
			if err := fn(tx); err != nil {
				return err
			}
			return errDiscardRun
		})
		if !errors.Is(err, errDiscardRun) {
			return err
		}
	}
	return s.Store.Update(ctx, fn)
}

// failures records what the engine tells its observer of failed writes.
type failures struct {
	mu    sync.Mutex
	stage map[string]int
}

func (f *failures) Begin(string, ledger.Decision, time.Duration) {}
func (f *failures) Report(ledger.Outcome, time.Duration)         {}
func (f *failures) Expired(int)                                  {}
func (f *failures) WriteFailed(stage string, ops int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stage[stage] += ops
}

func (f *failures) count(stage string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stage[stage]
}

func faultyHarness(t *testing.T) (*harness, *faultyStore) {
	t.Helper()
	if testBackend == "postgres" {
		t.Skip("injects faults into the Badger store")
	}
	h := newHarness(t, testRules())
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var fs *faultyStore
	h.obs = &failures{stage: map[string]int{}}
	h.wrap = func(st *badgerstore.Store) ledger.Store {
		fs = &faultyStore{Store: st}
		return fs
	}
	h.open()
	h.wrap = nil
	return h, fs
}

// beginUnavailable begins key and wants it refused as unavailable with a
// message that says why.
func beginUnavailable(t *testing.T, h *harness, key, why string) {
	t.Helper()
	_, err := h.eng.Begin(context.Background(), pay(key, "acct_1", 1_000_000))
	if ledger.CodeOf(err) != ledger.CodeUnavailable {
		t.Fatalf("ledger.CodeOf(err) != ledger.CodeUnavailable: begin %s: %v, want unavailable saying %q", key, err, why)
	}
	if !strings.Contains(err.Error(), why) {
		t.Fatalf("!strings.Contains(err.Error(), why): begin %s: %v, want unavailable saying %q", key, err, why)
	}
}

// A commit that fails, before the batch ran or after (its writes then
// discarded by Badger), records nothing: not in the effects, and not in
// the state counts and audit head the writer keeps as it last wrote them.
func TestFailedCommitRecordsNothing(t *testing.T) {
	for name, fault := range map[string]func(*faultyStore) *atomic.Bool{
		"before the batch runs": func(fs *faultyStore) *atomic.Bool { return &fs.failCommit },
		"after the batch ran":   func(fs *faultyStore) *atomic.Bool { return &fs.failAfterRun },
	} {
		t.Run(name, func(t *testing.T) {
			h, fs := faultyHarness(t)
			first := h.beginWant(pay("fault:1", "acct_1", 1_000_000), ledger.DecisionExecute)
			fault(fs).Store(true)
			beginUnavailable(t, h, "fault:2", "nothing was recorded")
			fault(fs).Store(false)
			if n := h.obs.(*failures).count("commit"); n != 1 {
				t.Fatalf("observer told of %d failed commits, want 1", n)
			}
			// Nothing of the failed begin was kept; the engine goes on.
			if r := h.beginWant(pay("fault:2", "acct_1", 1_000_000), ledger.DecisionExecute); r.Attempt != 1 {
				t.Fatalf("attempt after a failed commit: %d", r.Attempt)
			}
			h.beginWant(pay("fault:1", "acct_1", 1_000_000), ledger.DecisionInFlight)
			h.report(first.EffectID, ledger.OutcomeSucceeded)
			for _, when := range []string{"after a failed commit", "after a reopen"} {
				assertStateCounts(t, h)
				recs, heads := auditOf(t, h)
				if brk := ledger.VerifyAudit(recs, heads); brk != nil {
					t.Fatalf("the audit log does not verify %s: %v", when, brk)
				}
				h.reopen() // what is stored, read afresh, says the same
			}
		})
	}
}

func TestFailedSyncStopsWritesUntilRestart(t *testing.T) {
	h, fs := faultyHarness(t)
	ctx := context.Background()
	first := h.beginWant(pay("fault:1", "acct_1", 1_000_000), ledger.DecisionExecute)
	fs.failSync.Store(true)
	beginUnavailable(t, h, "fault:2", "restarted")
	if n := h.obs.(*failures).count("sync"); n != 1 {
		t.Fatalf("observer told of %d ops whose sync failed, want 1", n)
	}
	// A later sync might succeed without the pages the failed one lost:
	// the engine takes no more writes, and readiness says so.
	fs.failSync.Store(false)
	if _, err := h.eng.Begin(ctx, pay("fault:3", "acct_1", 1_000_000)); ledger.CodeOf(err) != ledger.CodeUnavailable {
		t.Fatalf("begin after a failed sync: %v", err)
	}
	if err := h.eng.Ping(ctx); ledger.CodeOf(err) != ledger.CodeUnavailable {
		t.Fatalf("ping after a failed sync: %v", err)
	}
	if n := h.obs.(*failures).count("stopped"); n != 2 {
		t.Fatalf("observer told of %d refused ops, want 2 (a begin, a ping)", n)
	}
	if _, err := h.eng.Get(ctx, "", first.EffectID, ""); err != nil {
		t.Fatalf("reads stop too: %v", err)
	}
	// Restarted, the ledger is what is on disk, and writes go on.
	if err := h.eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	h.open()
	h.beginWant(pay("fault:1", "acct_1", 1_000_000), ledger.DecisionInFlight)
	h.beginWant(pay("fault:3", "acct_1", 1_000_000), ledger.DecisionExecute)
}

func TestRerunBatchIsDecidedAfresh(t *testing.T) {
	h, fs := faultyHarness(t)
	ctx := context.Background()
	fs.rerun.Store(true)
	first := h.beginWant(pay("rerun:1", "acct_1", 1_000_000), ledger.DecisionExecute)
	if n := h.eng.Reruns(); n != 1 {
		t.Fatalf("Reruns = %d, want 1", n)
	}
	if first.Attempt != 1 {
		t.Fatalf("attempt %d after a rerun", first.Attempt)
	}
	h.beginWant(pay("rerun:1", "acct_1", 1_000_000), ledger.DecisionInFlight)
	h.report(first.EffectID, ledger.OutcomeSucceeded)
	// The discarded run spent nothing.
	budgets, err := h.eng.Budgets(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range budgets {
		if b.Name == "daily-spend" {
			found = true
			if b.Counted != 1_000_000 {
				t.Fatalf("daily-spend counted %d after one execute of 1 000 000", b.Counted)
			}
		}
	}
	if !found {
		t.Fatal("no daily-spend counter")
	}
}
