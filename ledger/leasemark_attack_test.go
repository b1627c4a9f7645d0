package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// Adversarial tests of the deferred lease entries (leasemark.go, branch
// revlease). The promise under attack: every effect handed a lease that is
// never reported is turned indeterminate by the reaper when its lease
// ends, counted against its agent, whatever happens.

// readFaults is a Badger store whose transactions fail to read one key
// while failKey is set, and whose commits fail while failCommit is.
type readFaults struct {
	*badgerstore.Store
	mu         sync.Mutex
	failKey    []byte
	failCommit atomic.Bool
}

var errInjectedRead = errors.New("injected read failure")

func (s *readFaults) setFailKey(k []byte) {
	s.mu.Lock()
	s.failKey = k
	s.mu.Unlock()
}

func (s *readFaults) fails(k []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failKey != nil && bytes.Equal(k, s.failKey)
}

func (s *readFaults) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	if s.failCommit.Load() {
		return errors.New("injected commit failure")
	}
	return s.Store.Update(ctx, func(tx ledger.Txn) error { return fn(&readFaultTxn{tx, s}) })
}

type readFaultTxn struct {
	ledger.Txn
	s *readFaults
}

func (t *readFaultTxn) Get(k []byte) ([]byte, error) {
	if t.s.fails(k) {
		return nil, errInjectedRead
	}
	return t.Txn.Get(k)
}

func readFaultHarness(t *testing.T) (*harness, *readFaults) {
	t.Helper()
	if testBackend == "postgres" {
		t.Skip("injects faults into the Badger store")
	}
	h := newHarness(t, testRules())
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var fs *readFaults
	h.wrap = func(st *badgerstore.Store) ledger.Store {
		fs = &readFaults{Store: st}
		return fs
	}
	h.open()
	h.wrap = nil
	return h, fs
}

// stateOf is an effect's state and reason, for cmp.Diff.
type stateOf struct {
	ID     string
	State  ledger.State
	Reason string
}

func statesOf(h *harness, ids ...string) []stateOf {
	var out []stateOf
	for _, id := range ids {
		eff := h.get(id)
		out = append(out, stateOf{id, eff.State, eff.Reason})
	}
	return out
}

func indeterminate(ids ...string) []stateOf {
	var out []stateOf
	for _, id := range ids {
		out = append(out, stateOf{id, ledger.StateIndeterminate, ledger.ReasonLeaseExpired})
	}
	return out
}

// A checkpoint whose op fails (a read of a deferred effect's record
// fails once) must leave the deferred leases to the next checkpoint: once
// the read works again and the lease ends, a reap expires the effect. No
// further begin comes to mark the set stale again.
func TestACheckpointThatFailsToReadLosesNoDeferredLease(t *testing.T) {
	h, fs := readFaultHarness(t)
	a := h.beginWant(email("checkpoint-read-fails", "bot"), ledger.DecisionExecute)
	// A failed commit empties the writer's caches, so the checkpoint
	// reads a's record from the store.
	fs.failCommit.Store(true)
	if _, err := h.eng.Begin(context.Background(), email("refused", "bot")); ledger.CodeOf(err) != ledger.CodeUnavailable {
		t.Fatalf("begin with the commit failing: %v, want unavailable", err)
	}
	fs.failCommit.Store(false)
	fs.setFailKey(append([]byte("e\x00"), a.EffectID...))
	if _, err := h.eng.Reap(context.Background()); err == nil {
		t.Fatal("reap (its checkpoint) with the effect's record unreadable succeeded")
	}
	fs.setFailKey(nil)
	h.clock.Advance(61 * time.Second)
	n, err := h.eng.Reap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("reap after the lease ended expired %d effects, want 1 (%s)", n, a.EffectID)
	}
	wantUnreported(t, h, "bot", a.EffectID)
}

// unreported is what an agent's next begin says of its unreported
// expiries.
type unreported struct {
	Count  int
	Oldest string
}

// wantUnreported begins a fresh effect for agent and wants its warning to
// count the effects given (the oldest first) as expired unreported: what
// the reaper's expiry writes, which a read's lazy view does not.
func wantUnreported(t *testing.T, h *harness, agent string, ids ...string) {
	t.Helper()
	r := h.beginWant(email("after-"+agent+"-"+time.Now().Format("150405.000000000"), agent), ledger.DecisionExecute)
	var got unreported
	if w := r.IntegrationWarning; w != nil {
		got = unreported{w.UnreportedCount, w.OldestEffectID}
	}
	want := unreported{}
	if len(ids) > 0 {
		want = unreported{len(ids), ids[0]}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent %s's unreported expiries (-want +got):\n%s", agent, diff)
	}
}

// rawKey reads and then sets or deletes (set returns nil) one key of the
// store with the engine closed; it reopens the engine unless h.eng is nil
// (it then leaves it closed).
func (h *harness) rawKey(k []byte, set func(old []byte) []byte) {
	h.t.Helper()
	reopen := h.eng != nil
	if reopen {
		if err := h.eng.Close(context.Background()); err != nil {
			h.t.Fatal(err)
		}
	}
	st := h.openStore()
	err := st.Update(context.Background(), func(tx ledger.Txn) error {
		old, err := tx.Get(k)
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		if v := set(old); v != nil {
			return tx.Set(k, v)
		}
		return tx.Delete(k)
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		h.t.Fatal(err)
	}
	if reopen {
		h.open()
	}
}

var leaseMarkKey = []byte("m\x00lease-mark")

// A ledger of many effects made after its lease mark opens in well under
// 5 s: one a downgrade left (an older Ratchet ran it, not moving the mark,
// then this one opened it again), or one whose checkpoints did not run
// before a kill; and an old ledger (no mark) opens as fast as before.
// RATCHET_LEASEMARK_EFFECTS effects (a million for the brief's figure; the
// test is skipped without it, as making them takes minutes).
func TestALedgerOfAMillionEffectsAfterItsMarkOpensInUnderFiveSeconds(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("the mark and its walk are the exclusive store's")
	}
	n, _ := strconv.Atoi(os.Getenv("RATCHET_LEASEMARK_EFFECTS"))
	if n == 0 {
		t.Skip("RATCHET_LEASEMARK_EFFECTS=1000000 makes the ledger")
	}
	h := newHarness(t, nil)
	var mark []byte
	h.rawKey(leaseMarkKey, func(old []byte) []byte { mark = slices.Clone(old); return old })
	if mark == nil {
		t.Fatal("a new ledger has no lease mark after its first open")
	}
	start := time.Now()
	const workers = 32
	var wg sync.WaitGroup
	var pending []string
	var mu sync.Mutex
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for i := w; i < n; i += workers {
				r, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("m-%d", i), EffectType: "test.op", AgentID: "million"})
				if err != nil {
					t.Error(err)
					return
				}
				if i%100 == 0 { // one in a hundred left pending
					mu.Lock()
					pending = append(pending, r.EffectID)
					mu.Unlock()
					continue
				}
				if _, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Attempt: r.Attempt, Outcome: ledger.OutcomeSucceeded}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d effects made in %v", n, time.Since(start).Round(time.Millisecond))
	// The mark back where it was: every effect made since is after it.
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	h.rawKey(leaseMarkKey, func([]byte) []byte { return mark })
	begin := time.Now()
	h.open()
	stale := time.Since(begin)
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	begin = time.Now()
	h.open()
	clean := time.Since(begin)
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	h.rawKey(leaseMarkKey, func([]byte) []byte { return nil }) // as a ledger written before marks
	begin = time.Now()
	h.open()
	old := time.Since(begin)
	t.Logf("open of %d effects: after a stale mark %v, after a clean close %v, without a mark %v", n,
		stale.Round(time.Millisecond), clean.Round(time.Millisecond), old.Round(time.Millisecond))
	for name, d := range map[string]time.Duration{"stale mark": stale, "clean close": clean, "no mark": old} {
		if d > 5*time.Second {
			t.Errorf("open with a %s took %v, want well under 5 s", name, d)
		}
	}
	h.clock.Advance(2 * time.Minute)
	if got, err := h.eng.Reap(context.Background()); err != nil || got != len(pending) {
		t.Errorf("reap after every lease ended = %d, %v; want %d", got, err, len(pending))
	}
}

// landedSyncFault is a Badger store whose commits, while fail is set,
// land and then report a failed sync (ErrStoreFailed): the batch is on
// disk though its callers were told it may not be.
type landedSyncFault struct {
	*badgerstore.Store
	fail atomic.Bool
}

func (s *landedSyncFault) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	err := s.Store.Update(ctx, fn)
	if err == nil && s.fail.Load() {
		return fmt.Errorf("injected: the batch is on disk, the sync after it failed: %w", ledger.ErrStoreFailed)
	}
	return err
}

// A sync failure after a batch landed (its begin on disk, its caller
// told nothing was sure, the engine fail-stopped, Close without a
// checkpoint): the next open finds the landed effect and the one deferred
// before it, and a reap expires both when their leases end.
func TestASyncFailureWhoseBatchLandedLosesNoLease(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("injects faults into the Badger store")
	}
	h := newHarness(t, nil)
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	var fs *landedSyncFault
	h.wrap = func(st *badgerstore.Store) ledger.Store { fs = &landedSyncFault{Store: st}; return fs }
	h.open()
	h.wrap = nil
	op := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "sync"}
	}
	a := h.beginWant(op("before-the-fault"), ledger.DecisionExecute)
	fs.fail.Store(true)
	if _, err := h.eng.Begin(context.Background(), op("landed")); err == nil {
		t.Fatal("a begin whose sync failed succeeded")
	}
	h.eng.Close(context.Background()) // fail-stopped: no checkpoint
	h.eng = nil
	h.open()
	h.clock.Advance(61 * time.Second)
	n, err := h.eng.Reap(context.Background())
	if err != nil || n != 2 {
		t.Errorf("reap after the leases ended = %d, %v; want 2 (%s and the landed one)", n, err, a.EffectID)
	}
	r := h.beginWant(op("after"), ledger.DecisionExecute)
	if got := r.IntegrationWarning; got == nil || got.UnreportedCount != 2 || got.OldestEffectID != a.EffectID {
		t.Errorf("the agent's warning: %+v, want 2 unreported, the oldest %s", got, a.EffectID)
	}
}

// A clock stepped back, then forward, while the engine runs: a lease
// deferred before the step and one after are both reaped when they end,
// and not before.
func TestAClockSteppedBackWhileRunningLosesNoLease(t *testing.T) {
	h := newHarness(t, nil)
	op := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "clock"}
	}
	a := h.beginWant(op("before-the-step"), ledger.DecisionExecute)
	h.clock.Advance(-time.Hour)
	b := h.beginWant(op("after-the-step"), ledger.DecisionExecute)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 0 {
		t.Fatalf("reap with no lease ended = %d, %v", n, err)
	}
	h.clock.Advance(61 * time.Second) // b's lease ended; a's ends an hour on
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 1 {
		t.Errorf("reap once b's lease ended = %d, %v; want 1 (%s)", n, err, b.EffectID)
	}
	h.reopen()
	h.clock.Advance(time.Hour)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 1 {
		t.Errorf("reap once a's lease ended, after a reopen = %d, %v; want 1 (%s)", n, err, a.EffectID)
	}
	wantUnreported(t, h, "clock", b.EffectID, a.EffectID) // b's lease ended first
}

// A lease shorter than the checkpoint interval and one of the longest
// allowed are each reaped when they end.
func TestLeasesShorterThanACheckpointAndVeryLongOnesAreReapedWhenTheyEnd(t *testing.T) {
	h := newHarness(t, nil)
	short := ledger.BeginRequest{IdempotencyKey: "short", EffectType: "test.op", AgentID: "leases", LeaseSeconds: 1}
	long := ledger.BeginRequest{IdempotencyKey: "long", EffectType: "test.op", AgentID: "leases", LeaseSeconds: ledger.DefaultMaxLeaseSeconds}
	s := h.beginWant(short, ledger.DecisionExecute)
	l := h.beginWant(long, ledger.DecisionExecute)
	h.clock.Advance(1500 * time.Millisecond)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 1 {
		t.Errorf("reap 1.5 s on = %d, %v; want 1 (%s)", n, err, s.EffectID)
	}
	h.reopen()
	h.clock.Advance(time.Duration(ledger.DefaultMaxLeaseSeconds-2) * time.Second)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 0 {
		t.Errorf("reap before the long lease ended = %d, %v; want 0", n, err)
	}
	h.clock.Advance(2 * time.Second)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 1 {
		t.Errorf("reap once the long lease ended = %d, %v; want 1 (%s)", n, err, l.EffectID)
	}
	wantUnreported(t, h, "leases", s.EffectID, l.EffectID)
}

// Leases that are not a new effect's first (a re-attempt of a failed
// effect, of an indeterminate one resolved as failed, an approved begin)
// left unreported are reaped when they end, and count against the agent.
func TestReattemptsAndApprovedBeginsLeftUnreportedAreReaped(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	op := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "bot"}
	}
	failed := h.beginWant(op("failed-then-again"), ledger.DecisionExecute)
	h.report(failed.EffectID, ledger.OutcomeFailed)
	again := h.beginWant(op("failed-then-again"), ledger.DecisionExecute)
	if again.Attempt != 2 {
		t.Fatalf("re-attempt: %+v", again)
	}
	lost := h.beginWant(op("indeterminate-then-again"), ledger.DecisionExecute)
	h.clock.Advance(61 * time.Second)
	if n, err := h.eng.Reap(ctx); err != nil || n != 2 {
		t.Fatalf("reap = %d, %v; want 2 (%s, %s)", n, err, again.EffectID, lost.EffectID)
	}
	if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: lost.EffectID, Resolution: ledger.OutcomeFailed, Note: "checked: it did not happen"}); err != nil {
		t.Fatal(err)
	}
	lost2 := h.beginWant(op("indeterminate-then-again"), ledger.DecisionExecute)
	ask := h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	approved := h.beginWant(pay("big", "acct_1", 150_000_000), ledger.DecisionExecute)
	h.clock.Advance(61 * time.Second)
	if n, err := h.eng.Reap(ctx); err != nil || n != 2 {
		t.Errorf("reap = %d, %v; want 2 (%s, %s)", n, err, lost2.EffectID, approved.EffectID)
	}
	// The agent's expiries still unresolved: again, lost2 and the
	// approved payment ("bot" began them all; lost was resolved).
	r := h.beginWant(op("after"), ledger.DecisionExecute)
	if got := r.IntegrationWarning; got == nil || got.UnreportedCount != 3 || got.OldestEffectID != again.EffectID {
		t.Errorf("the agent's warning: %+v, want 3 unreported, the oldest %s", got, again.EffectID)
	}
}

// Many goroutines on one key, each reporting failed what it was handed
// so that the next begin is a new attempt, under -race: the last attempt,
// left unreported, is reaped once, and the set of deferred leases does
// not keep the earlier attempts.
func TestManyGoroutinesOnOneKeyLeaveOneLeaseToReap(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	req := ledger.BeginRequest{IdempotencyKey: "one-key", EffectType: "test.op", AgentID: "race"}
	var wg sync.WaitGroup
	var executes atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for executes.Load() < 100 {
				r, err := h.eng.Begin(ctx, req)
				if err != nil {
					t.Error(err)
					return
				}
				if r.Decision != ledger.DecisionExecute {
					continue
				}
				if executes.Add(1) >= 100 {
					return // the 100th attempt stays pending
				}
				if _, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Attempt: r.Attempt, Outcome: ledger.OutcomeFailed}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	h.clock.Advance(61 * time.Second)
	n, err := h.eng.Reap(ctx)
	if err != nil || n != 1 {
		t.Errorf("reap = %d, %v; want 1", n, err)
	}
	eff := h.get(h.begin(req).EffectID)
	if diff := cmp.Diff(stateOf{eff.EffectID, ledger.StateIndeterminate, ledger.ReasonLeaseExpired}, stateOf{eff.EffectID, eff.State, eff.Reason}); diff != "" {
		t.Errorf("the key's effect (-want +got):\n%s", diff)
	}
}

// A flood of begins never reported keeps the writer's deferred set
// bounded (the rest get their entries at begin), a reap's checkpoint
// empties it, and every lease is reaped when it ends.
func TestAFloodOfUnreportedBeginsKeepsTheDeferredSetBounded(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	n, workers, bound := 12_000, 16, 4096
	if testBackend == "postgres" {
		n = 3000 // nothing is deferred there: it checks the count is 0 and the reap
	}
	if s, _ := strconv.Atoi(os.Getenv("RATCHET_FLOOD")); s > 0 {
		n = s
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if _, err := h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("flood-%d", i), EffectType: "test.op", AgentID: fmt.Sprintf("flood-%d", i%64)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := ledger.DeferredLeases(h.eng); got > bound {
		t.Errorf("after %d unreported begins the writer defers %d leases, want at most %d", n, got, bound)
	}
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(0, ledger.DeferredLeases(h.eng)); diff != "" {
		t.Errorf("deferred leases after a reap's checkpoint (-want +got):\n%s", diff)
	}
	h.clock.Advance(61 * time.Second)
	if got, err := h.eng.Reap(ctx); err != nil || got != n {
		t.Errorf("reap after the leases ended = %d, %v; want %d", got, err, n)
	}
}

// A power cut: Badger's files as of an earlier point (the open's
// checkpoint, or later) and the store's log as of the last answered batch.
// The ledger opens from them with every unreported lease's entry, whether
// its begin came before a checkpoint of the deferred set or after it, and
// a reap expires them all.
func TestAPowerCutLosesNoDeferredLease(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("cuts the power under a Badger ledger")
	}
	isWAL := func(n string) bool { return strings.HasPrefix(n, "ratchet-wal.") }
	for _, when := range []string{"at open", "after the first begins", "after the checkpoint", "after the last begin"} {
		t.Run(when, func(t *testing.T) {
			h := newHarness(t, nil)
			op := func(key string) ledger.BeginRequest {
				return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "power"}
			}
			snap := t.TempDir()
			if err := os.Mkdir(snap+"/ledger", 0o700); err != nil {
				t.Fatal(err)
			}
			badger := func(at string) {
				if at == when {
					copyFiles(t, h.dir+"/ledger", snap+"/ledger", func(n string) bool { return !isWAL(n) })
				}
			}
			badger("at open")
			a := h.beginWant(op("a"), ledger.DecisionExecute)
			b := h.beginWant(op("b"), ledger.DecisionExecute)
			done := h.beginWant(op("done"), ledger.DecisionExecute)
			h.report(done.EffectID, ledger.OutcomeSucceeded)
			badger("after the first begins")
			if _, err := h.eng.Reap(context.Background()); err != nil { // the checkpoint: a's and b's entries, a mark
				t.Fatal(err)
			}
			badger("after the checkpoint")
			c := h.beginWant(op("c"), ledger.DecisionExecute)
			d := h.beginWant(op("d"), ledger.DecisionExecute)
			h.report(d.EffectID, ledger.OutcomeSucceeded)
			badger("after the last begin")
			copyFiles(t, h.dir+"/ledger", snap+"/ledger", isWAL) // the log as of the last answer: the power cut
			cut := *h
			cut.t, cut.dir, cut.eng = t, snap, nil
			cut.open()
			t.Cleanup(func() { cut.eng.Close(context.Background()) })
			cut.clock.Advance(61 * time.Second)
			n, err := cut.eng.Reap(context.Background())
			if err != nil || n != 3 {
				t.Errorf("reap after the leases ended = %d, %v; want 3 (%s, %s, %s)", n, err, a.EffectID, b.EffectID, c.EffectID)
			}
			wantUnreported(t, &cut, "power", a.EffectID, b.EffectID, c.EffectID)
		})
	}
}

// copyFiles copies the files of from whose names match into to.
func copyFiles(t *testing.T, from, to string, match func(string) bool) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || !match(e.Name()) {
			continue
		}
		b, err := os.ReadFile(from + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+"/"+e.Name(), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// A ledger killed with leases deferred, backed up offline and restored
// into an empty data dir: the restored ledger reaps every lease the
// killed one handed out (the mark travels in the backup).
func TestARestoredBackupOfAKilledLedgerReapsItsLeases(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("kills a process holding a Badger ledger; backup and restore are Badger's")
	}
	h := newHarness(t, nil)
	h.eng.Close(context.Background())
	h.eng = nil
	out := runCrashChild(t, h.dir, "load", "", func(begun, _ int, since time.Duration) bool {
		return begun >= 200 && since > 1200*time.Millisecond
	})
	pending := pendingOf(out)
	src, err := badgerstore.Open(h.dir+"/ledger", &badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if err := src.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	src.Close()
	restored := *h
	restored.t, restored.dir = t, t.TempDir()
	dst, err := badgerstore.Open(restored.dir+"/ledger", &badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := dst.Restore(&backup); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	restored.clock.t = time.Now()
	restored.open()
	t.Cleanup(func() { restored.eng.Close(context.Background()) })
	stillPending := 0
	for _, id := range pending {
		if restored.get(id).State == ledger.StatePending {
			stillPending++
		}
	}
	restored.clock.Advance(2 * time.Minute)
	n, err := restored.eng.Reap(context.Background())
	if err != nil || n < stillPending || stillPending == 0 {
		t.Errorf("reap of the restored ledger = %d, %v; want at least the %d pending effects the child was told of", n, err, stillPending)
	}
}

// On a shared store (PostgreSQL) nothing is deferred: a begin writes its
// lease entry at once and its report deletes it, so another replica sees
// the entry while the first still runs, and reaps the lease when it ends.
func TestASharedStoresBeginWritesItsLeaseEntryAtOnce(t *testing.T) {
	if testBackend != "postgres" {
		t.Skip("the shared store's behaviour")
	}
	h := newHarness(t, nil)
	ctx := context.Background()
	other, err := ledger.New(ledger.Options{Store: h.openStore(), Secret: h.secret, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	leases := func() int {
		conn, err := pgx.Connect(ctx, pgDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+h.schema+".kv WHERE substring(k from 1 for 2) = '\\x6c00'::bytea").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	op := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "replica"}
	}
	done := h.beginWant(op("done"), ledger.DecisionExecute)
	if diff := cmp.Diff(1, leases()); diff != "" {
		t.Errorf("lease entries after a begin (-want +got):\n%s", diff)
	}
	h.report(done.EffectID, ledger.OutcomeSucceeded)
	if diff := cmp.Diff(0, leases()); diff != "" {
		t.Errorf("lease entries after its report (-want +got):\n%s", diff)
	}
	open := h.beginWant(op("open"), ledger.DecisionExecute)
	if diff := cmp.Diff(0, ledger.DeferredLeases(h.eng)); diff != "" {
		t.Errorf("deferred leases on a shared store (-want +got):\n%s", diff)
	}
	h.clock.Advance(61 * time.Second)
	if n, err := other.Reap(ctx); err != nil || n != 1 {
		t.Errorf("the other replica's reap = %d, %v; want 1 (%s)", n, err, open.EffectID)
	}
}

// A clean Close leaves every pending effect with its lease entry (what a
// binary from before lease marks needs: the upgrade notes allow one only
// after a clean Close), even when a checkpoint failed before it.
func TestACleanCloseAfterAFailedCheckpointLeavesEveryLeaseEntry(t *testing.T) {
	h, fs := readFaultHarness(t)
	a := h.beginWant(email("checkpoint-read-fails", "bot"), ledger.DecisionExecute)
	fs.failCommit.Store(true)
	if _, err := h.eng.Begin(context.Background(), email("refused", "bot")); ledger.CodeOf(err) != ledger.CodeUnavailable {
		t.Fatalf("begin with the commit failing: %v, want unavailable", err)
	}
	fs.failCommit.Store(false)
	fs.setFailKey(append([]byte("e\x00"), a.EffectID...))
	if _, err := h.eng.Reap(context.Background()); err == nil {
		t.Fatal("reap (its checkpoint) with the effect's record unreadable succeeded")
	}
	fs.setFailKey(nil)
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := badgerstore.Open(h.dir+"/ledger", &h.opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = st.View(context.Background(), func(r ledger.Reader) error {
		return r.Scan([]byte("l\x00"), nil, func(k, _ []byte) (bool, error) {
			got = append(got, string(k[11:]))
			return true, nil
		})
	})
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	if diff := cmp.Diff([]string{a.EffectID}, got); diff != "" {
		t.Errorf("lease entries on disk after a clean Close (-want +got):\n%s", diff)
	}
}

// reaps counts the effects the engine reports expired.
type reaps struct{ n atomic.Int64 }

func (r *reaps) Begin(string, ledger.Decision, time.Duration) {}
func (r *reaps) Report(ledger.Outcome, time.Duration)         {}
func (r *reaps) Expired(n int)                                { r.n.Add(int64(n)) }
func (r *reaps) WriteFailed(string, int)                      {}

// The background reaper on the real clock, with one-second leases (no
// longer than the checkpoint interval) handed out by many goroutines, half
// of them reported: every unreported one is expired by the reaper alone
// soon after its lease ends, and none reported is. Run it under -race.
func TestTheBackgroundReaperExpiresShortDeferredLeasesOnTime(t *testing.T) {
	h := newHarness(t, nil)
	h.eng.Close(context.Background())
	obs := &reaps{}
	eng, err := ledger.New(ledger.Options{Store: h.openStore(), Secret: h.secret, PurgeInterval: -1, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var unreported []string
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				r, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("rt-%d-%d", w, i), EffectType: "test.op", AgentID: fmt.Sprintf("rt-%d", w), LeaseSeconds: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 {
					mu.Lock()
					unreported = append(unreported, r.EffectID)
					mu.Unlock()
					continue
				}
				if _, err := eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Attempt: r.Attempt, Outcome: ledger.OutcomeSucceeded}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second) // a lease of 1 s, a checkpoint a second later at most, the sweep
	for obs.n.Load() < int64(len(unreported)) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // nothing more is expired
	if diff := cmp.Diff(int64(len(unreported)), obs.n.Load()); diff != "" {
		t.Errorf("effects the background reaper expired within 5 s of the leases ending (-want +got):\n%s", diff)
	}
	var notExpired []string
	for _, id := range unreported {
		eff, err := eng.Get(ctx, "", id, "")
		if err != nil {
			t.Fatal(err)
		}
		if eff.State != ledger.StateIndeterminate {
			notExpired = append(notExpired, id+" "+string(eff.State))
		}
	}
	if len(notExpired) > 0 {
		t.Errorf("unreported effects not expired: %v", notExpired)
	}
}

// A ledger killed with leases deferred, as a binary that knows no lease
// mark finds it (main before leasemark: it has the store's log, so the
// log's downgrade rule, "an older binary only after a clean Close", does
// not stop it opening a crashed ledger). Such a binary reaps only through
// lease entries. What is promised (design.md, the rollback rule; the open
// logs it): the kill leaves some pending effects without their entry, and
// once this version has opened the ledger and closed it, every pending
// effect has its entry on disk, so an older binary opened then reaps them
// all.
func TestAKilledLedgerHasEveryLeaseEntryAnOlderBinaryNeedsOnceThisVersionOpenedAndClosedIt(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("kills a process holding a Badger ledger")
	}
	h := newHarness(t, nil)
	h.eng.Close(context.Background())
	h.eng = nil
	runCrashChild(t, h.dir, "load", "", func(begun, _ int, since time.Duration) bool {
		return begun >= 200 && since > 1200*time.Millisecond
	})
	missing, pending := h.pendingWithoutEntries() // replays the store's log, as any binary with it does
	t.Logf("after the kill: %d of %d pending effects without their lease entry", len(missing), pending)
	logs := &syncBuf{}
	h.logger = slog.New(slog.NewJSONHandler(logs, nil))
	h.open()
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	if len(missing) > 0 && !strings.Contains(logs.String(), "before a Ratchet without lease marks opens it") {
		t.Errorf("the open that indexed %d leases a kill left does not state the rollback rule; its log:\n%s", len(missing), logs)
	}
	after, pendingAfter := h.pendingWithoutEntries()
	if pendingAfter != pending {
		t.Errorf("an open and close changed the pending effects: %d, then %d", pending, pendingAfter)
	}
	if diff := cmp.Diff([]string(nil), after); diff != "" {
		t.Errorf("pending effects without a lease entry once this version opened and closed the ledger (-want +got):\n%s", diff)
	}
}

// pendingWithoutEntries opens the Badger store itself (no engine: as a
// binary without lease marks sees it) and returns the pending effects
// that have no lease entry, and how many are pending.
func (h *harness) pendingWithoutEntries() ([]string, int) {
	h.t.Helper()
	st, err := badgerstore.Open(h.dir+"/ledger", &h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	entries := map[string]bool{}
	var missing []string
	pending := 0
	err = st.View(context.Background(), func(r ledger.Reader) error {
		if err := r.Scan([]byte("l\x00"), nil, func(k, _ []byte) (bool, error) {
			entries[string(k[11:])] = true
			return true, nil
		}); err != nil {
			return err
		}
		return r.Scan([]byte("e\x00"), nil, func(k, v []byte) (bool, error) {
			ok, _, err := ledger.PendingLease(v)
			if err != nil || !ok {
				return err == nil, err
			}
			pending++
			if id := string(k[2:]); !entries[id] {
				missing = append(missing, id)
			}
			return true, nil
		})
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return missing, pending
}

// A group's step and a compensation from its unwind plan, both left
// unreported (and, between them, a reopen): each is reaped when its lease
// ends, the step shows as unresolved in the next plan, and the step the
// compensation was for stays succeeded (not compensated).
func TestAGroupsStepAndCompensationLeftUnreportedAreReaped(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	cancelHotel := &ledger.Compensation{EffectType: "hotel.cancel", Payload: json.RawMessage(`{"res":"H1"}`)}
	hotel := h.beginWant(step("hotel", "hotel.book", cancelHotel), ledger.DecisionExecute)
	h.report(hotel.EffectID, ledger.OutcomeSucceeded)
	car := h.beginWant(step("car", "car.book", nil), ledger.DecisionExecute) // never reported
	plan, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1", Reason: "user cancelled"})
	if err != nil {
		t.Fatal(err)
	}
	undo := step(plan.Compensations[0].IdempotencyKey, "hotel.cancel", nil)
	undo.Payload, undo.CompensatesEffectID = json.RawMessage(`{"res":"H1"}`), hotel.EffectID
	u := h.beginWant(undo, ledger.DecisionExecute) // never reported
	h.reopen()
	h.clock.Advance(61 * time.Second)
	if n, err := h.eng.Reap(ctx); err != nil || n != 2 {
		t.Errorf("reap = %d, %v; want 2 (%s, %s)", n, err, car.EffectID, u.EffectID)
	}
	got := statesOf(h, car.EffectID, u.EffectID, hotel.EffectID)
	want := append(indeterminate(car.EffectID, u.EffectID), stateOf{hotel.EffectID, ledger.StateSucceeded, ""})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after the reap (-want +got):\n%s", diff)
	}
	wantUnreported(t, h, "planner", car.EffectID, u.EffectID)
}

// A clock that ran an hour ahead in one process (its Close wrote a mark
// an hour ahead), then a process on the right clock, killed with a lease
// deferred: the lease's id still sorts after the mark, and the next open
// finds it and reaps it.
func TestAClockThatRanAheadBeforeARestartLosesNoLease(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("kills a process holding a Badger ledger")
	}
	h := newHarness(t, nil)
	right := time.Now()
	h.clock.t = right.Add(time.Hour)
	first := h.beginWant(ledger.BeginRequest{IdempotencyKey: "ahead", EffectType: "test.op", AgentID: "crash"}, ledger.DecisionExecute)
	h.report(first.EffectID, ledger.OutcomeSucceeded)
	var mark []byte
	h.eng.Close(context.Background()) // the mark: an hour ahead
	h.eng = nil
	h.rawKey(leaseMarkKey, func(old []byte) []byte { mark = slices.Clone(old); return old })
	out := runCrashChild(t, h.dir, "one", right.Format(time.RFC3339Nano), func(begun, _ int, _ time.Duration) bool { return begun == 1 })
	pending := pendingOf(out)
	if len(pending) != 1 {
		t.Fatalf("the child said %q, want one begin", out)
	}
	if pending[0] <= string(mark) {
		t.Errorf("an id made after the restart, %s, sorts before the mark %s", pending[0], mark)
	}
	h.clock.t = right.Add(2 * time.Minute)
	h.open()
	n, err := h.eng.Reap(context.Background())
	if err != nil || n != 1 {
		t.Errorf("reap after the lease ended = %d, %v; want 1 (%s)", n, err, pending[0])
	}
}

// Purge, with leases deferred and finished effects due for it, leaves the
// deferred leases (and the mark) alone: they are reaped when they end,
// after a reopen too.
func TestAPurgeLeavesDeferredLeasesToTheReaper(t *testing.T) {
	h := newHarness(t, nil)
	h.defs.Retention = time.Hour
	h.reopen()
	ctx := context.Background()
	op := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "purge"}
	}
	for i := range 20 {
		r := h.beginWant(op(fmt.Sprintf("old-%d", i)), ledger.DecisionExecute)
		h.report(r.EffectID, ledger.OutcomeSucceeded)
	}
	h.clock.Advance(2 * time.Hour)
	a := h.beginWant(op("deferred"), ledger.DecisionExecute)
	n, err := h.eng.Purge(ctx)
	if err != nil || n != 20 {
		t.Fatalf("purge = %d, %v; want 20", n, err)
	}
	b := h.beginWant(op("after-the-purge"), ledger.DecisionExecute)
	h.reopen()
	h.clock.Advance(61 * time.Second)
	if n, err := h.eng.Reap(ctx); err != nil || n != 2 {
		t.Errorf("reap = %d, %v; want 2 (%s, %s)", n, err, a.EffectID, b.EffectID)
	}
	wantUnreported(t, h, "purge", a.EffectID, b.EffectID)
}

// A sync failure whose batch did not land (the other half of "may or may
// not be on disk"), with a lease deferred before it and a checkpoint in
// the failed batch: after the restart the deferred lease is reaped.
func TestASyncFailureWhoseBatchWasLostLosesNoLease(t *testing.T) {
	h, fs := faultyHarness(t)
	op := func(key string) ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: key, EffectType: "test.op", AgentID: "sync"}
	}
	a := h.beginWant(op("before-the-fault"), ledger.DecisionExecute)
	fs.failSync.Store(true)
	if _, err := h.eng.Reap(context.Background()); err == nil { // its checkpoint is in the lost batch
		t.Fatal("a reap whose checkpoint's sync failed succeeded")
	}
	if _, err := h.eng.Begin(context.Background(), op("lost")); err == nil {
		t.Fatal("a begin after a failed sync succeeded")
	}
	h.eng.Close(context.Background())
	h.eng = nil
	h.open()
	h.clock.Advance(61 * time.Second)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 1 {
		t.Errorf("reap after the lease ended = %d, %v; want 1 (%s)", n, err, a.EffectID)
	}
	wantUnreported(t, h, "sync", a.EffectID)
}

// One deferred effect whose record cannot be read (a damaged block, say)
// must not stop the reaper: another effect's lease, indexed and ended,
// is still reaped, as it is on a store without deferral (where only the
// sweep reads records, and this one's entry is not due).
func TestAnUnreadableDeferredRecordDoesNotStopTheReaper(t *testing.T) {
	h, fs := readFaultHarness(t)
	ctx := context.Background()
	b := h.beginWant(ledger.BeginRequest{IdempotencyKey: "ends", EffectType: "test.op", AgentID: "ends"}, ledger.DecisionExecute)
	if _, err := h.eng.Reap(ctx); err != nil { // b's entry written
		t.Fatal(err)
	}
	a := h.beginWant(ledger.BeginRequest{IdempotencyKey: "unreadable", EffectType: "test.op", AgentID: "other", LeaseSeconds: 3600}, ledger.DecisionExecute)
	fs.failCommit.Store(true) // empties the writer's caches
	h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "refused", EffectType: "test.op", AgentID: "other"})
	fs.failCommit.Store(false)
	fs.setFailKey(append([]byte("e\x00"), a.EffectID...)) // stays unreadable
	h.clock.Advance(61 * time.Second)
	for range 3 { // the background reaper would retry
		h.eng.Reap(ctx)
	}
	fs.setFailKey(nil)
	wantUnreported(t, h, "ends", b.EffectID)
}

// A checkpoint that cannot read one deferred record writes the entries of
// the others, which are reaped when they end though that record still
// does not read, and no lease mark (that effect may be pending without its
// entry, and the rule is that every pending effect before the mark has
// one); once the record reads again, the next checkpoint indexes it and
// moves the mark past it.
func TestACheckpointIndexesTheRecordsItCanReadAndMovesTheMarkOnlyPastAllOfThem(t *testing.T) {
	h, fs := readFaultHarness(t)
	ctx := context.Background()
	markOf := func() string {
		var m []byte
		if err := fs.Store.View(ctx, func(r ledger.Reader) error {
			v, err := r.Get(leaseMarkKey)
			m = v
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return string(m)
	}
	entries := func() []string {
		var got []string
		if err := fs.Store.View(ctx, func(r ledger.Reader) error {
			return r.Scan([]byte("l\x00"), nil, func(k, _ []byte) (bool, error) {
				got = append(got, string(k[11:]))
				return true, nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	before := markOf()
	a := h.beginWant(ledger.BeginRequest{IdempotencyKey: "unreadable", EffectType: "test.op", AgentID: "other", LeaseSeconds: 3600}, ledger.DecisionExecute)
	c := h.beginWant(ledger.BeginRequest{IdempotencyKey: "readable", EffectType: "test.op", AgentID: "ends"}, ledger.DecisionExecute)
	fs.failCommit.Store(true) // empties the writer's caches
	h.eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "refused", EffectType: "test.op", AgentID: "other"})
	fs.failCommit.Store(false)
	fs.setFailKey(append([]byte("e\x00"), a.EffectID...))
	if _, err := h.eng.Reap(ctx); err == nil || !strings.Contains(err.Error(), a.EffectID) {
		t.Errorf("reap with %s unreadable: %v, want an error naming it", a.EffectID, err)
	}
	if diff := cmp.Diff([]string{c.EffectID}, entries()); diff != "" {
		t.Errorf("lease entries after the checkpoint that could not read %s (-want +got):\n%s", a.EffectID, diff)
	}
	if got := markOf(); got != before {
		t.Errorf("the checkpoint that could not read %s moved the lease mark from %s to %s", a.EffectID, before, got)
	}
	h.clock.Advance(61 * time.Second)
	if n, _ := h.eng.Reap(ctx); n != 1 {
		t.Errorf("reap after %s's lease ended, %s still unreadable, expired %d, want 1", c.EffectID, a.EffectID, n)
	}
	wantUnreported(t, h, "ends", c.EffectID)
	fs.setFailKey(nil)
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatalf("reap with every record readable: %v", err)
	}
	if got := entries(); !slices.Contains(got, a.EffectID) {
		t.Errorf("lease entries once %s reads again: %v, want it among them", a.EffectID, got)
	}
	if got := markOf(); got <= a.EffectID {
		t.Errorf("the lease mark once %s reads again is %s, want one after it", a.EffectID, got)
	}
	h.clock.Advance(time.Hour)
	if _, err := h.eng.Reap(ctx); err != nil { // a and the begin wantUnreported made
		t.Fatal(err)
	}
	if diff := cmp.Diff(indeterminate(a.EffectID), statesOf(h, a.EffectID)); diff != "" {
		t.Errorf("after its lease ended (-want +got):\n%s", diff)
	}
	wantUnreported(t, h, "other", a.EffectID)
}

// An open whose walk from the lease mark reads effects says at Info how
// many and why: with the mark far behind the newest effect (an older
// Ratchet ran the ledger since, or checkpoints failed), it says so; a
// clean reopen walks none and says nothing of it.
func TestAnOpenSaysHowManyEffectsItsWalkReadAndWhy(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("the mark and its walk are the exclusive store's")
	}
	h := newHarness(t, nil)
	var mark []byte
	h.rawKey(leaseMarkKey, func(old []byte) []byte { mark = slices.Clone(old); return old })
	h.clock.Advance(10 * time.Minute)
	for i := range 5 {
		r := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("walk-%d", i), EffectType: "test.op", AgentID: "walk"}, ledger.DecisionExecute)
		h.report(r.EffectID, ledger.OutcomeSucceeded)
	}
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	h.rawKey(leaseMarkKey, func([]byte) []byte { return mark }) // as an older binary leaves it
	type line struct {
		Level, Msg, Why string
		Effects         int
	}
	walks := func(logs *syncBuf) []line {
		var out []line
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var ln line
			if json.Unmarshal([]byte(l), &ln) == nil && strings.HasPrefix(ln.Msg, "walked the effects made after the lease mark") {
				ln.Why = strings.SplitN(ln.Why, ":", 2)[0]
				out = append(out, ln)
			}
		}
		return out
	}
	logs := &syncBuf{}
	h.logger = slog.New(slog.NewJSONHandler(logs, nil))
	h.open()
	want := []line{{"INFO", "walked the effects made after the lease mark; none lacked its lease entry", "the lease mark is far behind the newest effect", 5}}
	if diff := cmp.Diff(want, walks(logs)); diff != "" {
		t.Errorf("the open after a stale mark logged (-want +got):\n%s", diff)
	}
	logs = &syncBuf{}
	h.logger = slog.New(slog.NewJSONHandler(logs, nil))
	h.reopen()
	if diff := cmp.Diff([]line(nil), walks(logs)); diff != "" {
		t.Errorf("a clean reopen logged (-want +got):\n%s", diff)
	}
}

// Kills at many moments, before, during and after checkpoints, and
// soon after an open that had leases to index: four rounds of the crash
// child on one ledger, each killed at a different moment. Finally every
// effect the children were told of that is still pending has its entry,
// and one reap, once every lease has ended, expires exactly those.
func TestKillsAtManyMomentsLoseNoLease(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("kills a process holding a Badger ledger")
	}
	h := newHarness(t, nil)
	h.eng.Close(context.Background())
	h.eng = nil
	var pending []string
	for round, after := range []time.Duration{50 * time.Millisecond, 950 * time.Millisecond, 1500 * time.Millisecond, 2600 * time.Millisecond} {
		t.Setenv("LEASEMARK_CHILD_PREFIX", fmt.Sprintf("r%d-", round)) // each round's keys its own
		out := runCrashChild(t, h.dir, "load", "", func(begun, _ int, since time.Duration) bool {
			return begun >= 20 && since > after
		})
		p := pendingOf(out)
		t.Logf("round %d: killed after %v, %d begun, %d left pending", round, after, len(out), len(p))
		pending = append(pending, p...)
	}
	h.clock.t = time.Now()
	h.open()
	entries := map[string]bool{}
	for _, k := range h.storedKeys("l\x00") {
		entries[k[11:]] = true
	}
	var stillPending, missing []string
	for _, id := range pending {
		if h.get(id).State != ledger.StatePending {
			continue
		}
		stillPending = append(stillPending, id)
		if !entries[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d pending effects have no lease entry: %v", len(missing), len(stillPending), missing[:min(3, len(missing))])
	}
	h.clock.Advance(3 * time.Minute)
	n, err := h.eng.Reap(context.Background())
	if err != nil || n < len(stillPending) {
		t.Errorf("reap after every lease ended = %d, %v; want at least %d", n, err, len(stillPending))
	}
	if m, err := h.eng.Reap(context.Background()); err != nil || m != 0 {
		t.Errorf("a second reap = %d, %v; want 0", m, err)
	}
	var left []string
	for _, id := range stillPending {
		if eff := h.get(id); eff.State == ledger.StatePending || eff.Reason != ledger.ReasonLeaseExpired {
			left = append(left, fmt.Sprintf("%s %s %s lease %v", id, eff.State, eff.Reason, eff.LeaseExpiresAt))
		}
	}
	if len(left) > 0 {
		t.Errorf("%d pending effects not expired, e.g. %v", len(left), left[:min(3, len(left))])
	}
	r := h.begin(ledger.BeginRequest{IdempotencyKey: "after-the-kills", EffectType: "test.op", AgentID: "crash"})
	if w := r.IntegrationWarning; w == nil || w.UnreportedCount != n {
		t.Errorf("the agent's warning %+v, want %d unreported", w, n)
	}
}

// A deferred record that stays unreadable after its lease ended does not
// make the background reaper spin: each failed checkpoint must not wake it
// again at once (at its lease's end, now past), so it retries at its
// interval, logging once each time.
func TestAnUnreadableDeferredRecordDoesNotMakeTheReaperSpin(t *testing.T) {
	h, _ := readFaultHarness(t)
	ctx := context.Background()
	if err := h.eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var fs *readFaults
	h.wrap = func(st *badgerstore.Store) ledger.Store { fs = &readFaults{Store: st}; return fs }
	st := h.openStore()
	h.wrap = nil
	logs := &syncBuf{}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, PurgeInterval: -1, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	a, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "unreadable", EffectType: "test.op", AgentID: "spin", LeaseSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	fs.failCommit.Store(true) // empties the writer's caches
	eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "refused", EffectType: "test.op", AgentID: "spin"})
	fs.failCommit.Store(false)
	fs.setFailKey(append([]byte("e\x00"), a.EffectID...))
	time.Sleep(3 * time.Second) // the checkpoint a second after the failure, then the lease's end
	fs.setFailKey(nil)
	n := strings.Count(logs.String(), "background reap failed")
	t.Logf("%d failed reaps logged in 3 s", n)
	if n > 5 {
		t.Errorf("the background reaper failed %d times in 3 s on one unreadable record, want a few (it spins)", n)
	}
}
