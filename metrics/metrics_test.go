package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestEffectTypeLabelsAreCapped(t *testing.T) {
	m := New()
	for i := range maxEffectTypes + 50 {
		m.Begin(fmt.Sprintf("agent.invented%d", i), ledger.DecisionExecute, time.Millisecond)
	}
	m.Begin("agent.invented0", ledger.DecisionDenied, time.Millisecond) // a known type keeps its label
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	text := string(b)
	if !strings.Contains(text, `ratchet_decisions_total{decision="execute",effect_type="other"} 50`) ||
		!strings.Contains(text, `ratchet_decisions_total{decision="denied",effect_type="agent.invented0"} 1`) {
		t.Fatalf("labels not capped as expected:\n%s", grep(text, "ratchet_decisions_total"))
	}
	if n := strings.Count(text, "ratchet_decisions_total{"); n != maxEffectTypes+2 {
		t.Fatalf("%d series", n)
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) && len(out) < 5 {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestWriteFailuresByStage(t *testing.T) {
	m := New()
	m.WriteFailed("commit", 3)
	m.WriteFailed("sync", 2)
	m.WriteFailed("commit", 1)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	text := string(b)
	for _, want := range []string{`ratchet_ledger_write_failures_total{stage="commit"} 4`, `ratchet_ledger_write_failures_total{stage="sync"} 2`} {
		if !strings.Contains(text, want) {
			t.Fatalf("no %s in:\n%s", want, grep(text, "ratchet_ledger_write_failures_total"))
		}
	}
}

// fakeOutbox holds outbox entries for the gauges.
type fakeOutbox []ledger.OutboxEntry

func (f fakeOutbox) Outbox(_ context.Context, deadOnly bool) ([]ledger.OutboxEntry, error) {
	return f, nil
}

func TestNotificationDeliveriesAndDeadLetters(t *testing.T) {
	m := New()
	m.Delivery("slack", "approval.requested", "delivered")
	m.Delivery("hook", "approval.requested", "failed")
	m.Delivery("hook", "approval.requested", "dead")
	m.WatchOutbox(fakeOutbox{{Sink: "hook", Dead: true}, {Sink: "hook", Dead: true}, {Sink: "slack"}})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	text := string(b)
	for _, want := range []string{
		`ratchet_notify_deliveries_total{event_type="approval.requested",result="delivered",sink="slack"} 1`,
		`ratchet_notify_deliveries_total{event_type="approval.requested",result="dead",sink="hook"} 1`,
		`ratchet_outbox_entries{sink="hook",status="dead"} 2`,
		`ratchet_outbox_entries{sink="slack",status="waiting"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Fatalf("no %s in:\n%s", want, grep(text, "ratchet_"))
		}
	}
}
