package ledger

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
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
