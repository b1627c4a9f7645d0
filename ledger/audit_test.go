package ledger_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	json "github.com/segmentio/encoding/json"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestAnUntamperedChainVerifiesAfterTheClockStepsBackAndAPurge: a wall
// clock stepped back (NTP) would make a later record carry an earlier
// "at", and the audit retention would delete a record in the middle of the
// chain; a chain's times never go back, so it cuts a prefix.
func TestAnUntamperedChainVerifiesAfterTheClockStepsBackAndAPurge(t *testing.T) {
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	h.defs.Retention = time.Minute
	h.auditRetention = time.Minute
	h.open()
	ctx := context.Background()
	h.clock.stepBackAfterNextReading(time.Hour)
	h.beginWant(email("k1", "bot"), ledger.DecisionExecute) // at 12:00; the clock goes to 11:00
	h.beginWant(email("k2", "bot"), ledger.DecisionExecute) // at 11:00, after k1 in the chain
	h.clock.Advance(31 * time.Minute)                       // 11:31: retention cuts at 11:30
	h.beginWant(email("k3", "bot"), ledger.DecisionExecute)
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	recs, heads := auditOf(t, h)
	for _, r := range recs {
		t.Logf("kept seq %d at %s %s", r.Seq, r.Event.At.Format(time.TimeOnly), r.Event.Type)
	}
	if brk := ledger.VerifyAudit(recs, heads); brk != nil {
		t.Errorf("the untampered audit log no longer verifies after purge: %v", brk)
	}
}

// TestASinceExportVerifiesAfterTheClockStepsBack: the same for an export
// from a time.
func TestASinceExportVerifiesAfterTheClockStepsBack(t *testing.T) {
	h := newHarness(t, testRules())
	start := h.clock.Now()
	h.clock.stepBackAfterNextReading(time.Hour)
	h.beginWant(email("k1", "bot"), ledger.DecisionExecute) // 12:00
	h.beginWant(email("k2", "bot"), ledger.DecisionExecute) // 11:00
	h.clock.Advance(2 * time.Hour)
	h.beginWant(email("k3", "bot"), ledger.DecisionExecute) // 13:00
	var recs []ledger.AuditRecord
	h.eng.Audit(context.Background(), start.Add(-time.Minute), time.Time{}, func(r ledger.AuditRecord) error {
		recs = append(recs, r)
		return nil
	})
	heads, _ := h.eng.AuditHeads(context.Background())
	if brk := ledger.VerifyAudit(recs, heads); brk != nil {
		t.Errorf("an untampered --since export does not verify: %v", brk)
	}
}

// TestAnUnwindIsAuditedWithItsActor: group.unwind names the agent the
// adapter fixed, not only the caller's free-text reason.
func TestAnUnwindIsAuditedWithItsActor(t *testing.T) {
	h := newHarness(t, testRules())
	req := email("g1", "bot")
	req.GroupKey = "grp"
	r := h.beginWant(req, ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	if _, err := h.eng.Unwind(context.Background(), ledger.UnwindRequest{GroupKey: "grp", AgentID: "bot", Reason: "approved by admin:alice"}); err != nil {
		t.Fatal(err)
	}
	recs, _ := auditOf(t, h)
	for _, rec := range recs {
		if rec.Event.Type == ledger.EventGroupUnwind {
			if rec.Event.Actor == "" && rec.Event.AgentID == "" {
				t.Errorf("group.unwind has no actor and no agent_id: %+v (reason is the caller's free text %q)", rec.Event, rec.Event.Reason)
			}
			return
		}
	}
	t.Fatal("no group.unwind record")
}

// TestAnObservedCeilingPagesNobody: an observed ceiling refuses nothing,
// so crossing a threshold of it queues no budget.threshold notification
// (its would-be refusals are policy.observed records).
func TestAnObservedCeilingPagesNobody(t *testing.T) {
	h := newHarness(t, []ledger.Rule{{Match: "email.*", Mode: ledger.ModeObserve,
		Ceilings: []ledger.Ceiling{{Name: "obs-emails", LimitCount: i64(1), Window: "24h", Per: "global"}}}})
	withThresholds(h, 1.0)
	h.beginWant(email("t1", "bot"), ledger.DecisionExecute)
	h.beginWant(email("t2", "bot"), ledger.DecisionExecute)
	recs, _ := auditOf(t, h)
	observed := false
	for _, rec := range recs {
		switch rec.Event.Type {
		case ledger.EventBudgetThreshold:
			t.Fatalf("a threshold event for an observed ceiling: %+v", rec.Event)
		case ledger.EventPolicyObserved:
			observed = true
		}
	}
	if !observed {
		t.Fatal("no policy.observed record of the would-be refusal")
	}
}

// TestEachAuditRecordsHashIsSHA256OfItsPrevAndJSON holds the chain's hash
// to its definition (AuditRecord), computed here apart from the engine's
// code: hex SHA-256 of Prev, a newline and the record's JSON with Hash
// empty, each record's Prev its predecessor's hash, the head the last's.
// Batches of several records (concurrent begins) and single ones both.
func TestEachAuditRecordsHashIsSHA256OfItsPrevAndJSON(t *testing.T) {
	h := newHarness(t, testRules())
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 4 {
				res := h.beginWant(email(fmt.Sprint("k", g, "-", i), fmt.Sprint("bot", g, "-", i)), ledger.DecisionExecute)
				h.report(res.EffectID, ledger.OutcomeSucceeded)
			}
		})
	}
	wg.Wait()
	recs, heads := auditOf(t, h)
	if len(recs) < 64 {
		t.Fatalf("%d audit records for 32 pairs, want at least 64", len(recs))
	}
	last := map[string]string{}
	for i, r := range recs {
		c := r
		c.Hash = ""
		b, err := json.Marshal(&c)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(r.Prev + "\n" + string(b)))
		if want := hex.EncodeToString(sum[:]); r.Hash != want {
			t.Fatalf("record %d (seq %d): hash %s, want %s, the SHA-256 of prev, a newline and\n%s", i, r.Seq, r.Hash, want, b)
		}
		if r.Prev != last[r.Chain] {
			t.Fatalf("record %d (seq %d): prev %q, want the previous record's hash %q", i, r.Seq, r.Prev, last[r.Chain])
		}
		last[r.Chain] = r.Hash
	}
	for chain, hash := range last {
		if heads[chain].Hash != hash {
			t.Errorf("chain %s: head %q, want the last record's hash %q", chain, heads[chain].Hash, hash)
		}
	}
}
