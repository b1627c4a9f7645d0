package mcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// maxToolsListBytes bounds the tools/list answer, which every agent pays for
// in context on every session (README: "Tested with"). It grew from 14,000
// by the input bounds the schemas state since (compensation's fields,
// dimensions' entries) and the report's result_note.
const maxToolsListBytes = 14_500

// TestToolsListSchemas checks every tool's schemas as they reach a client
// against the MCP specification's rules for a tool (input and output
// schemas are JSON Schema 2020-12 objects of type "object" whose properties
// are schema objects) and against what clients accept: the TypeScript SDK
// 1.x refuses the whole list when any property schema is not an object, so
// no boolean schema may appear anywhere, not even additionalProperties:
// false.
func TestToolsListSchemas(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cs := inMemory(t, mcp.New(newEngine(t, c), nil))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tools/list: %d bytes", len(b))
	if len(b) > maxToolsListBytes {
		t.Errorf("tools/list is %d bytes, more than %d: every agent pays for it in context", len(b), maxToolsListBytes)
	}
	var list struct {
		Tools []struct {
			Name         string `json:"name"`
			InputSchema  any    `json:"inputSchema"`
			OutputSchema any    `json:"outputSchema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		for kind, schema := range map[string]any{"inputSchema": tool.InputSchema, "outputSchema": tool.OutputSchema} {
			path := tool.Name + "." + kind
			root, ok := schema.(map[string]any)
			if !ok || root["type"] != "object" {
				t.Errorf("%s: want an object schema of type \"object\", got %v", path, schema)
				continue
			}
			for _, p := range schemaProblems(schema, path) {
				t.Error(p)
			}
			var s jsonschema.Schema
			js, _ := json.Marshal(schema)
			if err := json.Unmarshal(js, &s); err != nil {
				t.Errorf("%s: %v", path, err)
			} else if _, err := s.Resolve(nil); err != nil {
				t.Errorf("%s does not resolve as JSON Schema 2020-12: %v", path, err)
			}
		}
	}
}

// schemaKeywords are the keywords whose value is a schema, a list of
// schemas, or a map of names to schemas.
var (
	schemaValued = []string{"items", "additionalProperties", "not", "if", "then", "else", "contains",
		"propertyNames", "unevaluatedProperties", "unevaluatedItems", "additionalItems", "contentSchema"}
	schemaLists = []string{"allOf", "anyOf", "oneOf", "prefixItems"}
	schemaMaps  = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
)

// schemaProblems lists every boolean or otherwise non-object schema in
// schema, and every required name that is not a property.
func schemaProblems(schema any, path string) []string {
	m, ok := schema.(map[string]any)
	if !ok {
		return []string{fmt.Sprintf("%s: schema %v is not an object", path, schema)}
	}
	var out []string
	for _, k := range schemaValued {
		if v, ok := m[k]; ok {
			out = append(out, schemaProblems(v, path+"."+k)...)
		}
	}
	for _, k := range schemaLists {
		if v, ok := m[k]; ok {
			list, _ := v.([]any)
			for i, s := range list {
				out = append(out, schemaProblems(s, fmt.Sprintf("%s.%s[%d]", path, k, i))...)
			}
		}
	}
	for _, k := range schemaMaps {
		if v, ok := m[k]; ok {
			props, ok := v.(map[string]any)
			if !ok {
				out = append(out, fmt.Sprintf("%s.%s is not an object", path, k))
				continue
			}
			for name, s := range props {
				out = append(out, schemaProblems(s, path+"."+k+"."+name)...)
			}
		}
	}
	if req, ok := m["required"]; ok {
		props, _ := m["properties"].(map[string]any)
		list, _ := req.([]any)
		for _, r := range list {
			if name, ok := r.(string); !ok || props[name] == nil {
				out = append(out, fmt.Sprintf("%s: required %v is not a property", path, r))
			}
		}
	}
	return out
}

func TestSchemaProblemsFindsBooleans(t *testing.T) {
	var s any
	json.Unmarshal([]byte(`{"type":"object","properties":{"a":true,"b":{"type":"array","items":false},
		"c":{"type":"object","additionalProperties":false}},"required":["a","z"]}`), &s)
	got := strings.Join(schemaProblems(s, "s"), "\n")
	for _, want := range []string{"s.properties.a: schema true", "s.properties.b.items: schema false",
		"s.properties.c.additionalProperties: schema false", "required z"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
}

// TestProtocolVersions connects with every protocol version the Go SDK
// supports, over HTTP with a bearer token and over an in-memory (stdio-like)
// transport: each is answered with the version asked for, lists the tools
// and gets both a result and an error code.
func TestProtocolVersions(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	eng := newEngine(t, c)
	srv := httptest.NewServer(mcp.Handler(mcp.New(eng, nil), &mcp.HTTPOptions{
		Agents: hashes(map[string]mcp.Identity{"tok": {Namespace: "shop", AgentID: "bot"}})}))
	t.Cleanup(srv.Close)
	for _, v := range sdk.SupportedProtocolVersions() {
		for _, transport := range []string{"http", "in-memory"} {
			t.Run(v+"/"+transport, func(t *testing.T) {
				var ct sdk.Transport
				if transport == "http" {
					ct = &sdk.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: bearerClient("tok")}
				} else {
					var st sdk.Transport
					ct, st = sdk.NewInMemoryTransports()
					ss, err := mcp.New(eng, nil).Connect(context.Background(), st, nil)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { ss.Close() })
				}
				cs, err := sdk.NewClient(&sdk.Implementation{Name: "versions", Version: "1"}, nil).
					Connect(context.Background(), ct, &sdk.ClientSessionOptions{ProtocolVersion: v})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cs.Close() })
				if got := cs.InitializeResult().ProtocolVersion; got != v {
					t.Fatalf("asked for %s, got %s", v, got)
				}
				tools, err := cs.ListTools(context.Background(), nil)
				if err != nil || len(tools.Tools) != 6 {
					t.Fatalf("tools/list: %v %v", err, tools)
				}
				key := "v:" + v + ":" + transport
				decision(t, cs, map[string]any{"idempotency_key": key, "effect_type": "email.send"}, "execute")
				toolErr(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": key, "effect_type": "email.send",
					"payload": map[string]any{"changed": true}}, "idempotency_key_conflict")
			})
		}
	}
	if !slices.Contains(sdk.SupportedProtocolVersions(), "2024-11-05") {
		t.Log("the SDK no longer supports 2024-11-05; interop/ runs the oldest it lists")
	}
}

// TestErrorShape pins the shape of a tool error (package doc, README).
func TestErrorShape(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cs := inMemory(t, mcp.New(newEngine(t, c), nil))
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
		Arguments: map[string]any{"effect_type": "email.send"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(sdk.CallToolResult{Content: res.Content, IsError: res.IsError, StructuredContent: res.StructuredContent})
	want := `{"content":[{"type":"text","text":"invalid_argument: idempotency_key: is required"},` +
		`{"type":"text","text":"{\"error\":{\"code\":\"invalid_argument\",\"message\":\"idempotency_key: is required\",\"field\":\"idempotency_key\"}}"}],"isError":true}`
	if string(b) != want {
		t.Fatalf("error result\n got %s\nwant %s", b, want)
	}
	if e := mcp.ErrorOf(res); e == nil || e.Code != ledger.CodeInvalidArgument || e.Field != "idempotency_key" {
		t.Fatalf("ErrorOf: %+v", e)
	}
	if e := mcp.ErrorOf(&sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "boom"}}}); e == nil || e.Code != ledger.CodeInternal || e.Message != "boom" {
		t.Fatalf("ErrorOf a foreign error: %+v", e)
	}
	if e := mcp.ErrorOf(&sdk.CallToolResult{}); e != nil {
		t.Fatalf("ErrorOf a success: %+v", e)
	}
}

// bearerClient is an HTTP client that sends token as a bearer token.
func bearerClient(token string) *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTheBeginSchemaStatesTheConfiguredLeases: lease_seconds' maximum and
// default in the schema are the engine's configured ones, not constants.
func TestTheBeginSchemaStatesTheConfiguredLeases(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cs := inMemory(t, mcp.New(newEngine(t, c), &mcp.Options{Defaults: ledger.Defaults{LeaseSeconds: 30, MaxLeaseSeconds: 900}}))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name != "ratchet_begin_effect" {
			continue
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Properties map[string]struct {
				Maximum     float64 `json:"maximum"`
				Description string  `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		p := s.Properties["lease_seconds"]
		if p.Maximum != 900 || !strings.Contains(p.Description, "(default 30)") {
			t.Fatalf("lease_seconds: %+v", p)
		}
		return
	}
	t.Fatal("no begin tool")
}

// TestTheBeginSchemaStatesTheInputBounds: what begin refuses for size is
// in its schema where JSON Schema can say it (lengths, entries), and in the
// descriptions where it cannot (a JSON value's bytes).
func TestTheBeginSchemaStatesTheInputBounds(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	cs := inMemory(t, mcp.New(newEngine(t, c), nil))
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	schemas := map[string]*jsonschema.Schema{}
	for _, tool := range res.Tools {
		var s jsonschema.Schema
		b, _ := json.Marshal(tool.InputSchema)
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		schemas[tool.Name] = &s
	}
	begin := schemas["ratchet_begin_effect"]
	intOf := func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	}
	dims := begin.Properties["dimensions"]
	if got := intOf(dims.MaxProperties); got != ledger.MaxDimensions {
		t.Errorf("dimensions.maxProperties %d, want %d", got, ledger.MaxDimensions)
	}
	if dims.AdditionalProperties == nil || intOf(dims.AdditionalProperties.MaxLength) != ledger.MaxDimValueLen {
		t.Errorf("dimensions' values have no maxLength %d", ledger.MaxDimValueLen)
	}
	comp := begin.Properties["compensation"].Properties
	for name, want := range map[string]int{"effect_type": ledger.MaxEffectTypeLen, "vendor": ledger.MaxVendorNameLen, "description": ledger.MaxTextLen} {
		if p := comp[name]; p == nil || intOf(p.MaxLength) != want {
			t.Errorf("compensation.%s has no maxLength %d", name, want)
		}
	}
	if got := intOf(begin.Properties["description"].MaxLength); got != ledger.MaxTextLen {
		t.Errorf("description.maxLength %d, want %d", got, ledger.MaxTextLen)
	}
	for _, d := range []string{begin.Properties["payload"].Description, comp["payload"].Description} {
		if !strings.Contains(d, "64 KiB") {
			t.Errorf("a payload's description %q does not state its limit", d)
		}
	}
	// A report states no bound it would refuse: it is never refused for size.
	report := schemas["ratchet_report_effect"]
	for _, name := range []string{"result", "error", "vendor_reference"} {
		if p := report.Properties[name]; p.MaxLength != nil {
			t.Errorf("report's %s has maxLength %d: a client would refuse a report Ratchet keeps", name, *p.MaxLength)
		}
	}
	if !strings.Contains(report.Properties["result"].Description, "summary") {
		t.Errorf("report's result description %q does not say what is kept", report.Properties["result"].Description)
	}
}
