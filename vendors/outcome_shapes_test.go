package vendors_test

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/tools/txtar"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

var updateOutcomes = flag.Bool("update-outcomes", false, "rewrite testdata/outcomes.golden from the Outcome rules as they are")

// answerShapes are vendor answers of every shape an Outcome rule may meet:
// the documented ones (each vendor's .resp fixtures) and what a vendor,
// a front door or a broken connection may send instead: no body, not an
// object, an object with data after it, malformed JSON, escapes, invalid
// UTF-8, duplicate keys (the last wins), fields of another type, keys in
// another case, nesting at and over encoding/json's depth limit.
func answerShapes(t *testing.T) [][2]string {
	t.Helper()
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	shapes := [][2]string{
		{"empty", ""},
		{"spaces", " \n\t "},
		{"null", "null"},
		{"array", `[{"id":"x"}]`},
		{"string", `"id"`},
		{"number", `12`},
		{"true", `true`},
		{"empty object", `{}`},
		{"padded", " \r\n\t{ \"id\" : \"pi_1\" } \n"},
		{"data after", `{"id":"pi_1"} trailing`},
		{"two objects", `{"id":"pi_1"}{"id":"pi_2"}`},
		{"unterminated", `{"id":"pi_1"`},
		{"unterminated string", `{"id":"pi_1`},
		{"trailing comma", `{"id":"pi_1",}`},
		{"no comma", `{"id":"pi_1" "object":"x"}`},
		{"single quotes", `{"id":'pi_1'}`},
		{"bare key", `{id:"pi_1"}`},
		{"leading zero", `{"id":"pi_1","n":01}`},
		{"bad fraction", `{"id":"pi_1","n":1.}`},
		{"bad exponent", `{"id":"pi_1","n":1e}`},
		{"lone minus", `{"id":"pi_1","n":-}`},
		{"numbers", `{"n":[0,-0,1.5,-2e10,3E+2,4e-2,123456789012345678901234567890],"id":"pi_1"}`},
		{"bad literal", `{"id":"pi_1","t":tru}`},
		{"literals", `{"a":true,"b":false,"c":null,"id":"pi_1"}`},
		{"control character", "{\"id\":\"pi\x01_1\"}"},
		{"bad escape", `{"id":"pi\q_1"}`},
		{"short unicode escape", `{"id":"pi\u12_1"}`},
		{"escapes", `{"id":"pi_\u0031\n\t\"\\\/\b\f\r"}`},
		{"escaped key", `{"\u0069d":"pi_1"}`},
		{"surrogate pair", `{"id":"pi_\ud83d\ude00"}`},
		{"lone surrogate", `{"id":"pi_\ud800"}`},
		{"invalid UTF-8 value", "{\"id\":\"pi_\xff1\"}"},
		{"invalid UTF-8 key", "{\"i\xffd\":\"pi_1\",\"id\":\"pi_2\"}"},
		{"non-ASCII", `{"id":"pi_é€😀"}`},
		{"id a number", `{"id":123}`},
		{"id null", `{"id":null}`},
		{"id an object", `{"id":{"id":"x"}}`},
		{"id an array", `{"id":["x"]}`},
		{"id true", `{"id":true}`},
		{"ID upper case", `{"ID":"pi_1"}`},
		{"Id and id", `{"Id":"pi_1","id":"pi_2"}`},
		{"id twice", `{"id":"pi_1","id":"pi_2"}`},
		{"id twice, last a number", `{"id":"pi_1","id":2}`},
		{"depth 10000", `{"id":"pi_1","x":` + deep(9999) + `}`},
		{"depth 10001", `{"id":"pi_1","x":` + deep(10000) + `}`},
		{"deep object", `{"a":{"b":{"c":{"d":{"id":"x"}}}},"id":"pi_1"}`},

		// Stripe's error paths.
		{"stripe error", `{"error":{"code":"card_declined","type":"card_error","payment_intent":{"id":"pi_9"}}}`},
		{"stripe error type only", `{"error":{"type":"api_error"}}`},
		{"stripe error twice", `{"error":{"code":"a","type":"t","payment_intent":{"id":"pi_a"}},"error":{"code":"b"}}`},
		{"stripe error then a string", `{"error":{"code":"a"},"error":"x"}`},
		{"stripe error code a number", `{"error":{"code":402,"type":"card_error"}}`},
		{"stripe error code empty", `{"error":{"code":"","type":"card_error"}}`},
		{"stripe error an array", `{"error":[{"code":"a"}]}`},
		{"stripe payment_intent id twice", `{"error":{"payment_intent":{"id":"pi_a","id":"pi_b"}}}`},
		{"stripe payment_intent twice", `{"error":{"payment_intent":{"id":"pi_a"},"payment_intent":{"object":"x"}}}`},

		// PayPal's.
		{"paypal error", `{"name":"UNPROCESSABLE_ENTITY","details":[{"issue":"INSTRUMENT_DECLINED"}],"id":"x"}`},
		{"paypal details empty", `{"name":"N","details":[]}`},
		{"paypal details second", `{"name":"N","details":[{"field":"a"},{"issue":"SECOND"}]}`},
		{"paypal details scalars", `{"name":"N","details":["x",{"issue":"I"}]}`},
		{"paypal details an object", `{"name":"N","details":{"0":{"issue":"BY_KEY"}}}`},
		{"paypal details nested arrays", `{"details":[[{"issue":"x"}],{"issue":"y"}]}`},
		{"paypal issue a number", `{"name":"N","details":[{"issue":7}]}`},

		// Adyen's.
		{"adyen refused", `{"pspReference":"993617895215577D","resultCode":"Refused","refusalReason":"Refused"}`},
		{"adyen error", `{"pspReference":"881","resultCode":"Error","refusalReason":"Acquirer Error"}`},
		{"adyen cancelled", `{"resultCode":"Cancelled"}`},
		{"adyen authorised", `{"pspReference":"993617895204576J","resultCode":"Authorised"}`},
		{"adyen 704", `{"status":422,"errorCode":"704","message":"request already processed or in progress","errorType":"validation"}`},
		{"adyen 703", `{"status":503,"errorCode":"703","errorType":"internal"}`},
		{"adyen errorCode a number", `{"errorCode":704,"errorType":"validation"}`},
		{"adyen resultCode twice", `{"resultCode":"Refused","resultCode":"Authorised","pspReference":"p"}`},

		// Checkout.com's.
		{"checkout approved", `{"id":"pay_1","approved":true}`},
		{"checkout declined", `{"id":"pay_1","approved":false,"response_summary":"Declined - Do Not Honour"}`},
		{"checkout approved a string", `{"id":"pay_1","approved":"false"}`},
		{"checkout approved null", `{"id":"pay_1","approved":null}`},
		{"checkout approved twice", `{"id":"pay_1","approved":false,"approved":true}`},
		{"checkout action id", `{"action_id":"act_1"}`},
		{"checkout empty id, action id", `{"id":"","action_id":"act_1"}`},
		{"checkout error", `{"request_id":"r","error_type":"request_invalid","error_codes":["x"]}`},

		// Square's.
		{"square payment", `{"payment":{"id":"p_1","status":"COMPLETED"}}`},
		{"square refund and payment", `{"refund":{"id":"r_1"},"payment":{"id":"p_1"}}`},
		{"square card only", `{"card":{"id":"ccof_1"}}`},
		{"square payment id empty", `{"payment":{"id":""},"order":{"id":"o_1"}}`},
		{"square errors", `{"errors":[{"category":"PAYMENT_METHOD_ERROR","code":"CARD_DECLINED"}],"payment":{"id":"p_2"}}`},
		{"square errors second", `{"errors":[{"detail":"x"},{"category":"C","code":"D"}]}`},
		{"square errors an object", `{"errors":{"0":{"category":"C"}}}`},

		// A declared vendor's (data.id, error.type) and the generic id.
		{"declared", `{"data":{"id":"ch_1"},"error":{"type":"x"}}`},
		{"declared in another case", `{"Data":{"ID":"ch_1"},"Error":{"Type":"x"}}`},
		{"declared number", `{"data":{"id":12},"error":{"type":3.5}}`},
		{"declared id in an array", `{"data":[{"id":"ch_1"}]}`},
	}
	for _, v := range []string{"stripe", "square", "adyen", "paypal", "checkout"} {
		a, err := txtar.ParseFile("testdata/" + v + ".txtar")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range a.Files {
			if strings.HasSuffix(f.Name, ".resp") {
				shapes = append(shapes, [2]string{v + " " + f.Name, strings.TrimSpace(string(f.Data))})
			}
		}
	}
	return shapes
}

// TestOutcomeOfEveryAnswerShape pins what each vendor's Outcome makes of
// every answer shape at the statuses its rules tell apart (and with the header it reads):
// testdata/outcomes.golden, written by the rules as they were before
// their answers were read without a map (go test ./vendors -run
// TestOutcomeOfEveryAnswerShape -update-outcomes rewrites it; a change
// there is a change of classification).
func TestOutcomeOfEveryAnswerShape(t *testing.T) {
	d := acme(vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64})
	d.Outcome = vendors.OutcomeRules{Failed: []string{"4xx"}, Unknown: []string{"429", "5xx"}, ObjectID: "data.id", Reason: "error.type"}
	vs := []vendors.Vendor{vendors.Generic{}, compiled(t, d)}
	declaredDefault := acme(vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64})
	declaredDefault.Name = "acme-default"
	vs = append(vs, compiled(t, declaredDefault))
	for _, n := range []string{"stripe", "square", "adyen", "paypal", "checkout"} {
		v, _ := all.Lookup(n)
		vs = append(vs, v)
	}
	// The headers a rule reads, for the vendor that reads it.
	headers := map[string]string{"stripe": "Idempotent-Replayed", "adyen": "Transient-Error"}
	var lines []string
	for _, v := range vs {
		for _, s := range answerShapes(t) {
			for _, status := range []int{200, 409, 422, 503} {
				hs := []string{""}
				if h := headers[v.Name()]; h != "" {
					hs = append(hs, h)
				}
				for _, h := range hs {
					header := http.Header{}
					if h != "" {
						header.Set(h, "true")
					}
					o := v.Outcome(&vendors.Response{Status: status, Header: header, Body: []byte(s[1])})
					lines = append(lines, fmt.Sprintf("%s %d%s %q: %s %q %q", v.Name(), status, strings.TrimRight(" "+h, " "), s[0], o.Result, o.VendorReference, o.Reason))
				}
			}
		}
	}
	sort.Strings(lines)
	got := strings.Join(lines, "\n") + "\n"
	if *updateOutcomes {
		if err := os.WriteFile("testdata/outcomes.golden", []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/outcomes.golden")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("an answer's outcome changed (-testdata/outcomes.golden +now):\n%s", diff)
	}
}

// fieldPaths are paths of every kind ReadFields walks: a member, members
// nested, array elements (as strconv.Atoi reads an index: "+0", "-0" and
// "00" are 0), a member named like an index, names a map would not match.
var fieldPaths = [][]string{
	{"id"}, {"error", "code"}, {"error", "type"}, {"error", "payment_intent", "id"},
	{"details", "0", "issue"}, {"details", "1", "issue"}, {"errors", "+0", "code"}, {"n", "00"},
	{"approved"}, {"a"}, {"ID"}, {"i\uFFFDd"}, {"payment", "id"}, {"x", "0", "0"}, {"resultCode"}, {"data", "0", "id"},
}

// readByMap is what ReadFields must read at each path: Str and Get of the
// decoded object.
func readByMap(body []byte, paths [][]string) (strs []string, bools []string) {
	m := vendors.JSONObject(body)
	for _, p := range paths {
		strs = append(strs, vendors.Str(m, p...))
		b, ok := vendors.Get(m, p...).(bool)
		bools = append(bools, fmt.Sprint(b, ok))
	}
	return strs, bools
}

func readByScan(body []byte, paths [][]string) (strs []string, bools []string) {
	f := vendors.ReadFields(body, paths...)
	for i := range paths {
		strs = append(strs, f.Str(i))
		b, ok := f.Bool(i)
		bools = append(bools, fmt.Sprint(b, ok))
	}
	return strs, bools
}

// TestReadFieldsIsJSONObjectsReading: over every answer shape, each path
// reads the string and boolean that Get of JSONObject's map reads.
func TestReadFieldsIsJSONObjectsReading(t *testing.T) {
	for _, s := range answerShapes(t) {
		ws, wb := readByMap([]byte(s[1]), fieldPaths)
		gs, gb := readByScan([]byte(s[1]), fieldPaths)
		if diff := cmp.Diff(ws, gs); diff != "" {
			t.Errorf("%s: strings (-map +ReadFields):\n%s", s[0], diff)
		}
		if diff := cmp.Diff(wb, gb); diff != "" {
			t.Errorf("%s: booleans (-map +ReadFields):\n%s", s[0], diff)
		}
	}
}

// FuzzReadFields holds ReadFields to JSONObject's reading for any body,
// at the fixed paths and at one more the fuzzer makes (dot-separated).
func FuzzReadFields(f *testing.F) {
	for _, s := range [][2]string{{`{"id":"x"}`, "id"}, {`{"details":[{"issue":"a"}]}`, "details.0.issue"},
		{`{"a":{"b":[1,"x",{"c":true}]},"a":{"b":[0,"y"]}}`, "a.b.1"}, {`{"\u0061":"x"} z`, "a"}, {`[{"id":"x"}]`, "0.id"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, body, path string) {
		paths := append(append([][]string{}, fieldPaths[:MaxFieldsInFuzz]...), strings.Split(path, "."))
		ws, wb := readByMap([]byte(body), paths)
		gs, gb := readByScan([]byte(body), paths)
		if diff := cmp.Diff(ws, gs); diff != "" {
			t.Errorf("%q: strings (-map +ReadFields):\n%s", body, diff)
		}
		if diff := cmp.Diff(wb, gb); diff != "" {
			t.Errorf("%q: booleans (-map +ReadFields):\n%s", body, diff)
		}
	})
}

// MaxFieldsInFuzz leaves the fuzzer's own path room among MaxFields.
const MaxFieldsInFuzz = vendors.MaxFields - 1
