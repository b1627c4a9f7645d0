package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// auditOf exports the whole audit log and the chains' heads.
func auditOf(t *testing.T, h *harness) ([]ledger.AuditRecord, map[string]ledger.AuditHeadInfo) {
	t.Helper()
	var recs []ledger.AuditRecord
	if err := h.eng.Audit(context.Background(), time.Time{}, time.Time{}, func(r ledger.AuditRecord) error {
		recs = append(recs, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	heads, err := h.eng.AuditHeads(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return recs, heads
}

// mixedWorkload runs begins, reports, an approval, an expiry and a resolve
// from many goroutines, and returns how many begins answered.
func mixedWorkload(t *testing.T, h *harness) int {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	begins := 0
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				res, err := h.eng.Begin(ctx, pay("mix:"+itoa(int64(g))+":"+itoa(int64(i%7)), "acct_"+itoa(int64(i%3)), 1_000_000))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				begins++
				mu.Unlock()
				settle(h, res, []ledger.Outcome{ledger.OutcomeSucceeded, ledger.OutcomeFailed, ""}[(g+i)%3])
			}
		})
	}
	wg.Wait()
	ask := h.beginWant(pay("mix:big", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "admin:alice", "ok"); err != nil {
		t.Fatal(err)
	}
	h.beginWant(pay("mix:big", "acct_1", 150_000_000), ledger.DecisionExecute)
	h.clock.Advance(2 * time.Minute)
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	return begins + 2
}

func TestTheAuditChainVerifiesAfterAMixedWorkload(t *testing.T) {
	h := newHarness(t, testRules())
	begins := mixedWorkload(t, h)
	recs, heads := auditOf(t, h)
	if brk := ledger.VerifyAudit(recs, heads); brk != nil {
		t.Fatalf("a ledger's own audit log does not verify: %v", brk)
	}
	count := map[string]int{}
	var approver string
	for _, r := range recs {
		count[r.Event.Type]++
		if r.Event.Type == ledger.EventApprovalDecided {
			approver = r.Event.Actor
		}
		if r.Event.ID == "" {
			t.Fatalf("r.Event.ID == \"\": an event without id or time: %+v", r.Event)
		}
		if r.Event.At.IsZero() {
			t.Fatalf("r.Event.At.IsZero(): an event without id or time: %+v", r.Event)
		}
	}
	if count[ledger.EventEffectBegun] != begins {
		t.Fatalf("%d effect.begun records for %d begins", count[ledger.EventEffectBegun], begins)
	}
	if approver != "admin:alice" {
		t.Fatalf("approver != \"admin:alice\": records by type %v, approver %q", count, approver)
	}
	if count[ledger.EventApprovalRequested] != 1 {
		t.Fatalf("count[ledger.EventApprovalRequested] != 1: records by type %v, approver %q", count, approver)
	}
	if count[ledger.EventEffectIndeterminate] == 0 {
		t.Fatalf("count[ledger.EventEffectIndeterminate] == 0: records by type %v, approver %q", count, approver)
	}
	if count[ledger.EventEffectReported] == 0 {
		t.Fatalf("count[ledger.EventEffectReported] == 0: records by type %v, approver %q", count, approver)
	}
	// The chain survives a restart: records after it chain to those before.
	h.reopen()
	h.beginWant(email("after-restart", "bot"), ledger.DecisionExecute)
	recs, heads = auditOf(t, h)
	if brk := ledger.VerifyAudit(recs, heads); brk != nil {
		t.Fatalf("after a restart: %v", brk)
	}
}

func TestAlteringInsertingOrRemovingAnAuditRecordIsFound(t *testing.T) {
	h := newHarness(t, testRules())
	mixedWorkload(t, h)
	recs, heads := auditOf(t, h)
	if len(recs) < 10 {
		t.Fatalf("only %d records", len(recs))
	}
	mid := len(recs) / 2
	clone := func() []ledger.AuditRecord { return append([]ledger.AuditRecord(nil), recs...) }
	cases := map[string]struct {
		edit func([]ledger.AuditRecord) []ledger.AuditRecord
		line int // 0: the chain's end
	}{
		"a decision altered": {func(r []ledger.AuditRecord) []ledger.AuditRecord {
			r[mid].Event.Decision = ledger.DecisionDenied
			return r
		}, mid + 1},
		"a record removed": {func(r []ledger.AuditRecord) []ledger.AuditRecord {
			return append(r[:mid:mid], r[mid+1:]...)
		}, mid + 1},
		"a record inserted": {func(r []ledger.AuditRecord) []ledger.AuditRecord {
			forged := r[mid]
			forged.Event.ID = "evt_forged"
			out := append(r[:mid+1:mid+1], forged)
			return append(out, r[mid+1:]...)
		}, mid + 2},
		"a record altered and rehashed": {func(r []ledger.AuditRecord) []ledger.AuditRecord {
			// Whoever changes a record and computes its hash again still
			// breaks the link from the next one.
			r[mid].Event.CostMicros = nil
			r[mid].Hash = rehash(t, r[mid])
			return r
		}, mid + 2},
		"the last records removed": {func(r []ledger.AuditRecord) []ledger.AuditRecord {
			return r[:len(r)-2]
		}, 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			brk := ledger.VerifyAudit(c.edit(clone()), heads)
			if brk == nil {
				t.Fatal("verified")
			}
			if brk.Line != c.line {
				t.Fatalf("break at line %d, want %d: %v", brk.Line, c.line, brk)
			}
		})
	}
}

// rehash is what a forger would compute: the record's hash by the
// documented rule.
func rehash(t *testing.T, r ledger.AuditRecord) string {
	t.Helper()
	return ledger.AuditHashOf(r)
}

func TestNotificationsAreQueuedInTheSameWriteAndDeliveredOnce(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	ask := h.beginWant(pay("notify:1", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	h.beginWant(email("quiet", "bot"), ledger.DecisionExecute) // nothing to tell anyone
	all, err := h.eng.Outbox(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("len(all) != 1: outbox: %+v", all)
	}
	if all[0].Event.Type != ledger.EventApprovalRequested {
		t.Fatalf("all[0].Event.Type != ledger.EventApprovalRequested: outbox: %+v", all)
	}
	if all[0].Event.ApprovalID != ask.ApprovalID {
		t.Fatalf("all[0].Event.ApprovalID != ask.ApprovalID: outbox: %+v", all)
	}
	if all[0].Sink != "test-sink" {
		t.Fatalf("all[0].Sink != \"test-sink\": outbox: %+v", all)
	}
	b, _ := json.Marshal(all[0].Event)
	if strings.Contains(string(b), "acct_1") {
		t.Fatalf("strings.Contains(string(b), \"acct_1\"): an event carries a dimension value or a key: %s", b)
	}
	if strings.Contains(string(b), "notify:1") {
		t.Fatalf("strings.Contains(string(b), \"notify:1\"): an event carries a dimension value or a key: %s", b)
	}
	// Two workers (two replicas) claim at once: one gets it.
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for _, w := range []string{"a", "b"} {
		wg.Go(func() {
			es, err := h.eng.ClaimEvents(ctx, w, time.Minute, 10)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got += len(es)
			mu.Unlock()
		})
	}
	wg.Wait()
	if got != 1 {
		t.Fatalf("claimed %d times, want once", got)
	}
	// A failed delivery is tried again when due, not before.
	id := all[0].Event.ID
	if err := h.eng.EventFailed(ctx, "test-sink", id, "503 from the receiver", h.clock.Now().Add(30*time.Second), false); err != nil {
		t.Fatal(err)
	}
	if es, _ := h.eng.ClaimEvents(ctx, "a", time.Minute, 10); len(es) != 0 {
		t.Fatalf("claimed before it was due: %+v", es)
	}
	h.clock.Advance(31 * time.Second)
	es, err := h.eng.ClaimEvents(ctx, "a", time.Minute, 10)
	if err != nil {
		t.Fatalf("err != nil: retry: %+v %v", es, err)
	}
	if len(es) != 1 {
		t.Fatalf("len(es) != 1: retry: %+v %v", es, err)
	}
	if es[0].Attempts != 1 {
		t.Fatalf("es[0].Attempts != 1: retry: %+v %v", es, err)
	}
	if es[0].Event.ID != id {
		t.Fatalf("es[0].Event.ID != id: retry: %+v %v", es, err)
	}
	// The same event keeps its id across attempts and restarts.
	h.reopen()
	if err := h.eng.EventDelivered(ctx, "test-sink", id); err != nil {
		t.Fatal(err)
	}
	if all, _ := h.eng.Outbox(ctx, false); len(all) != 0 {
		t.Fatalf("a delivered entry stayed: %+v", all)
	}
	// Dead letters are kept for the operator and never claimed.
	if _, err := h.eng.Approve(ctx, ask.ApprovalID, "admin:alice", ""); err != nil {
		t.Fatal(err)
	}
	es, _ = h.eng.ClaimEvents(ctx, "a", time.Minute, 10)
	if len(es) != 1 {
		t.Fatalf("len(es) != 1: decision event: %+v", es)
	}
	if es[0].Event.Type != ledger.EventApprovalDecided {
		t.Fatalf("es[0].Event.Type != ledger.EventApprovalDecided: decision event: %+v", es)
	}
	if es[0].Event.Actor != "admin:alice" {
		t.Fatalf("es[0].Event.Actor != \"admin:alice\": decision event: %+v", es)
	}
	if err := h.eng.EventFailed(ctx, "test-sink", es[0].Event.ID, "gone", h.clock.Now(), true); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour)
	if es, _ := h.eng.ClaimEvents(ctx, "a", time.Minute, 10); len(es) != 0 {
		t.Fatalf("a dead letter was claimed: %+v", es)
	}
	if dead, _ := h.eng.Outbox(ctx, true); len(dead) != 1 || !dead[0].Dead || dead[0].LastError != "gone" {
		t.Fatalf("dead letters: %+v", dead)
	}
}

func TestAuditRecordsOutliveTheirEffectsAndThenGo(t *testing.T) {
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	h.defs.Retention = time.Hour
	h.open()
	ctx := context.Background()
	r := h.beginWant(email("old", "bot"), ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	h.clock.Advance(2 * time.Hour)
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if recs, _ := auditOf(t, h); len(recs) == 0 {
		t.Fatal("the audit log went with the effects' retention")
	}
	// Past the audit retention (never shorter than the effects') the
	// records go, and what is left still verifies.
	h.eng.Close(ctx)
	h.auditRetention = time.Minute // shorter than the effects': an hour counts
	h.open()
	h.beginWant(email("new", "bot"), ledger.DecisionExecute)
	h.clock.Advance(2 * time.Hour)
	h.beginWant(email("newer", "bot"), ledger.DecisionExecute)
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	recs, heads := auditOf(t, h)
	if len(recs) != 1 {
		t.Fatalf("len(recs) != 1: after the audit retention: %+v", recs)
	}
	if recs[0].Event.Type != ledger.EventEffectBegun {
		t.Fatalf("recs[0].Event.Type != ledger.EventEffectBegun: after the audit retention: %+v", recs)
	}
	if brk := ledger.VerifyAudit(recs, heads); brk != nil {
		t.Fatalf("what is left: %v", brk)
	}
}

// TestEachSinkClaimsOnlyItsOwnEntries: the per-sink claim (one delivery
// loop a sink, so a slow sink delays no other) takes only that sink's
// entries, a sink named "a" none of sink "ab"'s, and OutboxSinks lists the
// sinks that have any.
func TestEachSinkClaimsOnlyItsOwnEntries(t *testing.T) {
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	h.route = func(ledger.Event) []string { return []string{"a", "ab"} }
	h.open()
	ctx := context.Background()
	h.beginWant(pay("sink:1", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	sinks, err := h.eng.OutboxSinks(ctx)
	if err != nil {
		t.Fatalf("err != nil: sinks: %v %v", sinks, err)
	}
	if len(sinks) != 2 {
		t.Fatalf("len(sinks) != 2: sinks: %v %v", sinks, err)
	}
	if sinks[0] != "a" {
		t.Fatalf("sinks[0] != \"a\": sinks: %v %v", sinks, err)
	}
	if sinks[1] != "ab" {
		t.Fatalf("sinks[1] != \"ab\": sinks: %v %v", sinks, err)
	}
	for _, sink := range []string{"a", "ab"} {
		es, err := h.eng.ClaimSinkEvents(ctx, sink, "w", time.Minute, 10)
		if err != nil {
			t.Fatalf("err != nil: sink %s claimed %+v %v", sink, es, err)
		}
		if len(es) != 1 {
			t.Fatalf("len(es) != 1: sink %s claimed %+v %v", sink, es, err)
		}
		if es[0].Sink != sink {
			t.Fatalf("es[0].Sink != sink: sink %s claimed %+v %v", sink, es, err)
		}
	}
	if es, _ := h.eng.ClaimSinkEvents(ctx, "a", "w", time.Minute, 10); len(es) != 0 {
		t.Fatalf("claimed twice: %+v", es)
	}
}
