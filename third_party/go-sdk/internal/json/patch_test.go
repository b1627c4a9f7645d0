package json

import (
	"bytes"
	stdjson "encoding/json"
	"testing"
)

// Ratchet's tests of its patches (third_party/README.md), the one test
// file of this copy: go test ./internal/json/ -fuzz FuzzIsCompact (or
// FuzzCheckMaxDepth) in third_party/go-sdk.

// IsCompact says yes only for what encoding/json's compaction returns
// unchanged, without error.
func FuzzIsCompact(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, `{"a": 1}`, `[1,2,"x y"]`, `"a\"b"`, `"\\"`, `{"a":"\u003c"}`, "\"\x01\"", `01`, `1e5`, `-0.5`, `{"a":[true,false,null]}`, `{"a":1}x`, `{"a":1} `, "\"\xff\"", `"\ud800"`, `{"a":{"b":"c\\\"d"}}`, `[`, `"abc`, `nul`, `{"a":1,}`, `[1,]`, `"a\qb"`, "\"\u2028\"", `1.`, `.5`, `+1`, `{"a" :1}`, `1 `, ` 1`, "\"\t\"", `{"\\":"\\\\"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var buf bytes.Buffer
		err := stdjson.Compact(&buf, b)
		want := err == nil && bytes.Equal(buf.Bytes(), b)
		if got := IsCompact(b); got && !want {
			t.Fatalf("IsCompact(%q) = true; encoding/json: err %v, compacted %q", b, err, buf.Bytes())
		}
	})
}

// checkMaxDepthOrig is v1.8.0's checkMaxDepth, byte by byte.
func checkMaxDepthOrig(data []byte, maxDepth int) error {
	var (
		depth    int
		inString bool
		escaped  bool
	)
	for _, b := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case b == '\\':
				escaped = true
			case b == '"':
				inString = false
			}
			continue
		}
		switch b {
		case '"':
			inString = true
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

// checkMaxDepth answers as v1.8.0's did for every input.
func FuzzCheckMaxDepth(f *testing.F) {
	for _, s := range []string{`{}`, `[[["a"]]]`, `"[[[["`, `"\"[[["`, `"\\"[[`, `[["\\\"["]]`, `"abc`, `"a\`, `{"a":"b\"c","d":[[[]]]}`, `""[[`, `[[[[`} {
		f.Add([]byte(s), 3)
	}
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		if max < 0 || max > 8 {
			return
		}
		if got, want := checkMaxDepth(b, max), checkMaxDepthOrig(b, max); got != want {
			t.Fatalf("checkMaxDepth(%q, %d) = %v, the original %v", b, max, got, want)
		}
	})
}
