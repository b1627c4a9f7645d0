package mcp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
