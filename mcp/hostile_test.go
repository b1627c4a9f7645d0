package mcp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// TestHostileArguments sends hostile tool arguments through the SDK's real
// client: each is refused with invalid_argument (or the named code) and
// nothing is recorded.
func TestHostileArguments(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	eng := newEngine(t, c)
	cs := inMemory(t, mcp.New(eng, nil))
	dims := map[string]any{}
	for i := range 10_000 {
		dims["d"+strings.Repeat("x", i%50)+string(rune('a'+i%26))+itoa(i)] = "v"
	}
	deep := json.RawMessage(strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200))
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"idempotency_key": "hostile", "effect_type": "email.send"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := map[string]struct {
		args map[string]any
		code string
	}{
		"huge key":             {base(map[string]any{"idempotency_key": strings.Repeat("k", 100_000)}), "invalid_argument"},
		"deep payload":         {base(map[string]any{"payload": deep}), "invalid_argument"},
		"NaN cost":             {base(map[string]any{"estimated_cost_micros": "NaN"}), "invalid_argument"},
		"negative cost":        {base(map[string]any{"estimated_cost_micros": -1}), "invalid_argument"},
		"overflowing cost":     {base(map[string]any{"estimated_cost_micros": 1e30}), "invalid_argument"},
		"fractional cost":      {base(map[string]any{"estimated_cost_micros": 1.5}), "invalid_argument"},
		"10000 dimensions":     {base(map[string]any{"dimensions": dims}), "invalid_argument"},
		"dimension not string": {base(map[string]any{"dimensions": map[string]any{"counterparty": 7}}), "invalid_argument"},
		"unknown field":        {base(map[string]any{"amount": 5}), "invalid_argument"},
		"huge lease":           {base(map[string]any{"lease_seconds": 1e9}), "invalid_argument"},
		"effect type shouting": {base(map[string]any{"effect_type": "EMAIL.SEND"}), "invalid_argument"},
		"payload too big":      {base(map[string]any{"payload": strings.Repeat("x", 70_000)}), "invalid_argument"},
		"compensation garbage": {base(map[string]any{"compensation": "undo it"}), "invalid_argument"},
		"compensates nothing":  {base(map[string]any{"compensates_effect_id": "eff_missing"}), "effect_not_found"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			toolErr(t, cs, "ratchet_begin_effect", c.args, c.code)
		})
	}
	// A compensation that names itself.
	first := decision(t, cs, base(nil), "execute")
	toolErr(t, cs, "ratchet_begin_effect", base(map[string]any{"compensates_effect_id": first["effect_id"]}), "invalid_argument")
	page, _ := eng.List(context.Background(), ledger.Filter{Limit: 10})
	if len(page.Effects) != 1 {
		t.Fatalf("hostile input recorded %d effects", len(page.Effects))
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
