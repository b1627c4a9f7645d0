// Copyright 2025 The Go MCP SDK Authors. All rights reserved.
// Use of this source code is governed by the license
// that can be found in the LICENSE file.

// Package json provides internal JSON utilities.

package json

import (
	"bytes"
	"fmt"
	"io"

	"github.com/segmentio/encoding/json"
)

// defaultMaxDepth is the maximum JSON nesting depth accepted by [Unmarshal].
// Realistic MCP payloads nest only a handful of levels, so 1000 is far more
// than any legitimate message requires while keeping worst-case parse cost
// bounded.
const defaultMaxDepth = 1000

// errMaxDepthExceeded is returned by [Unmarshal] when the input nests deeper than [defaultMaxDepth].
var errMaxDepthExceeded = fmt.Errorf("json: exceeded maximum nesting depth of %d", defaultMaxDepth)

type Decoder struct {
	dec *json.Decoder
}

func NewDecoder(r io.Reader) *Decoder {
	dec := json.NewDecoder(r)
	dec.DontMatchCaseInsensitiveStructFields()
	return &Decoder{dec: dec}
}

func (d *Decoder) Decode(v any) error {
	return d.dec.Decode(v)
}

func Unmarshal(data []byte, v any) error {
	if err := checkMaxDepth(data, defaultMaxDepth); err != nil {
		return err
	}
	// Ratchet's patch (third_party/README.md): parse the bytes in place
	// instead of through a Decoder, which allocates a 32 KiB read buffer
	// for every message (about 0.9 MB of garbage an MCP begin+report
	// pair). Same parser, same flag; trailing bytes are ignored, as the
	// Decoder, which reads one value, ignored them.
	_, err := json.Parse(data, v, json.DontMatchCaseInsensitiveStructFields)
	return err
}

// checkMaxDepth scans data once and reports [errMaxDepthExceeded] if the
// nesting of JSON objects and arrays exceeds maxDepth. It is a lightweight pass which
// tracks '{' and '[' against '}' and ']' while skipping over the contents of strings.
func checkMaxDepth(data []byte, maxDepth int) error {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			// Ratchet's patch (third_party/README.md): a string is skipped
			// from quote to quote (bytes.IndexByte), not byte by byte.
			i = stringEnd(data, i)
		case '{', '[':
			depth++
			if depth > maxDepth {
				return errMaxDepthExceeded
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return nil
}

// stringEnd returns the index of the quote that closes the string opened at
// data[open], or len(data) when none does: the first quote after it that
// an even run of backslashes precedes (each backslash escapes the byte
// after it, so an odd run ends with one that escapes the quote).
func stringEnd(data []byte, open int) int {
	for i := open + 1; i < len(data); i++ {
		j := bytes.IndexByte(data[i:], '"')
		if j < 0 {
			return len(data)
		}
		i += j
		run := 0
		for k := i - 1; k > open && data[k] == '\\'; k-- {
			run++
		}
		if run%2 == 0 {
			return i
		}
	}
	return len(data)
}

// IsCompact reports whether data is valid JSON with no whitespace outside
// its strings: what encoding/json's compaction (with HTML escaping off, as
// the SDK's encoder runs) returns unchanged. Ratchet's patch
// (third_party/README.md): jsonrpc2 uses it to skip compacting again what
// a MarshalJSON or an earlier marshal already made compact.
func IsCompact(data []byte) bool {
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			return false
		case '"':
			i = stringEnd(data, i)
		}
	}
	return json.Valid(data)
}
