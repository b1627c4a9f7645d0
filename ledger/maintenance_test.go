package ledger_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestRetentionPurge(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	done := h.beginWant(email("old", "bot"), ledger.DecisionExecute)
	h.report(done.EffectID, ledger.OutcomeSucceeded)
	stuck := h.beginWant(email("stuck", "bot"), ledger.DecisionExecute) // will expire
	h.clock.Advance(720*time.Hour - time.Second)
	if n, _ := h.eng.Purge(ctx); n != 0 {
		t.Fatalf("purged %d before retention", n)
	}
	h.clock.Advance(time.Second)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v", n, err)
	}
	if _, err := h.eng.Get(ctx, "", done.EffectID, ""); err == nil {
		t.Fatal("purged effect still readable")
	}
	if eff := h.get(stuck.EffectID); eff.State != ledger.StateIndeterminate {
		t.Fatalf("unresolved effect must survive retention: %+v", eff)
	}
	// A purged key is new again.
	if r := h.beginWant(email("old", "bot"), ledger.DecisionExecute); r.EffectID == done.EffectID {
		t.Fatal("purged key reused the old effect")
	}
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	assertStateCounts(t, h)
}

func TestRetentionPurgesExpiredApprovals(t *testing.T) {
	// An approval request nobody answered, and a grant the agent never
	// used, are gone the retention after they expired (nothing was done or
	// reserved); an answered-and-used one follows its effect.
	h := newHarness(t, testRules())
	ctx := context.Background()
	asked := h.beginWant(pay("ask", "acct_a", 150_000_000), ledger.DecisionApprovalRequired)
	granted := h.beginWant(pay("grant", "acct_b", 150_000_000), ledger.DecisionApprovalRequired)
	h.clock.Advance(time.Hour)
	if _, err := h.eng.Approve(ctx, granted.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	// The request expires 24h after it was made, the grant 24h after it
	// was given; retention (720h) counts from there.
	h.clock.Advance(23*time.Hour + 720*time.Hour - time.Second)
	if n, err := h.eng.Purge(ctx); n != 0 || err != nil {
		t.Fatalf("purged %d (%v) before retention ran out", n, err)
	}
	h.clock.Advance(time.Second)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v; want the unanswered request", n, err)
	}
	if _, err := h.eng.Get(ctx, "", asked.EffectID, ""); err == nil {
		t.Fatal("expired request still readable")
	}
	h.get(granted.EffectID)
	h.clock.Advance(time.Hour)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v; want the unused grant", n, err)
	}
	if _, err := h.eng.Approve(ctx, granted.ApprovalID, "alice", ""); ledger.CodeOf(err) != ledger.CodeApprovalNotFound {
		t.Fatalf("approval of a purged effect: %v", err)
	}
	// A key whose request expired is asked again: the old approval id
	// answers "superseded" while the effect lives, and goes with it.
	again := h.beginWant(pay("ask", "acct_a", 150_000_000), ledger.DecisionApprovalRequired)
	if again.EffectID == asked.EffectID {
		t.Fatal("a purged key reused its effect")
	}
	h.clock.Advance(25 * time.Hour)
	third := h.beginWant(pay("ask", "acct_a", 150_000_000), ledger.DecisionApprovalRequired)
	if third.EffectID != again.EffectID {
		t.Fatalf("third.EffectID != again.EffectID: asked again: %+v", third)
	}
	if third.ApprovalID == again.ApprovalID {
		t.Fatalf("third.ApprovalID == again.ApprovalID: asked again: %+v", third)
	}
	_, err := h.eng.Approve(ctx, again.ApprovalID, "alice", "")
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	h.clock.Advance(24*time.Hour + 720*time.Hour) // the third request's expiry, then the retention
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v", n, err)
	}
	for _, id := range []string{again.ApprovalID, third.ApprovalID} {
		if _, err := h.eng.Approve(ctx, id, "alice", ""); ledger.CodeOf(err) != ledger.CodeApprovalNotFound {
			t.Fatalf("approval %s after its effect was purged: %v", id, err)
		}
	}
	if left := h.storedKeys("a\x00"); len(left) != 0 {
		t.Fatalf("approval index entries left after every effect was purged: %q", left)
	}
	assertStateCounts(t, h)
}

func TestPurgeCleansCountersAndGroups(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	for i, cp := range []string{"acct_a", "acct_b"} {
		r := pay("c"+itoa(int64(i)), cp, 1_000_000)
		r.GroupKey = "trip"
		res := h.beginWant(r, ledger.DecisionExecute)
		h.report(res.EffectID, ledger.OutcomeSucceeded)
	}
	llm := ledger.BeginRequest{IdempotencyKey: "l1", EffectType: "llm.call", RunID: "run1", EstimatedCostMicros: i64(5)}
	h.report(h.beginWant(llm, ledger.DecisionExecute).EffectID, ledger.OutcomeSucceeded)
	before, _ := h.eng.Budgets(ctx, "")
	if len(before) != 4 { // global, two counterparties, one run
		t.Fatalf("budgets before: %+v", before)
	}
	h.clock.Advance(25 * time.Hour) // every 24h window has emptied; the run window never does
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := h.eng.Budgets(ctx, "")
	if len(after) != 1 {
		t.Fatalf("len(after) != 1: budgets after: %+v", after)
	}
	if after[0].Name != "run-budget" {
		t.Fatalf("after[0].Name != \"run-budget\": budgets after: %+v", after)
	}
	if after[0].Counted != 5 {
		t.Fatalf("after[0].Counted != 5: budgets after: %+v", after)
	}
	// Once retention takes the group's last step, the group goes too.
	h.clock.Advance(720 * time.Hour)
	if n, err := h.eng.Purge(ctx); err != nil || n != 3 {
		t.Fatalf("purged %d, %v", n, err)
	}
	_, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip"})
	wantCode(t, err, ledger.CodeGroupNotFound)
	assertStateCounts(t, h)
}

// Purge finds finished effects by their ids: more than one sweep's worth of
// them, made after effects that must stay, all go, and those stay.
func TestPurgeWalksPastEffectsThatStay(t *testing.T) {
	h := newHarness(t, []ledger.Rule{{Match: "job.*"}})
	ctx := context.Background()
	var stay []string
	for i := range 3 {
		r := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprint("stay:", i), EffectType: "job.run", LeaseSeconds: 3600}, ledger.DecisionExecute)
		stay = append(stay, r.EffectID)
	}
	const done = 300 // over sweepBatch, 256
	for i := range done {
		r := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprint("done:", i), EffectType: "job.run"}, ledger.DecisionExecute)
		h.report(r.EffectID, ledger.OutcomeSucceeded)
	}
	h.clock.Advance(720 * time.Hour)
	if n, err := h.eng.Purge(ctx); n != done || err != nil {
		t.Fatalf("purge = %d, %v; want %d", n, err, done)
	}
	for _, id := range stay {
		if eff := h.get(id); eff.State != ledger.StateIndeterminate {
			t.Fatalf("an effect nobody settled must outlive retention: %+v", eff)
		}
	}
	if left := len(h.storedKeys("k\x00")); left != len(stay) {
		t.Fatalf("%d idempotency keys left, want %d", left, len(stay))
	}
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	assertStateCounts(t, h)
}

// A ledger written before 2026-12-02 holds a retention index entry for each
// finished effect: Purge still purges by it and leaves none behind.
func TestPurgeForgetsTheRetentionIndexOfAnOlderLedger(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	r := h.beginWant(email("old", "bot"), ledger.DecisionExecute)
	finished := h.clock.Now()
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	// The entry the report used to write: t, NUL, the finish time, NUL, the id.
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(finished.UnixNano()))
	legacy := "t\x00" + string(ts[:]) + "\x00" + r.EffectID
	if err := h.eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st := h.openStore()
	if err := st.Update(ctx, func(tx ledger.Txn) error { return tx.Set([]byte(legacy), nil) }); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	h.open()
	h.clock.Advance(720*time.Hour - time.Second)
	if n, err := h.eng.Purge(ctx); n != 0 || err != nil {
		t.Fatalf("purge = %d, %v before retention ran out", n, err)
	}
	h.clock.Advance(time.Second)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v; want the finished effect", n, err)
	}
	if left := h.storedKeys("t\x00"); len(left) != 0 {
		t.Fatalf("retention index entries left: %q", left)
	}
	if left := h.storedKeys("e\x00"); len(left) != 0 {
		t.Fatalf("effects left: %q", left)
	}
}
