package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

func i64(v int64) *int64 { return &v }

// newEngine opens a real engine on Badger whose payments of $100 or more
// need approval, routing notifications by routes.
func newEngine(t *testing.T, routes []notify.Route) *ledger.Engine {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(100_000_000)}},
		Route: notify.Router(routes)})
	return eng
}

func askApproval(t *testing.T, eng *ledger.Engine, key string) *ledger.BeginResult {
	t.Helper()
	res, err := eng.Begin(context.Background(), payment(key))
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("begin %s: %s, want approval_required", key, res.Decision)
	}
	return res
}

func payment(key string) ledger.BeginRequest {
	return ledger.BeginRequest{Namespace: "shop", IdempotencyKey: key, EffectType: "payment.charge", AgentID: "bot",
		Payload: json.RawMessage(`{"amount":150}`), EstimatedCostMicros: i64(150_000_000)}
}

// runWorker runs w until the test ends.
func runWorker(t *testing.T, w *notify.Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// counts is a notify.Observer that counts results.
type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) Delivery(sink, _, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[sink+":"+result]++
}

func (c *counts) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func isPermanent(err error) bool { return errors.Is(err, notify.ErrPermanent) }
