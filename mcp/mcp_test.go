package mcp_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func i64(v int64) *int64 { return &v }

func rules() []ledger.Rule {
	return []ledger.Rule{
		{Match: "payment.*", ApprovalThresholdMicros: i64(100_000_000), RequireDimensions: []string{"counterparty"},
			Ceilings: []ledger.Ceiling{{Name: "daily-spend", LimitMicros: i64(150_000_000), Window: "24h", Per: "global"}}},
		{Match: "cloud.*", Ceilings: []ledger.Ceiling{{Name: "cloud-spend", LimitMicros: i64(1000), Window: "1h", Per: "global"}}},
	}
}

// newEngine opens an engine on a real Badger directory.
func newEngine(t testing.TB, c *clock) *ledger.Engine {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Policies: rules(), Clock: c})
	return eng
}

// inMemory connects the SDK's client to the server over an in-memory
// transport.
func inMemory(t testing.TB, s *sdk.Server) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test-agent", Version: "1"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// call calls a tool and decodes its structured content into a map (for a
// tool error, the JSON of its second text item); it fails the test on
// protocol errors, not on tool errors. Every result is checked against the
// tool's advertised output schema, as the TypeScript SDK does, and every
// error for the shape the package doc promises.
func call(t testing.TB, cs *sdk.ClientSession, tool string, args any) (map[string]any, *sdk.CallToolResult) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if len(res.Content) == 0 {
		t.Fatalf("%s: no text content", tool)
	}
	var out map[string]any
	if res.IsError {
		if res.StructuredContent != nil {
			t.Fatalf("%s: an error result carries structured content %v, which clients check against the output schema", tool, res.StructuredContent)
		}
		if len(res.Content) != 2 {
			t.Fatalf("%s: error result with %d content items, want the text and the JSON", tool, len(res.Content))
		}
		js := res.Content[1].(*sdk.TextContent).Text
		if err := json.Unmarshal([]byte(js), &out); err != nil {
			t.Fatalf("%s: error JSON %s: %v", tool, js, err)
		}
		return out, res
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", tool, b, err)
	}
	var v any
	json.Unmarshal(b, &v)
	if err := outputSchema(t, cs, tool).Validate(&v); err != nil {
		t.Fatalf("%s: result does not match its output schema: %v\n%s", tool, err, b)
	}
	return out, res
}

var (
	schemaMu sync.Mutex
	schemas  = map[*sdk.ClientSession]map[string]*jsonschema.Resolved{}
)

// outputSchema returns a tool's advertised output schema, resolved.
func outputSchema(t testing.TB, cs *sdk.ClientSession, tool string) *jsonschema.Resolved {
	t.Helper()
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if schemas[cs] == nil {
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		schemas[cs] = map[string]*jsonschema.Resolved{}
		for _, tl := range res.Tools {
			var s jsonschema.Schema
			b, _ := json.Marshal(tl.OutputSchema)
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			r, err := s.Resolve(nil)
			if err != nil {
				t.Fatalf("%s output schema: %v", tl.Name, err)
			}
			schemas[cs][tl.Name] = r
		}
	}
	return schemas[cs][tool]
}

func decision(t testing.TB, cs *sdk.ClientSession, args map[string]any, want string) map[string]any {
	t.Helper()
	out, res := call(t, cs, "ratchet_begin_effect", args)
	if res.IsError || out["decision"] != want {
		t.Fatalf("begin %v: got %v (isError %v), want %s", args["idempotency_key"], out, res.IsError, want)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !strings.HasPrefix(text, want+": ") {
		t.Fatalf("summary %q does not start with the decision", text)
	}
	return out
}

func toolErr(t testing.TB, cs *sdk.ClientSession, tool string, args any, code string) map[string]any {
	t.Helper()
	out, res := call(t, cs, tool, args)
	e, _ := out["error"].(map[string]any)
	if !res.IsError || e == nil || e["code"] != code || e["message"] == "" {
		t.Fatalf("%s %v: got %v (isError %v), want error %s", tool, args, out, res.IsError, code)
	}
	if text := res.Content[0].(*sdk.TextContent).Text; text != code+": "+e["message"].(string) {
		t.Fatalf("error text %q is not %q", text, code+": "+e["message"].(string))
	}
	if le := mcp.ErrorOf(res); le == nil || string(le.Code) != code || le.Message != e["message"] || le.Field != stringOr(e["field"]) {
		t.Fatalf("ErrorOf: %+v, want %v", le, e)
	}
	return e
}

func stringOr(v any) string { s, _ := v.(string); return s }

func toMap(t testing.TB, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// hashes keys a token → identity map by the tokens' SHA-256, as the config does.
func hashes(m map[string]mcp.Identity) mcp.Agents {
	out := mcp.Agents{}
	for tok, id := range m {
		sum := sha256.Sum256([]byte(tok))
		out[hex.EncodeToString(sum[:])] = id
	}
	return out
}
