package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestSinkRefsAndReleasingClaims(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	ask := h.beginWant(pay("ref", "acct_1", 150_000_000), ledger.DecisionApprovalRequired)
	if _, err := h.eng.SinkRef(ctx, "slack", ask.ApprovalID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("before: %v", err)
	}
	if err := h.eng.PutSinkRef(ctx, "slack", ask.ApprovalID, []byte(`{"ts":"1.2"}`)); err != nil {
		t.Fatal(err)
	}
	if v, err := h.eng.SinkRef(ctx, "slack", ask.ApprovalID); err != nil || string(v) != `{"ts":"1.2"}` {
		t.Fatalf("after: %s %v", v, err)
	}
	// Purged with the effects' retention.
	h.clock.Advance(ledger.DefaultRetention + time.Hour)
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.SinkRef(ctx, "slack", ask.ApprovalID); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("after the retention: %v", err)
	}

	// A claim of a process that died is released at the next start on a
	// ledger one process uses, never on a shared one.
	h.beginWant(pay("claimed", "acct_2", 150_000_000), ledger.DecisionApprovalRequired)
	if es, err := h.eng.ClaimEvents(ctx, "dead-worker", time.Minute, 10); err != nil || len(es) == 0 {
		t.Fatalf("claim: %v %v", es, err)
	}
	n, err := h.eng.ReleaseOutboxClaims(ctx)
	if err != nil {
		t.Fatal(err)
	}
	es, _ := h.eng.ClaimEvents(ctx, "new-worker", time.Minute, 10)
	if testBackend == "postgres" {
		if n != 0 {
			t.Fatalf("n != 0: on a shared store: released %d, claimed again %d", n, len(es))
		}
		if len(es) != 0 {
			t.Fatalf("len(es) != 0: on a shared store: released %d, claimed again %d", n, len(es))
		}
		return
	}
	if n == 0 {
		t.Fatalf("n == 0: released %d, claimed again %d", n, len(es))
	}
	if len(es) != n {
		t.Fatalf("len(es) != n: released %d, claimed again %d", n, len(es))
	}
}
