package notify_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// hangSink never answers: each delivery lasts until the worker's timeout.
type hangSink struct{ n atomic.Int64 }

func (h *hangSink) Deliver(ctx context.Context, _ ledger.OutboxEntry) error {
	h.n.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// recSink records the ids of the events it was given.
type recSink struct {
	mu  sync.Mutex
	got []string
}

func (r *recSink) Deliver(_ context.Context, en ledger.OutboxEntry) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, en.Event.ID)
	return nil
}

func (r *recSink) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.got) }

type sinkFunc func(context.Context, ledger.OutboxEntry) error

func (f sinkFunc) Deliver(ctx context.Context, en ledger.OutboxEntry) error { return f(ctx, en) }

// A sink that hangs (a webhook behind a dead load balancer), whose name
// sorts first and whose entries would fill every claim of the whole
// outbox, delays no other sink's deliveries: each sink claims its own.
func TestAHangingSinkDelaysNoOtherSink(t *testing.T) {
	eng := newEngine(t, []notify.Route{{Sinks: []string{"a-hook", "slack"}}})
	for i := 0; i < 40; i++ {
		askApproval(t, eng, fmt.Sprintf("order-%d", i))
	}
	a, b := &hangSink{}, &recSink{}
	start := time.Now()
	runWorker(t, &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{"a-hook": a, "slack": b},
		Timeout: 100 * time.Millisecond, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxAttempts: 1000, Poll: 10 * time.Millisecond})
	eventually(t, 4*time.Second, "all 40 approval requests reach the healthy sink", func() bool { return b.count() == 40 })
	t.Logf("40 deliveries to the healthy sink in %v, the hanging sink tried %d times meanwhile", time.Since(start), a.n.Load())
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the healthy sink's 40 deliveries took %v beside a hanging sink", d)
	}
}

// A slow but healthy sink with a backlog delays no other sink by its
// backlog.
func TestASlowSinksBacklogDoesNotDelayAnotherSink(t *testing.T) {
	eng := newEngine(t, []notify.Route{{Sinks: []string{"a-hook", "slack"}}})
	for i := 0; i < 150; i++ {
		askApproval(t, eng, fmt.Sprintf("order-%d", i))
	}
	slow := sinkFunc(func(ctx context.Context, _ ledger.OutboxEntry) error { time.Sleep(20 * time.Millisecond); return nil })
	b := &recSink{}
	start := time.Now()
	runWorker(t, &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{"a-hook": slow, "slack": b}, Poll: 10 * time.Millisecond})
	eventually(t, 10*time.Second, "slack gets its first event", func() bool { return b.count() > 0 })
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the first approval request reached Slack only after %v (the slow sink's backlog of 150 x 20ms went first)", d)
	}
}

// An entry for a sink the worker has no Sink for (one removed from the
// config) is tried until it is dead, beside the configured sinks.
func TestAnEntryForASinkNotConfiguredIsDeadLettered(t *testing.T) {
	eng := newEngine(t, []notify.Route{{Sinks: []string{"gone", "slack"}}})
	askApproval(t, eng, "order-1")
	b := &recSink{}
	runWorker(t, &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{"slack": b},
		Backoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond, MaxAttempts: 3, Poll: 2 * time.Millisecond})
	eventually(t, 3*time.Second, "the entry of the removed sink is dead", func() bool {
		dead, _ := eng.Outbox(context.Background(), true)
		return len(dead) == 1 && dead[0].Sink == "gone" && dead[0].Attempts == 3
	})
	if b.count() != 1 {
		t.Fatalf("the configured sink got %d events, want 1", b.count())
	}
}

// Each sink's claims are its own, even of a sink whose name is a prefix of
// another's; the outbox lists the sinks it holds entries for.
func TestASinkClaimsOnlyItsOwnEntries(t *testing.T) {
	eng := newEngine(t, []notify.Route{{Sinks: []string{"a", "ab", "b"}}})
	askApproval(t, eng, "order-1")
	askApproval(t, eng, "order-2")
	ctx := context.Background()
	sinks, err := eng.OutboxSinks(ctx)
	if err != nil || fmt.Sprint(sinks) != "[a ab b]" {
		t.Fatalf("sinks %v %v", sinks, err)
	}
	es, err := eng.ClaimSinkEvents(ctx, "a", "w", time.Minute, 10)
	if err != nil || len(es) != 2 || es[0].Sink != "a" || es[1].Sink != "a" || es[0].Event.ID >= es[1].Event.ID {
		t.Fatalf("claimed %+v %v, want a's two, oldest first", es, err)
	}
	if es, _ := eng.ClaimSinkEvents(ctx, "a", "w", time.Minute, 10); len(es) != 0 {
		t.Fatalf("claimed again: %+v", es)
	}
	if es, _ := eng.ClaimSinkEvents(ctx, "ab", "w", time.Minute, 1); len(es) != 1 || es[0].Sink != "ab" {
		t.Fatalf("ab: %+v", es)
	}
}
