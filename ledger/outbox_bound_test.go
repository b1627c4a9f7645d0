package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// outboxOf counts a sink's waiting and dead entries, and the outbox.dropped
// events among the waiting ones.
func outboxOf(t *testing.T, eng *ledger.Engine, sink string) (waiting, dead, dropEvents int) {
	t.Helper()
	all, err := eng.Outbox(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range all {
		if en.Sink != sink {
			continue
		}
		switch {
		case en.Dead:
			dead++
		default:
			waiting++
		}
		if en.Event.Type == ledger.EventOutboxDropped {
			dropEvents++
		}
	}
	return waiting, dead, dropEvents
}

// TestTheOutboxBoundDropsTheOldestDeadLettersAndRefusesNothing (issue
// 32.3), on both backends: 60 approval requests for a sink that delivers
// none, bounded at 20 waiting and 5 dead letters. Every begin is decided
// (approval_required), never refused; after the bound the sink holds the
// 20 newest requests waiting, the next 5 as dead letters, and the 35
// oldest are gone, counted, and reported in one outbox.dropped event
// naming the sink and the count; the newest requests are the ones kept.
func TestTheOutboxBoundDropsTheOldestDeadLettersAndRefusesNothing(t *testing.T) {
	h := newHarness(t, []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(1)}})
	var keys []string
	for i := range 60 {
		res := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprint("order-", i), EffectType: "payment.charge", AgentID: "bot",
			EstimatedCostMicros: i64(5)}, ledger.DecisionApprovalRequired)
		keys = append(keys, res.EffectID)
	}
	ctx := context.Background()
	res, err := h.eng.BoundSinkOutbox(ctx, "test-sink", 20, 5)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ledger.OutboxBound{Waiting: 20, Dead: 5, Expired: 40, Dropped: 35}, res); diff != "" {
		t.Errorf("the bound (-want +got):\n%s", diff)
	}
	waiting, dead, drops := outboxOf(t, h.eng, "test-sink")
	// The outbox.dropped event is itself routed to the sink: one more waiting.
	if diff := cmp.Diff([3]int{21, 5, 1}, [3]int{waiting, dead, drops}); diff != "" {
		t.Errorf("the sink's outbox: waiting, dead, outbox.dropped events (-want +got):\n%s", diff)
	}
	all, err := h.eng.Outbox(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, en := range all {
		switch en.Event.Type {
		case ledger.EventApprovalRequested:
			kept[en.Event.EffectID] = true
		case ledger.EventOutboxDropped:
			if en.Event.Sink != "test-sink" || en.Event.Count != 35 {
				t.Errorf("outbox.dropped names sink %q and count %d, want test-sink and 35", en.Event.Sink, en.Event.Count)
			}
		}
	}
	for i, id := range keys {
		if want := i >= 35; kept[id] != want {
			t.Errorf("request %d (of 60, oldest first) kept: %v, want %v", i, kept[id], want)
		}
	}
	// Within the bound, nothing more is done.
	if res, err := h.eng.BoundSinkOutbox(ctx, "test-sink", 30, 5); err != nil || res.Expired+res.Dropped != 0 {
		t.Errorf("a second bound within the limits: %+v %v, want nothing done", res, err)
	}
	// Decisions still go through at the bound.
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "after", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(5)},
		ledger.DecisionApprovalRequired)
}

// TestTheOutboxWakesItsWorkersOnceDurable: OutboxWake's channel closes
// when a batch that queued outbox entries is committed, not before, and
// not for a batch that queued none; NextSinkEvent reports the entry due.
func TestTheOutboxWakesItsWorkersOnceDurable(t *testing.T) {
	h := newHarness(t, []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(1)}})
	wake := h.eng.OutboxWake()
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "quiet", EffectType: "email.send", AgentID: "bot"}, ledger.DecisionExecute)
	select {
	case <-wake:
		t.Fatal("woken by a batch that queued no outbox entry")
	case <-time.After(50 * time.Millisecond):
	}
	if _, ok, err := h.eng.NextSinkEvent(context.Background(), "test-sink"); err != nil || ok {
		t.Errorf("NextSinkEvent on an empty outbox: ok %v, err %v; want none", ok, err)
	}
	h.beginWant(ledger.BeginRequest{IdempotencyKey: "loud", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(5)},
		ledger.DecisionApprovalRequired)
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a batch that queued an approval request")
	}
	next, ok, err := h.eng.NextSinkEvent(context.Background(), "test-sink")
	if err != nil || !ok || next.After(h.clock.Now()) {
		t.Errorf("NextSinkEvent after a request: %v %v %v, want due by %v", next, ok, err, h.clock.Now())
	}
}
