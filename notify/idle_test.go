package notify_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// claimCounter counts every claim the worker makes, found or not.
type claimCounter struct {
	*ledger.Engine
	claims atomic.Int64
}

func (c *claimCounter) ClaimSinkEvents(ctx context.Context, sink, worker string, lease time.Duration, limit int) ([]ledger.OutboxEntry, error) {
	c.claims.Add(1)
	return c.Engine.ClaimSinkEvents(ctx, sink, worker, lease, limit)
}

// TestAnIdleWorkerSleepsUntilThereIsWork (issues 31 and 32): three sinks
// with the default poll. Idle, the worker looks at the outbox at most
// once per sink in 3 s (it polled every 200 ms per sink, 15 times each,
// before); an approval request written then reaches every sink at once,
// woken by the write, and a failed delivery is tried again at its backoff
// without any poll to find it.
func TestAnIdleWorkerSleepsUntilThereIsWork(t *testing.T) {
	sinks := []string{"a", "b", "c"}
	eng := newEngine(t, []notify.Route{{Sinks: sinks}})
	ob := &claimCounter{Engine: eng}
	recs := map[string]*recSink{"a": {}, "b": {}}
	var cTries atomic.Int64
	flaky := sinkFunc(func(context.Context, ledger.OutboxEntry) error {
		if cTries.Add(1) == 1 {
			return errors.New("503 from the first try")
		}
		return nil
	})
	runWorker(t, &notify.Worker{Outbox: ob, Sinks: map[string]notify.Sink{"a": recs["a"], "b": recs["b"], "c": flaky},
		Backoff: 300 * time.Millisecond})
	time.Sleep(500 * time.Millisecond) // the first look of each loop
	start := ob.claims.Load()
	time.Sleep(3 * time.Second)
	if idle := ob.claims.Load() - start; idle > int64(len(sinks)) {
		t.Errorf("an idle worker claimed %d times in 3 s for %d sinks, want at most one each", idle, len(sinks))
	}

	t0 := time.Now()
	askApproval(t, eng, "order-1")
	eventually(t, time.Second, "the request reaches sinks a and b, woken by the write", func() bool {
		return recs["a"].count() == 1 && recs["b"].count() == 1
	})
	t.Logf("delivered %v after the write", time.Since(t0))
	eventually(t, 3*time.Second, "the failed delivery to c is tried again at its backoff", func() bool { return cTries.Load() >= 2 })
	if d := time.Since(t0); d < 250*time.Millisecond {
		t.Errorf("the retry came %v after the write, before its 300 ms backoff", d)
	}
	waitEmpty := func() bool {
		all, err := eng.Outbox(context.Background(), false)
		return err == nil && len(all) == 0
	}
	eventually(t, 2*time.Second, "every entry delivered", waitEmpty)
}
