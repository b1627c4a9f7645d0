package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestADeadSinksOutboxStaysWithinItsBoundInServe (issue 32.3), from
// outside: a real "ratchet serve" with notify.max_waiting 30 and
// notify.max_dead_letters 10, and a webhook sink whose port refuses
// connections. 100 approval requests are all decided (approval_required,
// never refused); within the worker's next bound check the sink holds at
// most 30 waiting entries (31 with the outbox.dropped event, routed to it
// too) and 10 dead letters, ratchet_outbox_dropped_total{sink="hook"}
// counts the 60 dropped, and the outbox.dropped event names the sink and
// the count. On Badger and on PostgreSQL.
func TestADeadSinksOutboxStaysWithinItsBoundInServe(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the worker's bound check (10 s)")
	}
	t.Run("badger", func(t *testing.T) { deadSinkBound(t, "") })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		schema := pgtest.Schema(t, dsn, "bound_")
		t.Setenv("RATCHET_PG_DSN", dsn)
		deadSinkBound(t, "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: "+schema+"}\n")
	})
}

func deadSinkBound(t *testing.T, backend string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	t.Setenv("RATCHET_TEST_HOOK_SECRET", "hook-secret")
	s := startServe(t, filepath.Join(t.TempDir(), "data"), backend+fmt.Sprintf(`notify:
  max_waiting: 30
  max_dead_letters: 10
  sinks:
    - {name: hook, type: webhook, url: "http://%s/hook", secret_env: RATCHET_TEST_HOOK_SECRET}
  routes:
    - sinks: [hook]
policies:
  - match: "payment.*"
    approval_threshold_micros: 1
`, dead))
	cs := connect(t, s.mcp)
	for i := range 100 {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
			"idempotency_key": fmt.Sprint("order-", i), "effect_type": "payment.charge", "estimated_cost_micros": 5}})
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := res.StructuredContent.(map[string]any); st["decision"] != "approval_required" {
			t.Fatalf("begin %d at the bound: %v, want approval_required", i, res.StructuredContent)
		}
	}
	dropped := func() float64 { return metricValue(t, s.admin, `ratchet_outbox_dropped_total{sink="hook"}`) }
	deadline := time.Now().Add(30 * time.Second)
	for dropped() < 60 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if got := dropped(); got < 60 {
		t.Fatalf(`ratchet_outbox_dropped_total{sink="hook"} = %v 30 s after 100 requests, want at least 60`, got)
	}
	resp, err := http.Get(s.admin + "/v1/outbox")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Entries []ledger.OutboxEntry `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	waiting, deadLetters, drops := 0, 0, 0
	for _, en := range out.Entries {
		if en.Dead {
			deadLetters++
		} else {
			waiting++
		}
		if en.Event.Type == ledger.EventOutboxDropped {
			drops++
			if en.Event.Sink != "hook" || en.Event.Count < 1 {
				t.Errorf("outbox.dropped: sink %q count %d, want hook and the count", en.Event.Sink, en.Event.Count)
			}
		}
	}
	if waiting > 31 {
		t.Errorf("%d entries waiting for the dead sink, want at most 31 (max_waiting 30 and the outbox.dropped event)", waiting)
	}
	if deadLetters > 10 {
		t.Errorf("%d dead letters for the sink, want at most 10 (max_dead_letters)", deadLetters)
	}
	if drops == 0 {
		t.Errorf("no outbox.dropped event in the outbox after %v dead letters were dropped", dropped())
	}
	t.Logf("outbox after the bound: %d waiting, %d dead; %v dropped", waiting, deadLetters, dropped())
}
