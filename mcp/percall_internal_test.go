package mcp

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestACallsCostDoesNotGrowWithItsInputSchema: for every tools/call of the
// 2026-07-28 protocol the Go SDK encodes the tool's input schema and decodes
// it again (its x-mcp-header check); the begin schema is 3.5 KB, and that
// was a ninth of an MCP begin+report pair's instructions. The SDK checks a
// stand-in instead, and tools/list still lists the whole schema: here a tool
// whose schema holds a 1 MiB description allocates less than that per call,
// and tools/list carries the description whole.
func TestACallsCostDoesNotGrowWithItsInputSchema(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	spec := toolSpec{name: "test_get", title: "Get", desc: "Gets.", readOnly: true, output: effectOutput,
		fields: map[string]field{"effect_id": {desc: huge}, "idempotency_key": {desc: "A key."}}}
	s := sdk.NewServer(&sdk.Implementation{Name: "test", Version: "1"}, nil)
	tl := &tools{}
	addTool(s, tl, spec, func(_ context.Context, _ Identity, in *getInput) (*ledger.Effect, string, error) {
		return &ledger.Effect{EffectID: in.EffectID, State: ledger.StatePending}, "ok", nil
	})
	s.AddReceivingMiddleware(tl.listFull)
	srv := httptest.NewServer(Handler(s, nil))
	defer srv.Close()
	ctx := context.Background()
	// A client that has not listed the tools: the Go SDK's client does the
	// same work with the schemas it has listed, on its side.
	cs, err := Connect(ctx, srv.URL, "", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	get := func() {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "test_get", Arguments: map[string]any{"effect_id": "eff_1"}})
		if err != nil || res.IsError {
			t.Fatalf("call: %v %v", err, res)
		}
	}
	get()
	const calls = 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		get()
	}
	runtime.ReadMemStats(&after)
	// A call allocates about 650 KiB whatever its schema (the SDK's JSON
	// decoder takes a 32 KiB buffer for each of some twenty decodes); one
	// that encoded and decoded the schema, 6 MiB.
	if perCall := (after.TotalAlloc - before.TotalAlloc) / calls; perCall > uint64(len(huge)) {
		t.Errorf("a call allocates %d bytes, more than its tool's %d-byte input schema: the SDK re-encodes the schema per call", perCall, len(huge))
	}

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tools) != 1 {
		t.Fatalf("tools/list: %v", list.Tools)
	}
	schema, _ := list.Tools[0].InputSchema.(map[string]any)
	props, _ := schema["properties"].(map[string]any)
	id, _ := props["effect_id"].(map[string]any)
	if d, _ := id["description"].(string); d != huge {
		t.Errorf("tools/list: effect_id's description is %d bytes, want the whole %d", len(d), len(huge))
	}
}

// TestAnXMCPHeaderAnnotationStopsTheStart: the SDK checks a stand-in schema
// with no annotations, so a tool schema that had one would lose its check;
// that panics at start rather than serving it unchecked.
func TestAnXMCPHeaderAnnotationStopsTheStart(t *testing.T) {
	defer func() {
		if r, _ := recover().(string); !strings.Contains(r, "x-mcp-header") {
			t.Errorf("recovered %q, want a panic naming x-mcp-header", r)
		}
	}()
	held(&sdk.Tool{Name: "test_region", InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)})
}
