package ledger

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
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
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // a Go string always encodes
	buf.Truncate(buf.Len() - 1) // drop Encode's newline
}

// keyedHash is keyedSum hex-encoded.
func keyedHash(secret []byte, parts ...string) string {
	return hex.EncodeToString(keyedSum(secret, parts...))
}

// keyedSum is HMAC-SHA256 under the server secret of parts joined by 0x00.
func keyedSum(secret []byte, parts ...string) []byte {
	m := hmac.New(sha256.New, secret)
	for i, p := range parts {
		if i > 0 {
			m.Write([]byte{0})
		}
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// fingerprint is the keyed hash of the canonical JSON of
// {effect_type, vendor, payload}. payload must already be canonical.
func fingerprint(secret []byte, effectType, vendor string, canonicalPayload []byte) string {
	var buf bytes.Buffer
	buf.WriteString(`{"effect_type":`)
	writeString(&buf, effectType)
	buf.WriteString(`,"payload":`)
	if len(canonicalPayload) == 0 {
		buf.WriteString("null")
	} else {
		buf.Write(canonicalPayload)
	}
	buf.WriteString(`,"vendor":`)
	writeString(&buf, vendor)
	buf.WriteByte('}')
	m := hmac.New(sha256.New, secret)
	m.Write(buf.Bytes())
	return hex.EncodeToString(m.Sum(nil))
}
