package ledger

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "a" : [ 1 , 2 ] } `, `{"a":[1,2]}`},
		{`1.0`, `1`},
		{`1e3`, `1000`},
		{`-0.5`, `-0.5`},
		{`12345678901234567890`, `12345678901234567000`},
		{`1e21`, `1e+21`},
		{`"<&>"`, `"<&>"`},
		{`"\u00e9"`, `"é"`},
		{`{"z":{"y":null,"x":true}}`, `{"z":{"x":true,"y":null}}`},
		{`[]`, `[]`},
		{`{}`, `{}`},
	}
	for _, c := range cases {
		got, err := canonicalJSON([]byte(c.in))
		if err != nil {
			t.Errorf("err != nil: canonicalJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
		} else if string(got) != c.want {
			t.Errorf("string(got) != c.want: canonicalJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":1}`, `[1,]`, `1 2`, "\"\xff\"", `1e400`, strings.Repeat("[", 65) + strings.Repeat("]", 65), `NaN`} {
		if got, err := canonicalJSON([]byte(bad)); err == nil {
			t.Errorf("canonicalJSON(%q) = %s, want an error", bad, got)
		}
	}
}

func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"c":null}]}`, `"x"`, `1.5e10`, `[[[[]]]]`, `{"a":"\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := canonicalJSON(in)
		if err != nil {
			return
		}
		// Canonical output is valid JSON and a fixed point.
		if !json.Valid(out) {
			t.Fatalf("invalid output %s", out)
		}
		again, err := canonicalJSON(out)
		if err != nil {
			t.Fatalf("err != nil: not a fixed point: %s -> %s (%v)", out, again, err)
		}
		if string(again) != string(out) {
			t.Fatalf("string(again) != string(out): not a fixed point: %s -> %s (%v)", out, again, err)
		}
	})
}

// canonFastCases are documents of every shape the fast path takes or
// hands on.
var canonFastCases = []string{
	`{"b":1,"a":[1,2,{"c":null}]}`, ` { "z" : true , "y":false,"x" : [ ] , "w":{} } `, `"x"`, `1.5e10`, `[[[[]]]]`,
	`{"a":"\u0000"}`, `{"a":"é<&>\u007f"}`, "{\"a\":\"\u2028\"}", "\"\u2029\"", `{"a":1,"a":2}`, `{"b":{"a":1,"a":2}}`,
	`-0`, `0`, `-12`, `007`, `9223372036854775807`, `9223372036854775808`, `-9223372036854775808`, `1e2`, `1.0`, `1E2`,
	`[1,]`, `{"a":1,}`, `{,}`, `[1 2]`, `{"a" 1}`, `{"a":1 "b":2}`, `tru`, `nul`, `truex`, `[true false]`, `"abc`, `{"a":"b"`,
	`[`, `]`, `{`, `}`, ``, ` `, `1 2`, `{"key\"q":1}`, `{"\\":1}`, "\"tab\there\"", `{"":1,"":2}`, `{"":""}`,
	`{"b":2,"a":1,"c":{"z":[1,{"y":"x"}],"a":-5}}`, `[1-2]`, `[-]`, `[1a]`, `{"a":[01]}`,
}

// TestCanonFastAgrees: on every case the fast path takes, its output is
// canonicalTokens'; it hands on every case canonicalTokens refuses.
func TestCanonFastAgrees(t *testing.T) {
	deep := strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth)
	deeper := strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)
	took := 0
	for _, c := range append(canonFastCases, deep, deeper) {
		got, ok := canonFast([]byte(c))
		want, err := canonicalTokens([]byte(c))
		switch {
		case ok && err != nil:
			t.Errorf("%q: fast path gave %q, canonicalTokens refuses it: %v", c, got, err)
		case ok && string(got) != string(want):
			t.Errorf("%q: fast path gave %q, canonicalTokens %q", c, got, want)
		case ok:
			took++
		}
	}
	// The cases of the shapes payloads have are taken, not handed on.
	for _, c := range []string{`{"amount":1000,"currency":"usd"}`, `{"id":"pi_1"}`, ` [ {"b":[true,null],"a":-3} ] `, deep} {
		if _, ok := canonFast([]byte(c)); !ok {
			t.Errorf("%q: handed on", c)
		}
	}
	if took == 0 {
		t.Error("the fast path took no case")
	}
}

// FuzzCanonFastAgrees: whatever the fast path takes, canonicalTokens
// accepts and canonicalizes the same way.
func FuzzCanonFastAgrees(f *testing.F) {
	for _, c := range canonFastCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !utf8.Valid(in) {
			return
		}
		got, ok := canonFast(in)
		if !ok {
			return
		}
		want, err := canonicalTokens(in)
		if err != nil {
			t.Fatalf("%q: fast path gave %q, canonicalTokens refuses it: %v", in, got, err)
		}
		if string(got) != string(want) {
			t.Fatalf("%q: fast path gave %q, canonicalTokens %q", in, got, want)
		}
	})
}

// writeStringByEncoder is writeString as it was: a json.Encoder without
// HTML escaping, the spelling every stored fingerprint was made with.
func writeStringByEncoder(s string) string {
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(buf.String(), "\n")
}

// A string writeString writes by its fast path is spelt as the encoder
// spells it, so fingerprints stay what they were.
func TestWriteStringSpellsAsTheEncoder(t *testing.T) {
	for _, s := range []string{"", "payment.charge", "stripe", "a b~", `q"uote`, `back\slash`, "<&>", "tab\t", "\x7f", "é", "\u2028", "\x00", "\xff"} {
		var buf bytes.Buffer
		writeString(&buf, s)
		if got, want := buf.String(), writeStringByEncoder(s); got != want {
			t.Errorf("writeString(%q) = %s, want %s", s, got, want)
		}
	}
}

func FuzzWriteStringSpellsAsTheEncoder(f *testing.F) {
	f.Add("payment.charge")
	f.Add(`a"\<`)
	f.Fuzz(func(t *testing.T, s string) {
		var buf bytes.Buffer
		writeString(&buf, s)
		if got, want := buf.String(), writeStringByEncoder(s); got != want {
			t.Errorf("writeString(%q) = %s, want %s", s, got, want)
		}
	})
}

// A reused HMAC state gives the sum a new one gives, from many goroutines.
func TestPooledKeyedSumsAreHMACs(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	m := newMACs(secret)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				parts := []string{"dimension", "counterparty", fmt.Sprint("acct_", g, "_", i)}
				want := hmac.New(sha256.New, secret)
				want.Write([]byte(strings.Join(parts, "\x00")))
				if got := m.keyedSum(parts...); !bytes.Equal(got, want.Sum(nil)) {
					t.Errorf("keyedSum(%q) = %x, want %x", parts, got, want.Sum(nil))
					return
				}
				if got, want := m.keyedHash(parts...), hex.EncodeToString(m.keyedSum(parts...)); got != want {
					t.Errorf("keyedHash(%q) = %s, want %s", parts, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A fingerprint is the HMAC of {"effect_type","payload","vendor"} as
// writeString spells the strings, payload as given (null when none),
// computed apart, from many goroutines sharing the pooled states, with
// payloads past what a pooled buffer keeps.
func TestAFingerprintIsTheHMACOfItsCanonicalJSON(t *testing.T) {
	secret := bytes.Repeat([]byte{9}, 32)
	m := newMACs(secret)
	apart := func(effectType, vendor string, payload []byte) string {
		var buf bytes.Buffer
		buf.WriteString(`{"effect_type":`)
		writeString(&buf, effectType)
		buf.WriteString(`,"payload":`)
		if len(payload) == 0 {
			buf.WriteString("null")
		} else {
			buf.Write(payload)
		}
		buf.WriteString(`,"vendor":`)
		writeString(&buf, vendor)
		buf.WriteByte('}')
		h := hmac.New(sha256.New, secret)
		h.Write(buf.Bytes())
		return hex.EncodeToString(h.Sum(nil))
	}
	big := []byte(`{"note":"` + strings.Repeat("x", 9000) + `"}`)
	cases := []struct {
		effectType, vendor string
		payload            []byte
	}{
		{"payment.charge", "stripe", []byte(`{"amount":1000}`)},
		{"payment.charge", "", nil},
		{"odd\"type\\", "v\u00e9ndor\n", []byte(`[1,2]`)},
		{"email.send", "mail", big},
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				c := cases[(g+i)%len(cases)]
				if got, want := m.fingerprint(c.effectType, c.vendor, c.payload), apart(c.effectType, c.vendor, c.payload); got != want {
					t.Errorf("fingerprint(%q, %q, %d bytes) = %s, want %s", c.effectType, c.vendor, len(c.payload), got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

// checkText's fast path for printable ASCII answers as the rune-by-rune
// checks do, for every ASCII character and at the length limit.
func TestCheckTextASCIIAgreesWithRunes(t *testing.T) {
	var cases []string
	for c := range 0x80 {
		cases = append(cases, string(rune(c)), "key:"+string(rune(c))+"x")
	}
	cases = append(cases, strings.Repeat("a", 10), strings.Repeat("a", 11), "é", "a\u200bb")
	for _, s := range cases {
		want := checkRunes("f", s, 10)
		if diff := cmp.Diff(want, checkText("f", s, 10, true)); diff != "" {
			t.Errorf("checkText(%q) (-runes +fast):\n%s", s, diff)
		}
	}
}

func checkNameMatchers(t *testing.T, s string) {
	t.Helper()
	if got, want := isLowerName(s), namespaceRe.MatchString(s); got != want {
		t.Errorf("isLowerName(%q) = %v, namespaceRe says %v", s, got, want)
	}
	if got, want := isLowerName(s), vendorRe.MatchString(s); got != want {
		t.Errorf("isLowerName(%q) = %v, vendorRe says %v", s, got, want)
	}
	if got, want := isEffectType(s), effectTypeRe.MatchString(s); got != want {
		t.Errorf("isEffectType(%q) = %v, effectTypeRe says %v", s, got, want)
	}
	if got, want := isDimName(s), dimNameRe.MatchString(s); got != want {
		t.Errorf("isDimName(%q) = %v, dimNameRe says %v", s, got, want)
	}
}

// The hand-written name matchers accept exactly what the expressions do.
func TestNameMatchersAreTheExpressions(t *testing.T) {
	for _, s := range []string{"", "a", "A", "0", "_", ".", "-", "a.b", "a.b.c.d.e.f", "a.b.c.d.e.f.g", "a..b", ".a", "a.", "a._b", "a.b_-c",
		"payment.charge", "Payment.charge", "a\n", "a.b\n", "é", "default", "my-ns.x_1", "x_" + strings.Repeat("a", 61), "x_" + strings.Repeat("a", 62), "a b", "a/b"} {
		checkNameMatchers(t, s)
	}
}

func FuzzNameMatchersAreTheExpressions(f *testing.F) {
	f.Add("payment.charge")
	f.Add("a_b.c-d.0")
	f.Fuzz(func(t *testing.T, s string) { checkNameMatchers(t, s) })
}
