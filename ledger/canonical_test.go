package ledger

import (
	"encoding/json"
	"strings"
	"testing"
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
		if err != nil || string(got) != c.want {
			t.Errorf("canonicalJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
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
		if err != nil || string(again) != string(out) {
			t.Fatalf("not a fixed point: %s -> %s (%v)", out, again, err)
		}
	})
}
