package ledger

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"sync"
	"unicode/utf8"
)

// maxJSONDepth bounds nesting in payloads and results, so a hostile document
// cannot exhaust the stack of anything that later walks it.
const maxJSONDepth = 64

// canonicalJSON rewrites a JSON document in the spirit of RFC 8785: object
// keys sorted, no insignificant whitespace, numbers in one spelling (integers
// that fit int64 as integers, everything else as the shortest float64), and
// strings without HTML escaping. It rejects invalid JSON, invalid UTF-8,
// duplicate keys and nesting deeper than maxJSONDepth.
func canonicalJSON(raw []byte) ([]byte, error) {
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("not valid UTF-8")
	}
	if out, ok := canonFast(raw); ok {
		return out, nil
	}
	return canonicalTokens(raw)
}

// canonicalTokens is canonicalJSON through encoding/json's tokens: every
// document, and the errors users see.
func canonicalTokens(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var buf bytes.Buffer
	if err := canonValue(dec, &buf, 0); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return buf.Bytes(), nil
}

func canonValue(dec *json.Decoder, buf *bytes.Buffer, depth int) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= maxJSONDepth {
			return fmt.Errorf("nested deeper than %d levels", maxJSONDepth)
		}
		switch t {
		case '{':
			return canonObject(dec, buf, depth)
		case '[':
			buf.WriteByte('[')
			for i := 0; dec.More(); i++ {
				if i > 0 {
					buf.WriteByte(',')
				}
				if err := canonValue(dec, buf, depth+1); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return fmt.Errorf("invalid JSON: %w", err)
			}
			buf.WriteByte(']')
			return nil
		}
		return fmt.Errorf("invalid JSON: unexpected %q", t)
	case json.Number:
		return canonNumber(t, buf)
	case string:
		writeString(buf, t)
	case bool:
		buf.WriteString(strconv.FormatBool(t))
	case nil:
		buf.WriteString("null")
	}
	return nil
}

func canonObject(dec *json.Decoder, buf *bytes.Buffer, depth int) error {
	type member struct {
		key string
		val []byte
	}
	var members []member
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("invalid JSON: %w", err)
		}
		key := tok.(string)
		if seen[key] {
			return fmt.Errorf("duplicate object key %q", key)
		}
		seen[key] = true
		var vb bytes.Buffer
		if err := canonValue(dec, &vb, depth+1); err != nil {
			return err
		}
		members = append(members, member{key, vb.Bytes()})
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("invalid JSON: %w", err)
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeString(buf, m.key)
		buf.WriteByte(':')
		buf.Write(m.val)
	}
	buf.WriteByte('}')
	return nil
}

func canonNumber(n json.Number, buf *bytes.Buffer) error {
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		buf.WriteString(strconv.FormatInt(i, 10))
		return nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return fmt.Errorf("number %s is out of range", n)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		buf.WriteString(strconv.FormatFloat(f, 'f', -1, 64))
		return nil
	}
	buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	return nil
}

func writeString(buf *bytes.Buffer, s string) {
	if plainString(s) { // what encoding/json writes for it: s quoted
		buf.WriteByte('"')
		buf.WriteString(s)
		buf.WriteByte('"')
		return
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a Go string always encodes
	buf.Truncate(buf.Len() - 1) // drop Encode's newline
}

// plainString reports whether encoding/json writes s as itself quoted:
// printable ASCII without a quote or a backslash (effect types, vendors and
// most keys). It is the fast path of writeString: a json.Encoder per
// string was a third of a fingerprint's instructions.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// macs hands out HMAC-SHA256 states keyed with the server secret. A reused
// state is Reset to the key's inner and outer pads already hashed, where
// hmac.New hashes both again and allocates: two SHA-256 blocks and five
// allocations saved on each of a begin's keyed hashes (its fingerprint and
// each dimension's).
type macs struct{ pool sync.Pool }

// mac is one pooled HMAC with the buffers its callers fill: the input,
// joined there and written at once, and the sum. A buffer of the caller's
// own would escape to the heap through hash.Hash's methods (a Write of
// each part, []byte{0} and io.WriteString's copy, allocated too).
type mac struct {
	h       hash.Hash
	in, sum []byte
}

func newMACs(secret []byte) *macs {
	m := &macs{}
	m.pool.New = func() any { return &mac{h: hmac.New(sha256.New, secret)} }
	return m
}

// keyedSumOf computes the HMAC of parts joined by 0x00 and calls fn with
// the sum, which is the pooled mac's: fn copies what it keeps.
func (m *macs) keyedSumOf(parts []string, fn func(sum []byte)) {
	mc := m.pool.Get().(*mac)
	in := mc.in[:0]
	for i, p := range parts {
		if i > 0 {
			in = append(in, 0)
		}
		in = append(in, p...)
	}
	mc.in = in
	m.sum(mc, fn)
}

// sum hashes mc.in, calls fn with the sum and puts mc back.
func (m *macs) sum(mc *mac, fn func(sum []byte)) {
	mc.h.Reset()
	mc.h.Write(mc.in)
	mc.sum = mc.h.Sum(mc.sum[:0])
	fn(mc.sum)
	if cap(mc.in) > 4<<10 { // a large payload's fingerprint: not kept
		mc.in = nil
	}
	m.pool.Put(mc)
}

// keyedHash is keyedSum hex-encoded.
func (m *macs) keyedHash(parts ...string) string {
	var hx [2 * sha256.Size]byte
	m.keyedSumOf(parts, func(sum []byte) { hex.Encode(hx[:], sum) })
	return string(hx[:])
}

// keyedSum is HMAC-SHA256 under the server secret of parts joined by 0x00.
func (m *macs) keyedSum(parts ...string) []byte {
	var out []byte
	m.keyedSumOf(parts, func(sum []byte) { out = append(out, sum...) })
	return out
}

// fingerprint is the keyed hash of the canonical JSON of
// {effect_type, vendor, payload}. payload must already be canonical.
func (m *macs) fingerprint(effectType, vendor string, canonicalPayload []byte) string {
	mc := m.pool.Get().(*mac)
	b := append(mc.in[:0], `{"effect_type":`...)
	b = appendCanonString(b, effectType)
	b = append(b, `,"payload":`...)
	if len(canonicalPayload) == 0 {
		b = append(b, "null"...)
	} else {
		b = append(b, canonicalPayload...)
	}
	b = append(b, `,"vendor":`...)
	b = appendCanonString(b, vendor)
	mc.in = append(b, '}')
	var hx [2 * sha256.Size]byte
	m.sum(mc, func(sum []byte) { hex.Encode(hx[:], sum) })
	return string(hx[:])
}

// appendCanonString appends s as writeString writes it.
func appendCanonString(b []byte, s string) []byte {
	if plainString(s) {
		return append(append(append(b, '"'), s...), '"')
	}
	var buf bytes.Buffer
	writeString(&buf, s)
	return append(b, buf.Bytes()...)
}

// canonFast is canonicalJSON for the documents most payloads and results
// are, scanning bytes where canonicalTokens decodes tokens (measured: a
// tenth of an engine pair's instructions went to the two calls a pair
// makes). It handles strings with nothing to escape or unescape (no
// backslash, control character, U+2028 or U+2029), integers already in
// their canonical spelling that fit int64, literals, arrays and objects
// without duplicate keys, nested less than maxJSONDepth. Given anything
// else, including every invalid document, it returns false and
// canonicalTokens decides, so its output is always canonicalTokens'
// (FuzzCanonFastAgrees). raw must be valid UTF-8.
func canonFast(raw []byte) ([]byte, bool) {
	p := fastScan{s: raw}
	out, ok := p.value(make([]byte, 0, len(raw)), 0)
	if !ok {
		return nil, false
	}
	p.ws()
	return out, p.i == len(p.s)
}

type fastScan struct {
	s []byte
	i int
}

func (p *fastScan) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *fastScan) value(dst []byte, depth int) ([]byte, bool) {
	p.ws()
	if p.i >= len(p.s) {
		return nil, false
	}
	switch c := p.s[p.i]; c {
	case '{', '[':
		if depth >= maxJSONDepth {
			return nil, false
		}
		if c == '{' {
			return p.object(dst, depth)
		}
		return p.array(dst, depth)
	case '"':
		str, ok := p.str()
		if !ok {
			return nil, false
		}
		dst = append(dst, '"')
		dst = append(dst, str...)
		return append(dst, '"'), true
	case 't':
		return p.lit(dst, "true")
	case 'f':
		return p.lit(dst, "false")
	case 'n':
		return p.lit(dst, "null")
	}
	return p.num(dst)
}

// str scans a string with nothing to escape and returns its contents.
func (p *fastScan) str() ([]byte, bool) {
	start := p.i + 1
	for j := start; j < len(p.s); j++ {
		switch c := p.s[j]; {
		case c == '"':
			p.i = j + 1
			return p.s[start:j], true
		case c == '\\' || c < 0x20:
			return nil, false
		case c == 0xE2 && j+2 < len(p.s) && p.s[j+1] == 0x80 && (p.s[j+2] == 0xA8 || p.s[j+2] == 0xA9):
			return nil, false // U+2028, U+2029: escaped in the output
		}
	}
	return nil, false
}

func (p *fastScan) lit(dst []byte, word string) ([]byte, bool) {
	if !bytes.HasPrefix(p.s[p.i:], []byte(word)) {
		return nil, false
	}
	p.i += len(word)
	return append(dst, word...), true
}

// num takes an integer already spelled canonically that fits int64.
func (p *fastScan) num(dst []byte) ([]byte, bool) {
	j := p.i
	if j < len(p.s) && p.s[j] == '-' {
		j++
	}
	for j < len(p.s) && p.s[j] >= '0' && p.s[j] <= '9' {
		j++
	}
	if j < len(p.s) {
		switch p.s[j] {
		case '.', 'e', 'E', '+', '-':
			return nil, false
		}
	}
	tok := p.s[p.i:j]
	n, err := strconv.ParseInt(string(tok), 10, 64)
	if err != nil {
		return nil, false
	}
	before := len(dst)
	dst = strconv.AppendInt(dst, n, 10)
	if !bytes.Equal(dst[before:], tok) {
		return nil, false // -0, leading zeros: not canonical, or not JSON
	}
	p.i = j
	return dst, true
}

func (p *fastScan) array(dst []byte, depth int) ([]byte, bool) {
	p.i++ // [
	dst = append(dst, '[')
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == ']' {
		p.i++
		return append(dst, ']'), true
	}
	for {
		var ok bool
		if dst, ok = p.value(dst, depth+1); !ok {
			return nil, false
		}
		p.ws()
		if p.i >= len(p.s) {
			return nil, false
		}
		switch p.s[p.i] {
		case ',':
			p.i++
			dst = append(dst, ',')
		case ']':
			p.i++
			return append(dst, ']'), true
		default:
			return nil, false
		}
	}
}

func (p *fastScan) object(dst []byte, depth int) ([]byte, bool) {
	p.i++ // {
	type member struct{ key, val []byte }
	var members []member
	p.ws()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return append(dst, "{}"...), true
	}
	for {
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != '"' {
			return nil, false
		}
		key, ok := p.str()
		if !ok {
			return nil, false
		}
		p.ws()
		if p.i >= len(p.s) || p.s[p.i] != ':' {
			return nil, false
		}
		p.i++
		val, ok := p.value(nil, depth+1)
		if !ok {
			return nil, false
		}
		members = append(members, member{key, val})
		p.ws()
		if p.i >= len(p.s) {
			return nil, false
		}
		if p.s[p.i] == '}' {
			p.i++
			break
		}
		if p.s[p.i] != ',' {
			return nil, false
		}
		p.i++
	}
	slices.SortFunc(members, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			if bytes.Equal(m.key, members[i-1].key) {
				return nil, false // a duplicate key: canonicalTokens names it
			}
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, m.key...)
		dst = append(dst, '"', ':')
		dst = append(dst, m.val...)
	}
	return append(dst, '}'), true
}
