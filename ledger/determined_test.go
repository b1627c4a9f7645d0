package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// determined is what the outbox says of one effect: the types of its
// effect.indeterminate and effect.determined events, in order, with the
// determined event's attempt, reason and actor.
func determined(t *testing.T, h *harness, effectID string) []string {
	t.Helper()
	entries, err := h.eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, en := range entries {
		ev := en.Event
		if ev.EffectID != effectID {
			continue
		}
		switch ev.Type {
		case ledger.EventEffectIndeterminate:
			out = append(out, ev.Type)
		case ledger.EventEffectDetermined:
			out = append(out, ev.Type+" attempt="+itoa(int64(ev.Attempt))+" reason="+ev.Reason+" actor="+ev.Actor+" state="+string(ev.State))
		}
	}
	return out
}

// An on-call person paged for an indeterminate effect hears when its
// outcome is known again, whichever way it comes: an operator's resolve, the
// agent's late report, a vendor's record. A page opened by
// effect.indeterminate is closed by effect.determined (issue 35.3); an
// effect settled while it was merely pending says nothing to the pager.
func TestAnIndeterminateEffectSettledIsAnEventForThePager(t *testing.T) {
	ctx := context.Background()
	t.Run("resolved by an operator", func(t *testing.T) {
		h := newHarness(t, testRules())
		res := h.beginWant(email("det-resolve", "bot"), ledger.DecisionExecute)
		h.report(res.EffectID, ledger.OutcomeUnknown)
		if _, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: res.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:alice"}); err != nil {
			t.Fatal(err)
		}
		want := []string{ledger.EventEffectIndeterminate, "effect.determined attempt=1 reason=resolve actor=admin:alice state=succeeded"}
		if diff := cmp.Diff(want, determined(t, h, res.EffectID)); diff != "" {
			t.Errorf("outbox events of the effect (-want +got):\n%s", diff)
		}
	})
	t.Run("a late report after the lease ran out", func(t *testing.T) {
		h := newHarness(t, testRules())
		res := h.beginWant(email("det-late", "bot"), ledger.DecisionExecute)
		h.clock.Advance(10 * time.Minute)
		if _, err := h.eng.Reap(ctx); err != nil {
			t.Fatal(err)
		}
		h.report(res.EffectID, ledger.OutcomeFailed)
		want := []string{ledger.EventEffectIndeterminate, "effect.determined attempt=1 reason=report actor=agent:bot state=failed"}
		if diff := cmp.Diff(want, determined(t, h, res.EffectID)); diff != "" {
			t.Errorf("outbox events of the effect (-want +got):\n%s", diff)
		}
	})
	t.Run("settled by the vendor's record", func(t *testing.T) {
		h := newHarness(t, testRules())
		res := h.beginWant(email("det-settle", "bot"), ledger.DecisionExecute)
		h.report(res.EffectID, ledger.OutcomeUnknown)
		if _, err := h.eng.Settle(ctx, ledger.SettleRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeSucceeded, Source: "webhook:stripe", EventID: "evt_vendor_1"}); err != nil {
			t.Fatal(err)
		}
		want := []string{ledger.EventEffectIndeterminate, "effect.determined attempt=1 reason=settlement actor=webhook:stripe state=succeeded"}
		if diff := cmp.Diff(want, determined(t, h, res.EffectID)); diff != "" {
			t.Errorf("outbox events of the effect (-want +got):\n%s", diff)
		}
	})
	t.Run("reported while pending: nothing for the pager", func(t *testing.T) {
		h := newHarness(t, testRules())
		res := h.beginWant(email("det-none", "bot"), ledger.DecisionExecute)
		h.report(res.EffectID, ledger.OutcomeSucceeded)
		if got := determined(t, h, res.EffectID); len(got) != 0 {
			t.Errorf("outbox events of an effect that was never indeterminate: %v, want none", got)
		}
	})
}
