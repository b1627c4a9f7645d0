package recovery_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/recovery"
)

type hookRT struct {
	base   http.RoundTripper
	before func()
}

func (h hookRT) RoundTrip(r *http.Request) (*http.Response, error) {
	h.before()
	return h.base.RoundTrip(r)
}

// TestNobodyFreesAnAttemptWhileItsResendIsInFlight: the ledger is a
// recovery.Claimer; while the resend of attempt 1 is on its way, an
// agent's resolve failed is refused and its retry blocked, so attempt 2
// never executes beside it: the vendor executes once.
func TestNobodyFreesAnAttemptWhileItsResendIsInFlight(t *testing.T) {
	e := newEnv(t)
	var _ recovery.Claimer = e.eng
	id := e.lost(t, "order:claimed-race", "before")
	e.rec.Client = &http.Client{Transport: hookRT{base: proxy.NewTransport(), before: func() {
		_, err := e.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeFailed,
			ResolvedBy: "agent", Note: "no such payment at Stripe"})
		if ledger.CodeOf(err) != ledger.CodeInvalidStateTransition {
			t.Errorf("resolve failed during the resend: %v", err)
		}
		if r := e.charge(t, "order:claimed-race"); r.Header.Get("Ratchet-Decision") != string(ledger.DecisionBlocked) {
			t.Errorf("the retry during the resend: %v", r.Header)
		}
	}}}
	e.rec.Pass(context.Background())
	if eff := e.effect(t, id); eff.State != ledger.StateSucceeded || eff.Attempt != 1 || e.vendor.executed.Load() != 1 {
		t.Fatalf("after the resend: %s attempt %d, executed %d", eff.State, eff.Attempt, e.vendor.executed.Load())
	}
	// Released: an operator may resolve again (here it agrees).
	if _, err := e.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeSucceeded,
		ResolvedBy: "operator"}); err != nil {
		t.Fatal(err)
	}
}
