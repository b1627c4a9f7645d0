package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

var (
	_ webhooks.Observer = (*Metrics)(nil)
	_ recovery.Observer = (*Metrics)(nil)
)

func TestWebhookAndRecoveryCounters(t *testing.T) {
	m := New()
	m.Webhook("stripe", "received")
	m.Webhook("stripe", "settled")
	m.Recovery("adyen", "tried")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	for _, want := range []string{`ratchet_webhook_events_total{stage="settled",vendor="stripe"} 1`,
		`ratchet_recoveries_total{result="tried",vendor="adyen"} 1`} {
		if !strings.Contains(string(b), want) {
			t.Fatalf("no %s in\n%s", want, grep(string(b), "ratchet_"))
		}
	}
}
