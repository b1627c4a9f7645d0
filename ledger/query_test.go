package ledger_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestListFiltersAndPages(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	for i := range 7 {
		r := ledger.BeginRequest{IdempotencyKey: "k" + itoa(int64(i)), EffectType: "task.run", RunID: "run" + itoa(int64(i%2)), AgentID: "a"}
		res := h.beginWant(r, ledger.DecisionExecute)
		if i%3 == 0 {
			h.report(res.EffectID, ledger.OutcomeSucceeded)
		}
	}
	var all []ledger.Effect
	cursor := ""
	for {
		p, err := h.eng.List(ctx, ledger.Filter{Namespace: "default", Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Effects...)
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if len(all) != 7 {
		t.Fatalf("len(all) != 7: paged %d effects", len(all))
	}
	if all[0].IdempotencyKey != "k0" {
		t.Fatalf("all[0].IdempotencyKey != \"k0\": paged %d effects", len(all))
	}
	if all[6].IdempotencyKey != "k6" {
		t.Fatalf("all[6].IdempotencyKey != \"k6\": paged %d effects", len(all))
	}
	p, _ := h.eng.List(ctx, ledger.Filter{Namespace: "default", RunID: "run0"})
	if len(p.Effects) != 4 {
		t.Fatalf("run0: %d", len(p.Effects))
	}
	p, _ = h.eng.List(ctx, ledger.Filter{Namespace: "default", State: ledger.StateSucceeded})
	if len(p.Effects) != 3 {
		t.Fatalf("succeeded: %d", len(p.Effects))
	}
	_, err := h.eng.List(ctx, ledger.Filter{State: "bogus"})
	wantCode(t, err, ledger.CodeInvalidArgument)
	_, err = h.eng.List(ctx, ledger.Filter{Cursor: "!!"})
	wantCode(t, err, ledger.CodeInvalidArgument)
}

// TestReadsStopWithTheirRequest: a read whose request has ended is not
// run (on PostgreSQL its queries carry the request's context).
func TestReadsStopWithTheirRequest(t *testing.T) {
	h := newHarness(t, testRules())
	r := h.beginWant(email("ctx", "bot"), ledger.DecisionExecute)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.eng.Get(ctx, "", r.EffectID, "")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Get after its context ended: %v", err)
	}
	if _, err := h.eng.List(ctx, ledger.Filter{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("List after its context ended: %v", err)
	}
	if _, err := h.eng.Budgets(ctx, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("Budgets after its context ended: %v", err)
	}
	if _, err := h.eng.ListApprovals(ctx, "", ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("ListApprovals after its context ended: %v", err)
	}
	if _, err := h.eng.StateCounts(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("StateCounts after its context ended: %v", err)
	}
	h.get(r.EffectID) // a live context still reads
}
