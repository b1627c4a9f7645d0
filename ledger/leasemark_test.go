package ledger_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// keyWrites counts, by kind, the keys a store's transactions set or
// delete.
type keyWrites struct {
	*badgerstore.Store
	mu    sync.Mutex
	kinds map[string]int
}

func (s *keyWrites) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	return s.Store.Update(ctx, func(tx ledger.Txn) error { return fn(&countingTxn{tx, s}) })
}

func (s *keyWrites) count(k []byte) {
	s.mu.Lock()
	s.kinds[string(k[:1])]++
	s.mu.Unlock()
}

func (s *keyWrites) written() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, n := range s.kinds {
		out[k] = n
	}
	clear(s.kinds)
	return out
}

type countingTxn struct {
	ledger.Txn
	s *keyWrites
}

func (t *countingTxn) Set(k, v []byte) error { t.s.count(k); return t.Txn.Set(k, v) }
func (t *countingTxn) Delete(k []byte) error { t.s.count(k); return t.Txn.Delete(k) }

// A begin and its report on a store only this engine writes write no
// lease entry between them: the begin defers it and the report, finding it
// deferred, deletes nothing (two keys a pair fewer).
func TestAPairOnAnExclusiveStoreWritesNoLeaseEntry(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("counts the Badger store's writes; a shared store writes the entry (TestAnUnreportedLeaseHasItsEntryOnceTheEngineCloses)")
	}
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	var ws *keyWrites
	h.wrap = func(st *badgerstore.Store) ledger.Store {
		ws = &keyWrites{Store: st, kinds: map[string]int{}}
		return ws
	}
	h.open()
	h.wrap = nil
	ws.written()
	for i := range 3 {
		r := h.beginWant(pay(fmt.Sprintf("pair-%d", i), "acct_1", 1_000), ledger.DecisionExecute)
		h.report(r.EffectID, ledger.OutcomeSucceeded)
		if n := ws.written()["l"]; n != 0 {
			t.Errorf("pair %d wrote %d lease keys, want 0", i, n)
		}
	}
}

// A lease still unreported when the engine closes has its entry on
// either backend: written at begin on a shared store, by Close's
// checkpoint on an exclusive one.
func TestAnUnreportedLeaseHasItsEntryOnceTheEngineCloses(t *testing.T) {
	h := newHarness(t, testRules())
	r := h.beginWant(pay("open", "acct_1", 1_000), ledger.DecisionExecute)
	done := h.beginWant(pay("done", "acct_1", 1_000), ledger.DecisionExecute)
	h.report(done.EffectID, ledger.OutcomeSucceeded)
	var got []string
	for _, k := range h.storedKeys("l\x00") {
		got = append(got, k[11:])
	}
	if diff := cmp.Diff([]string{r.EffectID}, got); diff != "" {
		t.Errorf("lease entries (-want +got):\n%s", diff)
	}
}

// A lease that never got its entry (deferred, the engine never closed)
// still expires when it ends: Reap expires it, counts it against its
// agent, and the agent's next begin carries the unreported warning.
func TestAnUnreportedLeaseWithoutAnEntryStillExpires(t *testing.T) {
	h := newHarness(t, testRules())
	a := h.beginWant(email("never-reported", "bot"), ledger.DecisionExecute)
	h.clock.Advance(30 * time.Second)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 0 {
		t.Fatalf("reap before the lease ended = %d, %v; want 0", n, err)
	}
	h.clock.Advance(31 * time.Second)
	if n, err := h.eng.Reap(context.Background()); err != nil || n != 1 {
		t.Fatalf("reap after the lease ended = %d, %v; want 1", n, err)
	}
	if eff := h.get(a.EffectID); eff.State != ledger.StateIndeterminate || eff.Reason != ledger.ReasonLeaseExpired {
		t.Fatalf("after reap: %+v", eff)
	}
	r := h.beginWant(email("next", "bot"), ledger.DecisionExecute)
	if r.IntegrationWarning == nil || r.IntegrationWarning.UnreportedCount != 1 || r.IntegrationWarning.OldestEffectID != a.EffectID {
		t.Fatalf("the agent's next begin: warning %+v, want 1 unreported (%s)", r.IntegrationWarning, a.EffectID)
	}
	if n, _ := h.eng.Reap(context.Background()); n != 0 {
		t.Fatalf("a second reap expired %d", n)
	}
}

// A commit that fails loses no lease: a report whose batch was not
// written leaves its effect deferred (it is reaped when its lease ends),
// and so does a checkpoint whose batch was not written.
func TestAFailedCommitLosesNoDeferredLease(t *testing.T) {
	for name, fault := range map[string]func(*faultyStore) *atomic.Bool{
		"before the batch runs": func(fs *faultyStore) *atomic.Bool { return &fs.failCommit },
		"after the batch ran":   func(fs *faultyStore) *atomic.Bool { return &fs.failAfterRun },
	} {
		t.Run(name, func(t *testing.T) {
			h, fs := faultyHarness(t)
			a := h.beginWant(email("reported-in-vain", "bot"), ledger.DecisionExecute)
			b := h.beginWant(email("checkpointed-in-vain", "bot"), ledger.DecisionExecute)
			fault(fs).Store(true)
			if _, err := h.eng.Report(context.Background(), ledger.ReportRequest{EffectID: a.EffectID, Attempt: 1, Outcome: ledger.OutcomeSucceeded}); ledger.CodeOf(err) != ledger.CodeUnavailable {
				t.Fatalf("report with the commit failing: %v, want unavailable", err)
			}
			if _, err := h.eng.Reap(context.Background()); err == nil {
				t.Fatal("reap (its checkpoint) with the commit failing succeeded")
			}
			fault(fs).Store(false)
			h.clock.Advance(61 * time.Second)
			n, err := h.eng.Reap(context.Background())
			if err != nil || n != 2 {
				t.Fatalf("reap after the leases ended = %d, %v; want 2 (%s, %s)", n, err, a.EffectID, b.EffectID)
			}
			for _, id := range []string{a.EffectID, b.EffectID} {
				if eff := h.get(id); eff.State != ledger.StateIndeterminate {
					t.Errorf("%s after reap: %s, want indeterminate", id, eff.State)
				}
			}
		})
	}
}

// Leases deferred in one process and left by a kill: the child process
// this test runs (crashChild) begins and reports effects on its own
// ledger until the test kills it with SIGKILL. Reopened, every pending
// effect the child was told of has its lease entry, and once the leases
// end one reap expires them all.
func TestAKilledLedgerReapsEveryLeaseItHandedOut(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("kills a process holding a Badger ledger")
	}
	h := newHarness(t, nil)
	h.eng.Close(context.Background())
	h.eng = nil
	out := runCrashChild(t, h.dir, "load", "", func(begun, reported int, since time.Duration) bool {
		return begun >= 300 && since > 1500*time.Millisecond // past the first checkpoint or two
	})
	pending := pendingOf(out)
	if len(pending) == 0 {
		t.Fatalf("the child left no effect pending (%d lines)", len(out))
	}
	h.clock.t = time.Now() // the child's leases (60 s, its clock) have not ended yet
	h.open()
	entries := map[string]bool{}
	for _, k := range h.storedKeys("l\x00") {
		entries[k[11:]] = true
	}
	var missing []string
	stillPending := 0
	for _, id := range pending {
		eff := h.get(id)
		if eff.State != ledger.StatePending {
			continue // reported, though killed before it said so
		}
		stillPending++
		if !entries[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d pending effects have no lease entry after the reopen: %v", len(missing), stillPending, missing[:min(5, len(missing))])
	}
	h.clock.Advance(2 * time.Minute)
	n, err := h.eng.Reap(context.Background())
	if err != nil || n < stillPending {
		t.Fatalf("reap after every lease ended = %d, %v; want at least the %d pending effects the child was told of", n, err, stillPending)
	}
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "after", EffectType: "test.op", AgentID: "crash"}, ledger.DecisionExecute)
	if r.IntegrationWarning == nil || r.IntegrationWarning.UnreportedCount != n {
		t.Fatalf("warning %+v, want %d unreported", r.IntegrationWarning, n)
	}
}

// A clock stepped back across a restart: ids made after the open still
// sort after the lease mark, so a lease deferred then and left by a kill
// is found by the next open's walk and reaped.
func TestAClockSteppedBackAcrossARestartLosesNoLease(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("kills a process holding a Badger ledger")
	}
	h := newHarness(t, nil)
	first := h.beginWant(ledger.BeginRequest{IdempotencyKey: "before", EffectType: "test.op", AgentID: "crash"}, ledger.DecisionExecute)
	h.report(first.EffectID, ledger.OutcomeSucceeded)
	h.eng.Close(context.Background()) // the mark is now after first
	h.eng = nil
	back := h.clock.Now().Add(-time.Hour)
	out := runCrashChild(t, h.dir, "one", back.Format(time.RFC3339Nano), func(begun, _ int, _ time.Duration) bool { return begun == 1 })
	pending := pendingOf(out)
	if len(pending) != 1 {
		t.Fatalf("the child said %q, want one begin", out)
	}
	if pending[0] <= first.EffectID {
		t.Errorf("an id made an hour back, after a restart, %s, sorts before one made earlier, %s", pending[0], first.EffectID)
	}
	h.clock.t = back.Add(2 * time.Minute)
	h.open()
	n, err := h.eng.Reap(context.Background())
	if err != nil || n != 1 {
		t.Fatalf("reap after the lease ended = %d, %v; want 1 (%s)", n, err, pending[0])
	}
}

// pendingOf lists the effects a crash child began and did not report.
func pendingOf(out []string) []string {
	reported := map[string]bool{}
	var begun []string
	for _, l := range out {
		if id, ok := strings.CutPrefix(l, "R "); ok {
			reported[id] = true
		} else if id, ok := strings.CutPrefix(l, "B "); ok {
			begun = append(begun, id)
		}
	}
	return slices.DeleteFunc(begun, func(id string) bool { return reported[id] })
}

// runCrashChild runs crashChild on dir's ledger in a process of its own,
// reads what it says until enough says to stop, then kills it with
// SIGKILL and returns its lines.
func runCrashChild(t *testing.T, dir, mode, clock string, enough func(begun, reported int, since time.Duration) bool) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RATCHET_TEST_BACKEND=badger", "LEASEMARK_CHILD_DIR="+dir,
		"LEASEMARK_CHILD_MODE="+mode, "LEASEMARK_CHILD_CLOCK="+clock)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var lines []string
	begun, reported := 0, 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		l := sc.Text()
		lines = append(lines, l)
		switch {
		case strings.HasPrefix(l, "B "):
			begun++
		case strings.HasPrefix(l, "R "):
			reported++
		case strings.HasPrefix(l, "FAIL "):
			t.Fatalf("crash child: %s", l)
		}
		if enough(begun, reported, time.Since(start)) {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("the crash child did not get there in a minute: %d begun, %d reported", begun, reported)
		}
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	return lines
}

// fixedClock is a clock that does not move.
type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// TestCrashChild is the process runCrashChild starts: it opens the
// ledger in LEASEMARK_CHILD_DIR and, in mode "load", begins effects from
// eight goroutines, reporting every other one, with the background reaper
// on; in mode "one" it begins one effect (reaper off, LEASEMARK_CHILD_CLOCK
// its clock). It prints "B id" once a begin is durable and "R id" once a
// report is, and waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("LEASEMARK_CHILD_DIR")
	if dir == "" {
		t.Skip("run by TestAKilledLedgerReapsEveryLeaseItHandedOut and TestAClockSteppedBackAcrossARestartLosesNoLease")
	}
	fail := func(err error) { fmt.Printf("FAIL %v\n", err); os.Exit(1) }
	secret, err := ledger.LoadOrCreateSecret(dir + "/hmac.key")
	if err != nil {
		fail(err)
	}
	st, err := badgerstore.Open(dir+"/ledger", &badgerstore.Options{})
	if err != nil {
		fail(err)
	}
	opts := ledger.Options{Store: st, Secret: secret, PurgeInterval: -1}
	if c := os.Getenv("LEASEMARK_CHILD_CLOCK"); c != "" {
		at, err := time.Parse(time.RFC3339Nano, c)
		if err != nil {
			fail(err)
		}
		opts.Clock = fixedClock(at)
	}
	var mu sync.Mutex
	say := func(f string, a ...any) { mu.Lock(); fmt.Printf(f+"\n", a...); mu.Unlock() }
	ctx := context.Background()
	if os.Getenv("LEASEMARK_CHILD_MODE") == "one" {
		opts.ReapInterval = -1
		eng, err := ledger.New(opts)
		if err != nil {
			fail(err)
		}
		r, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "after-the-step", EffectType: "test.op", AgentID: "crash"})
		if err != nil {
			fail(err)
		}
		say("B %s", r.EffectID)
		select {}
	}
	eng, err := ledger.New(opts)
	if err != nil {
		fail(err)
	}
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				r, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: os.Getenv("LEASEMARK_CHILD_PREFIX") + fmt.Sprintf("w%d-%d", w, i), EffectType: "test.op", AgentID: "crash"})
				if err != nil {
					fail(err)
				}
				say("B %s", r.EffectID)
				if i%2 == 0 {
					if _, err := eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Attempt: r.Attempt, Outcome: ledger.OutcomeSucceeded}); err != nil {
						fail(err)
					}
					say("R %s", r.EffectID)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	select {}
}

// With the background reaper, a lease longer than the checkpoint's second
// and never reported is expired when it ends, not a reaper interval
// later: the checkpoint gives it its entry a second after the begin, and
// the reaper then sleeps until the lease ends.
func TestTheReaperExpiresADeferredLeaseWhenItEnds(t *testing.T) {
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	obs := &expiries{}
	eng, err := ledger.New(ledger.Options{Store: h.openStore(), Secret: h.secret, Policies: h.rules, Observer: obs,
		ReapInterval: time.Hour, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	time.Sleep(50 * time.Millisecond) // the sweep at start has found nothing
	req := email("three-seconds", "bot")
	req.LeaseSeconds = 3
	began := time.Now()
	a := h.beginWant(req, ledger.DecisionExecute)
	deadline := began.Add(10 * time.Second)
	for obs.n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reaper had not expired a three-second lease 10 s later")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(began); took < 3*time.Second {
		t.Errorf("expired after %v, before its lease ended", took)
	}
	r := h.beginWant(email("next", "bot"), ledger.DecisionExecute)
	if r.IntegrationWarning == nil || r.IntegrationWarning.UnreportedCount != 1 || r.IntegrationWarning.OldestEffectID != a.EffectID {
		t.Fatalf("the agent's next begin: warning %+v, want 1 unreported (%s)", r.IntegrationWarning, a.EffectID)
	}
}
