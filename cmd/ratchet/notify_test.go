package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// hookLog is a webhook receiver that verifies each delivery, answers 503
// while down, and records the ids it saw.
type hookLog struct {
	secret []byte
	mu     sync.Mutex
	down   bool
	tried  []string       // every verified delivery's event id
	took   []ledger.Event // accepted deliveries
}

func (h *hookLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := notify.VerifyWebhook(h.secret, r.Header, body, time.Now(), 0); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tried = append(h.tried, r.Header.Get(notify.HeaderEventID))
	if h.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	var ev ledger.Event
	json.Unmarshal(body, &ev)
	h.took = append(h.took, ev)
}

func (h *hookLog) snapshot() (tried []string, took []ledger.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.tried...), append([]ledger.Event(nil), h.took...)
}

// TestAKilledServeDeliversAfterRestartWithTheSameEventID: the approval
// request is committed, its delivery fails (the receiver is down), serve is
// killed with SIGKILL before any delivery succeeded, and the restarted serve
// delivers it, with the same event id.
func TestAKilledServeDeliversAfterRestartWithTheSameEventID(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "webhook.secret")
	writeFile(t, secretFile, "whsec-process-test\n")
	hook := &hookLog{secret: []byte("whsec-process-test"), down: true}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	extra := `policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
notify:
  sinks:
    - {name: hook, type: webhook, url: "` + srv.URL + `", secret_file: "` + secretFile + `"}
  routes:
    - {sinks: [hook]}
`
	data := filepath.Join(dir, "data")
	s := startServe(t, data, extra)
	cs := connect(t, s.mcp)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
		"idempotency_key": "invoice:1", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	out := res.StructuredContent.(map[string]any)
	if out["decision"] != "approval_required" {
		t.Fatalf("begin: %v", out)
	}
	waitFor(t, 5*time.Second, "a first (failed) delivery", func() bool { tried, _ := hook.snapshot(); return len(tried) > 0 })
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	tried, took := hook.snapshot()
	if len(took) != 0 {
		t.Fatalf("delivered before the kill: %+v", took)
	}
	id := tried[0]

	hook.mu.Lock()
	hook.down = false
	hook.mu.Unlock()
	s = startServe(t, data, extra)
	waitFor(t, 15*time.Second, "the delivery after the restart", func() bool { _, took := hook.snapshot(); return len(took) > 0 })
	_, took = hook.snapshot()
	ev := took[0]
	if ev.ID != id || ev.Type != ledger.EventApprovalRequested || ev.ApprovalID != out["approval_id"] {
		t.Fatalf("after the restart got %+v, want event %s for approval %v", ev, id, out["approval_id"])
	}
	// Delivered once, the outbox is empty: nothing more arrives.
	time.Sleep(500 * time.Millisecond)
	if _, took := hook.snapshot(); len(took) != 1 {
		t.Fatalf("%d deliveries after the restart", len(took))
	}
	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `ratchet_notify_deliveries_total{event_type="approval.requested",result="delivered",sink="hook"} 1`) {
		t.Fatalf("metrics:\n%s", grepLines(string(b), "ratchet_notify"))
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestAKilledServeMidDeliverySendsAgainAtOnce: serve is killed with SIGKILL
// while the receiver holds the delivery open (the entry is claimed); the
// restarted serve sends it again at once, not when the dead claim runs
// out, with the same event id.
func TestAKilledServeMidDeliverySendsAgainAtOnce(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "webhook.secret")
	writeFile(t, secretFile, "whsec-process-test\n")
	arrived, hold := make(chan string, 4), make(chan struct{})
	var mu sync.Mutex
	var took []ledger.Event
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := notify.VerifyWebhook([]byte("whsec-process-test"), r.Header, body, time.Now(), 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		select {
		case <-hold: // released: take it
		default:
			arrived <- r.Header.Get(notify.HeaderEventID)
			<-r.Context().Done() // held open until the sender dies
			return
		}
		var ev ledger.Event
		json.Unmarshal(body, &ev)
		mu.Lock()
		took = append(took, ev)
		mu.Unlock()
	}))
	defer srv.Close()
	extra := `policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
notify:
  sinks:
    - {name: hook, type: webhook, url: "` + srv.URL + `", secret_file: "` + secretFile + `"}
  routes:
    - {sinks: [hook], events: [approval.requested]}
`
	data := filepath.Join(dir, "data")
	s := startServe(t, data, extra)
	cs := connect(t, s.mcp)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
		"idempotency_key": "invoice:held", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	var id string
	select {
	case id = <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery began")
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.done
	close(hold)
	start := time.Now()
	s = startServe(t, data, extra)
	waitFor(t, 5*time.Second, "the delivery after the restart (the dead claim lasts 25 s)", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(took) > 0
	})
	mu.Lock()
	defer mu.Unlock()
	if took[0].ID != id || took[0].Type != ledger.EventApprovalRequested {
		t.Fatalf("got %+v, want event %s", took[0], id)
	}
	t.Logf("sent again %v after the restart began", time.Since(start))
	if !strings.Contains(s.stderr.String(), "sent again") {
		t.Fatalf("the restart did not say it released the claim:\n%s", s.stderr)
	}
}
