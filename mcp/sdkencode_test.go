package mcp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// wantEncoded is a JSON-RPC message as go-sdk v1.8.0's EncodeMessage wrote
// it before third_party/README.md's second patch: encoding/json, HTML
// escaping off, over the wire struct (its RawMessage fields compacted).
func wantEncoded(t *testing.T, id any, method string, params, result json.RawMessage, werr *jsonrpc.Error) ([]byte, error) {
	t.Helper()
	wire := struct {
		VersionTag string          `json:"jsonrpc"`
		ID         any             `json:"id,omitempty"`
		Method     string          `json:"method,omitempty"`
		Params     json.RawMessage `json:"params,omitempty"`
		Result     json.RawMessage `json:"result,omitempty"`
		Error      *jsonrpc.Error  `json:"error,omitempty"`
	}{"2.0", id, method, params, result, werr}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&wire); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// The SDK's encoder appends compact params and results as they are
// (third_party/README.md, the second patch) and writes every message as
// encoding/json did: the same bytes, and an error for invalid JSON.
func TestTheSDKEncodesAMessageAsEncodingJSONDid(t *testing.T) {
	raws := []string{
		`{"a":1}`, `{ "a" : 1 }`, "{\"a\":\n[1, 2]}", `"<b> & </b>"`, `{"s":"\u003c\u2028"}`, "{\"s\":\"\u2028\"}",
		`{"q":"a\"b\\","n":null}`, `[true,false,null,-1.5e3]`, `{"a":1`, `{"a":1}x`, `{"a":01}`, "\"\x01\"", `7`, `"x y"`,
	}
	id, err := jsonrpc.MakeID(float64(42))
	if err != nil {
		t.Fatal(err)
	}
	for _, raw := range raws {
		for _, kind := range []string{"result", "params", "result and error"} {
			var msg jsonrpc.Message
			var want []byte
			var werr error
			switch kind {
			case "result":
				msg = &jsonrpc.Response{ID: id, Result: json.RawMessage(raw)}
				want, werr = wantEncoded(t, int64(42), "", nil, json.RawMessage(raw), nil)
			case "params":
				msg = &jsonrpc.Request{ID: id, Method: "tools/call", Params: json.RawMessage(raw)}
				want, werr = wantEncoded(t, int64(42), "tools/call", json.RawMessage(raw), nil, nil)
			default:
				e := &jsonrpc.Error{Code: -32000, Message: "boom <&>"}
				msg = &jsonrpc.Response{ID: id, Result: json.RawMessage(raw), Error: e}
				want, werr = wantEncoded(t, int64(42), "", nil, json.RawMessage(raw), e)
			}
			got, gerr := jsonrpc.EncodeMessage(msg)
			if (gerr != nil) != (werr != nil) {
				t.Errorf("%s %q: error %v, want %v", kind, raw, gerr, werr)
				continue
			}
			if werr != nil {
				var se *json.SyntaxError
				if !errors.As(gerr, &se) {
					t.Errorf("%s %q: error %v, want one wrapping encoding/json's %v", kind, raw, gerr, werr)
				}
				continue
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s %q: encoded (-encoding/json +SDK):\n%s", kind, raw, diff)
			}
		}
	}
}

// v180Result is a tool result as go-sdk v1.8.0's CallToolResult.MarshalJSON
// wrote it before third_party/README.md's third patch, for a result with
// no input requests: encoding/json over the same fields, resultType last.
func v180Result(r *sdk.CallToolResult, resultType string) ([]byte, error) {
	return json.Marshal(struct {
		Meta              sdk.Meta      `json:"_meta,omitempty"`
		Content           []sdk.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
		IsError           bool          `json:"isError,omitempty"`
		RequestState      string        `json:"requestState,omitempty"`
		ResultType        string        `json:"resultType,omitempty"`
	}{r.Meta, r.Content, r.StructuredContent, r.IsError, r.RequestState, resultType})
}

// withResultType is r with its (unexported) result type set, as the SDK
// sets "complete" on every result of the 2026-07-28 protocol: decoded from
// JSON that has it, r's exported fields copied in.
func withResultType(t *testing.T, r *sdk.CallToolResult, resultType string) *sdk.CallToolResult {
	t.Helper()
	var x sdk.CallToolResult
	if err := json.Unmarshal([]byte(`{"content":[],"resultType":"`+resultType+`"}`), &x); err != nil {
		t.Fatal(err)
	}
	x.Meta, x.Content, x.StructuredContent, x.IsError, x.RequestState = r.Meta, r.Content, r.StructuredContent, r.IsError, r.RequestState
	return &x
}

// checkResultEncoding fails t unless r, with no result type and with
// "complete", encodes to v1.8.0's bytes, or both fail.
func checkResultEncoding(t *testing.T, name string, r *sdk.CallToolResult) {
	t.Helper()
	checkResultEncodingAs(t, name, r, "")
	checkResultEncodingAs(t, name+` (resultType "complete")`, withResultType(t, r, "complete"), "complete")
}

func checkResultEncodingAs(t *testing.T, name string, r *sdk.CallToolResult, resultType string) {
	t.Helper()
	want, werr := v180Result(r, resultType)
	got, gerr := r.MarshalJSON()
	if (gerr != nil) != (werr != nil) {
		t.Errorf("%s: error %v, want %v", name, gerr, werr)
		return
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s: encoded (-v1.8.0 +patched):\n%s", name, diff)
	}
	// What the SDK's JSON-RPC layer takes without checking: the same bytes,
	// and compact, valid JSON whenever the result vouches for it.
	vb, compact, verr := r.MarshalCompactJSON()
	if (verr != nil) != (werr != nil) {
		t.Errorf("%s: MarshalCompactJSON error %v, want %v", name, verr, werr)
		return
	}
	if diff := cmp.Diff(string(want), string(vb)); diff != "" {
		t.Errorf("%s: MarshalCompactJSON (-v1.8.0 +patched):\n%s", name, diff)
	}
	if compact {
		var buf bytes.Buffer
		if err := json.Compact(&buf, vb); err != nil || buf.String() != string(vb) {
			t.Errorf("%s: vouched compact for %q (compacted %q, %v)", name, vb, buf.String(), err)
		}
	}
}

var resultTexts = []string{"", "execute: go", `{"decision":"execute","n":1}`, `a\"b\\c`, "<b> & </b>", "tab\there\nline",
	"\x01\x7f", "caf\u00e9 \u2014 \u2028\u2029", "bad \xff utf-8", `\u003c`, "ok"}

var resultRaws = []string{`{"ok":true}`, `{ "ok" : true }`, `{"s":"<b>"}`, `{"s":"\u003c"}`, "{\"s\":\"\u2028\"}", `[1,2]`, `7`, `"x"`, `{"a":1`, `null`}

// A tool result the SDK writes directly (third_party/README.md, the third
// patch) has the bytes v1.8.0 wrote, and every other result is still
// encoded as before: text blocks with escapes, structured content spaced,
// with HTML characters or invalid, _meta, annotations, other content
// kinds, no content, an error result.
func TestAToolResultEncodesAsTheSDKDid(t *testing.T) {
	for _, text := range resultTexts {
		for _, raw := range resultRaws {
			r := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "summary"}, &sdk.TextContent{Text: text}},
				StructuredContent: json.RawMessage(raw)}
			checkResultEncoding(t, fmt.Sprintf("text %q structured %q", text, raw), r)
		}
	}
	for name, r := range map[string]*sdk.CallToolResult{
		"no content":          {},
		"empty content":       {Content: []sdk.Content{}},
		"an error":            {IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: "boom <&>"}}},
		"a map as structured": {StructuredContent: map[string]any{"b": "<", "a": 1}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		"a nil raw message":   {StructuredContent: json.RawMessage(nil)},
		"_meta":               {Meta: sdk.Meta{"k": "v"}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		// every result of the 2026-07-28 protocol carries the server's
		// Implementation in _meta (annotateServerInfo)
		"serverInfo": {Meta: sdk.Meta{sdk.MetaKeyServerInfo: &sdk.Implementation{Name: "ratchet <&>", Version: "1.0"}},
			Content: []sdk.Content{&sdk.TextContent{Text: "summary"}, &sdk.TextContent{Text: `{"decision":"execute"}`}}, StructuredContent: json.RawMessage(`{"decision":"execute"}`)},
		"_meta of several keys": {Meta: sdk.Meta{"z": []int{1, 2}, "a": map[string]any{"y": nil, "b": " "}, "m": json.RawMessage(`{ "spaced" : 1 }`)},
			Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		"empty _meta":               {Meta: sdk.Meta{}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		"_meta that cannot encode":  {Meta: sdk.Meta{"c": make(chan int)}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		"_meta with an invalid raw": {Meta: sdk.Meta{"r": json.RawMessage(`{`)}, Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		"request state":             {RequestState: "s<\"", Content: []sdk.Content{&sdk.TextContent{Text: "x"}}},
		"plain request state":       {RequestState: "opaque.state-1", Content: []sdk.Content{&sdk.TextContent{Text: "x"}}, StructuredContent: json.RawMessage(`{}`)},
		"annotations":               {Content: []sdk.Content{&sdk.TextContent{Text: "x", Annotations: &sdk.Annotations{Priority: 1}}}},
		"a text block's meta":       {Content: []sdk.Content{&sdk.TextContent{Text: "x", Meta: sdk.Meta{"k": 1}}}},
		"an image":                  {Content: []sdk.Content{&sdk.TextContent{Text: "x"}, &sdk.ImageContent{Data: []byte("png"), MIMEType: "image/png"}}},
	} {
		checkResultEncoding(t, name, r)
	}
}

func FuzzToolResultEncoding(f *testing.F) {
	for i, text := range resultTexts {
		f.Add(text, resultRaws[i%len(resultRaws)], i%2 == 0, resultTexts[(i+3)%len(resultTexts)])
	}
	f.Fuzz(func(t *testing.T, text, raw string, isError bool, server string) {
		r := &sdk.CallToolResult{IsError: isError,
			Content: []sdk.Content{&sdk.TextContent{Text: text}}, StructuredContent: json.RawMessage(raw)}
		if server != "" { // as annotateServerInfo sets it on every result of the 2026-07-28 protocol
			r.Meta = sdk.Meta{sdk.MetaKeyServerInfo: &sdk.Implementation{Name: server, Version: text}}
		}
		checkResultEncoding(t, "fuzz", r)
	})
}
