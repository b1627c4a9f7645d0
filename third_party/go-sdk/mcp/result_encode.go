// Ratchet's third patch to go-sdk v1.8.0 (third_party/README.md): a tool
// result of text blocks and compact structured content is written
// directly, without encoding/json's reflection and its compaction of
// every MarshalJSON's output. The bytes are the ones v1.8.0 wrote.

package mcp

import (
	"bytes"
	"encoding/json"

	internaljson "github.com/modelcontextprotocol/go-sdk/internal/json"
	"github.com/modelcontextprotocol/go-sdk/internal/jsonrpc2"
)

var _ jsonrpc2.CompactMarshaler = (*CallToolResult)(nil)

// MarshalCompactJSON is MarshalJSON for the SDK's JSON-RPC layer
// (jsonrpc2.CompactMarshaler, Ratchet's patch): a result written directly
// is valid, compact JSON as built (its _meta from json.Marshal, its texts
// quoted here or by json.Marshal, its structured content checked with
// IsCompact), so it says so and is not checked again.
func (x *CallToolResult) MarshalCompactJSON() ([]byte, bool, error) {
	if b, ok := x.simpleResultJSON(); ok {
		return b, true, nil
	}
	b, err := x.marshalWire()
	return b, false, err
}

// simpleResultJSON is x's JSON as v1.8.0's MarshalJSON wrote it
// (encoding/json over its wire struct, HTML escaping on) when x is a
// plain result: no input requests; _meta absent or one json.Marshal
// encodes; content only text blocks without _meta or annotations;
// structured content absent or a json.RawMessage that encoding/json would
// leave as it is (compact, valid, nothing it escapes for HTML). Otherwise
// it returns false and x goes through the encoder as before.
func (x *CallToolResult) simpleResultJSON() ([]byte, bool) {
	if x.InputRequests != nil {
		return nil, false
	}
	var structured json.RawMessage
	switch v := x.StructuredContent.(type) {
	case nil:
	case json.RawMessage:
		if v == nil || !internaljson.IsCompact(v) || bytes.ContainsAny(v, "<>&") ||
			bytes.Contains(v, lineSeparator) || bytes.Contains(v, paragraphSeparator) {
			return nil, false
		}
		structured = v
	default:
		return nil, false
	}
	size := 64 + len(structured) + len(x.RequestState)
	for _, c := range x.Content {
		t, ok := c.(*TextContent)
		if !ok || t == nil || t.Meta != nil || t.Annotations != nil {
			return nil, false
		}
		size += 32 + len(t.Text) + len(t.Text)/8 // room for some escapes
	}
	// Last of the checks, the only one that costs: the server sets _meta
	// on every result of the 2026-07-28 protocol (annotateServerInfo).
	// json.Marshal writes a map as the wire struct's field does, compact,
	// keys sorted, HTML escaped; an error goes back to the encoder, which
	// reports it.
	var meta []byte
	if len(x.Meta) > 0 {
		m, err := json.Marshal(x.Meta)
		if err != nil {
			return nil, false
		}
		meta = m
		size += len(meta)
	}
	b := make([]byte, 0, size)
	// encoding/json writes the wire struct's fields in this order:
	// _meta, content, structuredContent, isError, requestState,
	// resultType, inputRequests.
	b = append(b, '{')
	if meta != nil {
		b = append(b, `"_meta":`...)
		b = append(b, meta...)
		b = append(b, ',')
	}
	b = append(b, `"content":`...)
	if x.Content == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range x.Content {
			t := c.(*TextContent) // every block checked above
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"text","text":`...)
			b = appendJSONString(b, t.Text)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	if structured != nil {
		b = append(b, `,"structuredContent":`...)
		b = append(b, structured...)
	}
	if x.IsError {
		b = append(b, `,"isError":true`...)
	}
	if x.RequestState != "" {
		b = append(b, `,"requestState":`...)
		b = appendJSONString(b, x.RequestState)
	}
	if x.resultType != "" { // "complete" on every result of the 2026-07-28 protocol
		b = append(b, `,"resultType":`...)
		b = appendJSONString(b, string(x.resultType))
	}
	return append(b, '}'), true
}

// U+2028 and U+2029 in UTF-8, which encoding/json escapes with HTML
// escaping on.
var lineSeparator, paragraphSeparator = []byte("\u2028"), []byte("\u2029")

// appendJSONString appends s as encoding/json.Marshal writes a string
// (HTML escaping on): printable ASCII other than <, > and & as it is,
// " and \ after a backslash; a string with anything else goes through
// json.Marshal itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] != '"' && s[j] != '\\' {
			j++
		}
		b = append(b, s[i:j]...)
		if j < len(s) {
			b = append(b, '\\', s[j])
			j++
		}
		i = j
	}
	return append(b, '"')
}
