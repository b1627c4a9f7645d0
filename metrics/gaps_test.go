package metrics

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// TestDimensionWarningsAreCounted: a begin whose per-dimension ceiling did
// not apply (no such dimension declared) counts in
// ratchet_dimension_warnings_total, by effect type, through a real engine.
func TestDimensionWarningsAreCounted(t *testing.T) {
	m := New()
	limit := int64(5)
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{Observer: m, Policies: []ledger.Rule{{Match: "email.send",
		Ceilings: []ledger.Ceiling{{Name: "per-list", LimitCount: &limit, Window: "1h", Per: "dimension:list"}}}}})
	for i, dims := range []map[string]string{nil, {"list": "news"}, nil} {
		if _, err := eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: string(rune('a' + i)), EffectType: "email.send", Dimensions: dims}); err != nil {
			t.Fatal(err)
		}
	}
	if text := scrape(t, m); !strings.Contains(text, `ratchet_dimension_warnings_total{effect_type="email.send"} 2`) {
		t.Errorf("want 2 dimension warnings for email.send:\n%s", grep(text, "ratchet_dimension_warnings_total"))
	}
}

// TestProxyOperationsAreCounted: the proxy's operation label, capped as
// effect types are.
func TestProxyOperationsAreCounted(t *testing.T) {
	m := New()
	m.Operation("stripe.payment_intents.create", "approval_required")
	if text := scrape(t, m); !strings.Contains(text, `ratchet_proxy_operations_total{decision="approval_required",operation="stripe.payment_intents.create"} 1`) {
		t.Errorf("no operation series:\n%s", grep(text, "ratchet_proxy_operations_total"))
	}
}
