package notify_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// countingOutbox counts the ledger writes the worker asks for: a claim
// that claimed something, a failure recorded, a delivery recorded.
type countingOutbox struct {
	*ledger.Engine
	writes atomic.Int64
}

func (c *countingOutbox) ClaimSinkEvents(ctx context.Context, sink, worker string, lease time.Duration, limit int) ([]ledger.OutboxEntry, error) {
	es, err := c.Engine.ClaimSinkEvents(ctx, sink, worker, lease, limit)
	if len(es) > 0 {
		c.writes.Add(1)
	}
	return es, err
}

func (c *countingOutbox) EventFailed(ctx context.Context, sink, id, reason string, next time.Time, dead bool) error {
	c.writes.Add(1)
	return c.Engine.EventFailed(ctx, sink, id, reason, next, dead)
}

func (c *countingOutbox) EventDelivered(ctx context.Context, sink, id string) error {
	c.writes.Add(1)
	return c.Engine.EventDelivered(ctx, sink, id)
}

// TestADeadSinkCostsFewWritesPerEvent (issue 32.1): 5,000 approval
// requests for a webhook whose host refuses connections. The worker must
// not rewrite the ledger per event per retry: once the sink fails a few
// times in a row, its deliveries pause (in memory, doubling) and one
// entry probes it. Its writes while the sink is dead stay under 1 per 100
// events (before: two per event per attempt, about 4.6 attempts per event
// in 26 s), and once the sink answers again deliveries resume by
// themselves.
func TestADeadSinkCostsFewWritesPerEvent(t *testing.T) {
	const events = 5000
	eng := newEngine(t, []notify.Route{{Sinks: []string{"hook"}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // dead: connections are refused
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= events; i = next.Add(1) {
				askApproval(t, eng, fmt.Sprintf("order-%d", i))
			}
		})
	}
	wg.Wait()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	ob := &countingOutbox{Engine: eng}
	obs := &counts{}
	runWorker(t, &notify.Worker{Outbox: ob, Sinks: map[string]notify.Sink{"hook": &notify.Webhook{URL: "http://" + addr + "/hook", Secret: []byte("s")}},
		Poll: 10 * time.Millisecond, Backoff: 100 * time.Millisecond, Observer: obs})
	time.Sleep(3 * time.Second)
	dead := ob.writes.Load()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("dead sink, 3 s: %d failed deliveries, %d worker writes for %d events (%.4f per event); heap %d -> %d MiB",
		obs.get("hook:failed"), dead, events, float64(dead)/events, before.HeapInuse>>20, after.HeapInuse>>20)
	if perEvent := float64(dead) / events; perEvent > 0.01 {
		t.Errorf("the worker wrote %.3f times per event to the ledger for a dead sink, want at most 0.01", perEvent)
	}

	// The sink comes back: deliveries resume without a restart.
	var got atomic.Int64
	back, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got.Add(1) })}
	go srv.Serve(back)
	t.Cleanup(func() { srv.Close() })
	eventually(t, 20*time.Second, "deliveries resume once the sink answers", func() bool { return got.Load() >= 100 })
}

// The on-call sinks ride the same outbox as the webhook (issue 35.3): a
// PagerDuty, Teams or SMTP host that is down gets each event again, with
// the same id, after a backoff, until MaxAttempts makes it a dead letter
// kept for the operator; a sink that answers again gets what is due.
func TestAnOnCallSinkThatIsDownIsRetriedThenDeadLettered(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // connections are refused
	for _, c := range []struct {
		name string
		sink notify.Sink
	}{
		{"pagerduty", &notify.PagerDuty{RoutingKey: testRoutingKey, URL: "http://" + dead + "/v2/enqueue"}},
		{"teams", &notify.Teams{URL: "http://" + dead + "/workflows?sig=S3CRETSIG", ConsoleURL: "https://ratchet.example.com"}},
		{"email", &notify.Email{Addr: dead, From: "ratchet@example.com", To: []string{"oncall@example.com"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := newEngine(t, []notify.Route{{Sinks: []string{c.name}}})
			obs := &counts{}
			runWorker(t, &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{c.name: c.sink}, Observer: obs,
				Backoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Poll: 5 * time.Millisecond, MaxAttempts: 3})
			h, err := eng.Halt(context.Background(), ledger.HaltRequest{All: true, Note: "incident", CreatedBy: "admin:alice"})
			if err != nil {
				t.Fatal(err)
			}
			eventually(t, 5*time.Second, "a dead letter", func() bool {
				dl, _ := eng.Outbox(context.Background(), true)
				return len(dl) == 1
			})
			dl, _ := eng.Outbox(context.Background(), true)
			if got := dl[0]; got.Attempts != 3 || got.Event.HaltID != h.HaltID || got.LastError == "" {
				t.Errorf("dead letter: attempts %d (want 3), halt %q (want %q), last error %q", got.Attempts, got.Event.HaltID, h.HaltID, got.LastError)
			}
			if strings.Contains(dl[0].LastError, "S3CRETSIG") || strings.Contains(dl[0].LastError, testRoutingKey) {
				t.Errorf("the dead letter's error quotes a secret: %s", dl[0].LastError)
			}
			eventually(t, time.Second, "two failed attempts and one dead observed", func() bool {
				return obs.get(c.name+":failed") == 2 && obs.get(c.name+":dead") == 1
			})
		})
	}
}
