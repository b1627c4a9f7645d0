package vendors_test

import (
	"fmt"
	"math/rand"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// mapOutcomes are the built-in Outcome rules as they were before answers
// were read with ReadFields (git show 2962f25:vendors/...): each decodes
// the answer whole with JSONObject and reads it with Get, Str and
// FirstString. Every answer must classify as they classify it.
var mapOutcomes = map[string]func(r *vendors.Response) vendors.Outcome{
	"generic": func(r *vendors.Response) vendors.Outcome {
		return vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: vendors.Str(vendors.JSONObject(r.Body), "id")}
	},
	"stripe": func(r *vendors.Response) vendors.Outcome {
		body := vendors.JSONObject(r.Body)
		o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: vendors.Str(body, "id")}
		code := vendors.FirstString(body, []string{"error", "code"}, []string{"error", "type"})
		switch {
		case o.Result == vendors.Succeeded && strings.EqualFold(r.Header.Get("Idempotent-Replayed"), "true"):
			o.Reason = "replayed by Stripe"
		case r.Status == http.StatusConflict:
			o.Reason = "a request with this key is in progress at Stripe (" + code + ")"
		case o.Result != vendors.Succeeded:
			o.Reason = code
			if id := vendors.Str(body, "error", "payment_intent", "id"); id != "" {
				o.VendorReference = id
			}
		}
		return o
	},
	"paypal": func(r *vendors.Response) vendors.Outcome {
		body := vendors.JSONObject(r.Body)
		o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: vendors.Str(body, "id")}
		if o.Result != vendors.Succeeded {
			o.Reason = strings.Trim(vendors.Str(body, "name")+" "+vendors.Str(body, "details", "0", "issue"), " ")
		}
		return o
	},
	"adyen": func(r *vendors.Response) vendors.Outcome {
		body := vendors.JSONObject(r.Body)
		o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: vendors.Str(body, "pspReference")}
		code := vendors.Str(body, "errorCode")
		switch result := vendors.Str(body, "resultCode"); {
		case o.Result == vendors.Succeeded && (result == "Refused" || result == "Error" || result == "Cancelled"):
			o.Result, o.Reason = vendors.Failed, result+": "+vendors.Str(body, "refusalReason")
		case o.Result == vendors.Succeeded:
			o.Reason = result
		case strings.EqualFold(r.Header.Get("Transient-Error"), "true"), code == "704":
			o.Result, o.Reason = vendors.Unknown, "already processed or in progress at Adyen ("+code+")"
		case code == "703":
			o.Result, o.Reason = vendors.Failed, "Adyen's idempotency store was unavailable; nothing was processed (703)"
		default:
			o.Reason = strings.Trim(vendors.Str(body, "errorType")+" "+code, " ")
		}
		return o
	},
	"checkout": func(r *vendors.Response) vendors.Outcome {
		body := vendors.JSONObject(r.Body)
		o := vendors.Outcome{Result: vendors.ByStatus(r.Status), VendorReference: vendors.FirstString(body, []string{"id"}, []string{"action_id"})}
		switch approved, ok := vendors.Get(body, "approved").(bool); {
		case o.Result == vendors.Succeeded && ok && !approved:
			o.Result, o.Reason = vendors.Failed, "declined: "+vendors.Str(body, "response_summary")
		case o.Result != vendors.Succeeded:
			o.Reason = vendors.Str(body, "error_type")
		}
		return o
	},
	"square": func(r *vendors.Response) vendors.Outcome {
		body := vendors.JSONObject(r.Body)
		o := vendors.Outcome{Result: vendors.ByStatus(r.Status)}
		for _, k := range []string{"payment", "refund", "order", "invoice", "payment_link", "customer", "subscription", "card"} {
			if id := vendors.Str(body, k, "id"); id != "" {
				o.VendorReference = id
				break
			}
		}
		if o.Result != vendors.Succeeded {
			o.Reason = strings.Trim(vendors.Str(body, "errors", "0", "category")+" "+vendors.Str(body, "errors", "0", "code"), " ")
		}
		return o
	},
}

// hostileStatuses are the statuses the rules tell apart, and the headers
// they read.
var hostileStatuses = []int{200, 201, 402, 409, 422, 500, 503}

// outcomeIsAsBefore reports every vendor whose Outcome of body differs
// from its map-reading Outcome at any status and header.
func outcomeIsAsBefore(t *testing.T, name string, body []byte) {
	t.Helper()
	for v, old := range mapOutcomes {
		var vendor vendors.Vendor = vendors.Generic{}
		if v != "generic" {
			vendor, _ = all.Lookup(v)
		}
		for _, status := range hostileStatuses {
			for _, h := range []string{"", "Idempotent-Replayed", "Transient-Error"} {
				header := http.Header{}
				if h != "" {
					header.Set(h, "true")
				}
				r := &vendors.Response{Status: status, Header: header, Body: body}
				want, got := old(r), vendor.Outcome(r)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: %s at %d %s: Outcome changed for %q (-map +ReadFields):\n%s", name, v, status, h, body, diff)
					return
				}
			}
		}
	}
	ws, wb := readByMap(body, fieldPaths)
	gs, gb := readByScan(body, fieldPaths)
	if diff := cmp.Diff(ws, gs); diff != "" {
		t.Errorf("%s: %q: strings (-map +ReadFields):\n%s", name, body, diff)
	}
	if diff := cmp.Diff(wb, gb); diff != "" {
		t.Errorf("%s: %q: booleans (-map +ReadFields):\n%s", name, body, diff)
	}
}

// hostileAnswers are answers a hostile upstream or a broken SDK may send,
// beyond answerShapes: each aimed at a place where a scanner that reads
// only some paths could part from a decoder that reads everything.
func hostileAnswers() [][2]string {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	deepArr := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	return [][2]string{
		// Duplicate names: the last wins, at every depth, whatever kind
		// the earlier value was.
		{"error twice, second empty object", `{"error":{"code":"card_declined","payment_intent":{"id":"pi_1"}},"error":{}}`},
		{"error twice, second null", `{"error":{"code":"card_declined"},"error":null}`},
		{"error twice, first null", `{"error":null,"error":{"code":"card_declined"}}`},
		{"error twice, second array", `{"error":{"code":"x"},"error":[{"code":"y"}]}`},
		{"error code twice inner", `{"error":{"code":"a","type":"t","code":"b"}}`},
		{"error code then number", `{"error":{"code":"a","code":1}}`},
		{"payment_intent twice, second string", `{"error":{"payment_intent":{"id":"pi_a"},"payment_intent":"pi_b"}}`},
		{"details twice", `{"name":"N","details":[{"issue":"A"}],"details":[{"field":"f"}]}`},
		{"details then object", `{"name":"N","details":[{"issue":"A"}],"details":{"0":{"issue":"B"}}}`},
		{"details object then array", `{"name":"N","details":{"0":{"issue":"B"}},"details":[{"issue":"A"}]}`},
		{"details element issue twice", `{"details":[{"issue":"A","issue":"B"}]}`},
		{"errors twice", `{"errors":[{"category":"C","code":"D"}],"errors":[]}`},
		{"approved three times", `{"approved":false,"approved":true,"approved":false}`},
		{"approved false then null", `{"approved":false,"approved":null}`},
		{"approved false then string", `{"approved":false,"approved":"false"}`},
		{"resultCode twice refused last", `{"resultCode":"Authorised","resultCode":"Refused","refusalReason":"x"}`},
		{"square payment twice", `{"payment":{"id":"p_1"},"payment":{"status":"x"},"refund":{"id":"r_1"}}`},
		{"square payment id escaped twice", `{"payment":{"id":"p_1","\u0069d":"p_2"}}`},
		{"id escaped then plain", `{"\u0069\u0064":"a","id":"b"}`},
		{"id plain then escaped", `{"id":"a","\u0069\u0064":"b"}`},
		{"id escaped solidus", `{"i\/d":"x","id":"y"}`},

		// Names with escapes that do not unescape to the path's name.
		{"name with NUL", `{"id\u0000":"x"}`},
		{"name with quote", `{"id\u0022":"x","i\"d":"y"}`},
		{"name NUL inside", `{"i\u0000d":"x"}`},
		{"name surrogate pair", `{"id\ud83d\ude00":"x"}`},
		{"name lone high surrogate", `{"id\ud800":"x"}`},
		{"name lone low surrogate", `{"\udc00id":"x"}`},
		{"name invalid surrogate pair", `{"id\ud800\u0041":"x"}`},
		{"name upper hex escape", `{"\u0049\u0044":"x","\u0069\u0044":"y","\u0069\u0064":"z"}`},
		{"name overlong UTF-8", "{\"i\xc1\xa4\":\"x\"}"},
		{"name U+FFFD literal", `{"i` + "\uFFFD" + `d":"x"}`},
		{"name invalid byte matches U+FFFD path", "{\"i\xfed\":\"x\"}"},
		{"name surrogate encoded as UTF-8", "{\"id\xed\xa0\x80\":\"x\"}"},
		{"name escaped U+FFFD", `{"i\ufffdd":"x"}`},

		// Values with escapes.
		{"id NUL", `{"id":"\u0000"}`},
		{"id only NUL", `{"id":"pi_1\u0000"}`},
		{"id escaped quote", `{"id":"\u0022pi\u0022"}`},
		{"id invalid surrogates", `{"id":"\udc00\ud800\ud800\udc00"}`},
		{"id raw surrogate UTF-8", "{\"id\":\"\xed\xa0\x80pi\"}"},
		{"id truncated UTF-8", "{\"id\":\"pi\xe2\x82\"}"},
		{"id overlong UTF-8", "{\"id\":\"\xc0\xafpi\"}"},
		{"id DEL", "{\"id\":\"pi\x7f\"}"},
		{"id U+2028", "{\"id\":\"pi\u2028\"}"},
		{"resultCode escaped", `{"resultCode":"R\u0065fused","refusalReason":"x"}`},
		{"errorCode escaped", `{"errorCode":"\u0037\u0030\u0034"}`},

		// Fields inside strings, invalid UTF-8 in skipped strings.
		{"id inside a string", `{"x":"{\"id\":\"pi_fake\"}","id":"pi_real"}`},
		{"id inside a string only", `{"x":"\",\"id\":\"pi_fake"}`},
		{"id inside a name", `{"\"id\":\"pi_fake":1}`},
		{"skipped invalid UTF-8", "{\"x\":\"\xff\xfe\xfd\",\"id\":\"pi_1\"}"},
		{"skipped invalid UTF-8 name", "{\"\xff\":\"\xff\",\"id\":\"pi_1\"}"},
		{"skipped control char", "{\"x\":\"\x1f\",\"id\":\"pi_1\"}"},
		{"skipped bad escape", `{"x":"\x","id":"pi_1"}`},
		{"skipped short unicode", `{"x":"\u00","id":"pi_1"}`},
		{"skipped unicode non-hex", `{"x":"\u00g0","id":"pi_1"}`},
		{"skipped escape at end", `{"x":"\`},

		// Numbers.
		{"huge exponent", `{"n":1e999999999,"id":"pi_1"}`},
		{"huge negative exponent", `{"n":-1e-999999999,"id":"pi_1"}`},
		{"huge integer", `{"n":` + strings.Repeat("9", 5000) + `,"id":"pi_1"}`},
		{"id a huge number", `{"id":1e400}`},
		{"numbers as strings", `{"errorCode":"704","approved":"true","id":"1"}`},
		{"approved as number", `{"approved":0,"id":"pay_1"}`},
		{"plus number", `{"n":+1,"id":"pi_1"}`},
		{"hex number", `{"n":0x10,"id":"pi_1"}`},
		{"NaN", `{"n":NaN,"id":"pi_1"}`},
		{"Infinity", `{"n":Infinity,"id":"pi_1"}`},
		{"minus zero exp", `{"n":-0e-0,"id":"pi_1"}`},
		{"leading dot", `{"n":.5,"id":"pi_1"}`},
		{"double minus", `{"n":--1,"id":"pi_1"}`},
		{"number then letter", `{"n":1x,"id":"pi_1"}`},
		{"exponent sign only", `{"n":1e+,"id":"pi_1"}`},
		{"number at end", `{"n":1`},

		// BOM, whitespace, trailing data, top level.
		{"BOM", "\xef\xbb\xbf{\"id\":\"pi_1\"}"},
		{"BOM inside", "{\xef\xbb\xbf\"id\":\"pi_1\"}"},
		{"form feed space", "{\f\"id\":\"pi_1\"}"},
		{"vertical tab", "{\v\"id\":\"pi_1\"}"},
		{"NBSP", "{\u00a0\"id\":\"pi_1\"}"},
		{"NUL before", "\x00{\"id\":\"pi_1\"}"},
		{"NUL after", "{\"id\":\"pi_1\"}\x00"},
		{"spaces everywhere", " \t\r\n{ \t\r\n\"id\" \t\r\n: \t\r\n\"pi_1\" \t\r\n, \t\r\n\"error\" \t\r\n: \t\r\n{ \"code\" : \"c\" } \t\r\n} \t\r\n"},
		{"garbage after", `{"id":"pi_1"}}}}`},
		{"invalid after", "{\"id\":\"pi_1\"}\xff"},
		{"unterminated second", `{"id":"pi_1"}{"id":`},
		{"array after", `{"id":"pi_1"}[`},
		{"comma after", `{"id":"pi_1"},{"id":"pi_2"}`},
		{"object in array", `[{"id":"pi_1"}]`},
		{"null then object", `null {"id":"pi_1"}`},
		{"string then object", `"x" {"id":"pi_1"}`},
		{"number then object", `1 {"id":"pi_1"}`},
		{"true then object", `true{"id":"pi_1"}`},
		{"nullx", `nullx`},
		{"null object", `null`},

		// Truncations.
		{"truncated after colon", `{"id":`},
		{"truncated after name", `{"id"`},
		{"truncated after comma", `{"id":"pi_1",`},
		{"truncated in nested", `{"id":"pi_1","error":{"code":"x"`},
		{"truncated in array", `{"id":"pi_1","details":[{"issue":"x"}`},
		{"truncated in literal", `{"id":"pi_1","a":tr`},
		{"truncated in escape", `{"id":"pi_1","a":"\u00`},
		{"missing colon", `{"id" "pi_1"}`},
		{"double colon", `{"id"::"pi_1"}`},
		{"double comma", `{"id":"pi_1",,"x":1}`},
		{"leading comma", `{,"id":"pi_1"}`},
		{"array trailing comma", `{"id":"pi_1","d":[1,]}`},
		{"array leading comma", `{"id":"pi_1","d":[,1]}`},
		{"array missing comma", `{"id":"pi_1","d":[1 2]}`},
		{"array colon", `{"id":"pi_1","d":[1:2]}`},
		{"object as name", `{{"id":"pi_1"}:1}`},
		{"number as name", `{1:"pi_1"}`},
		{"close mismatch", `{"id":"pi_1","d":[}`},
		{"close mismatch 2", `{"id":"pi_1","d":{]}`},

		// Deep nesting, before and after the field, in and out of the path.
		{"deep objects 9999 before", `{"x":` + deep(9999) + `,"id":"pi_1"}`},
		{"deep objects 10000 before", `{"x":` + deep(10000) + `,"id":"pi_1"}`},
		{"deep objects 9999 after", `{"id":"pi_1","x":` + deep(9999) + `}`},
		{"deep objects 10000 after", `{"id":"pi_1","x":` + deep(10000) + `}`},
		{"deep arrays 9998 in error", `{"error":{"code":"c","x":` + deepArr(9998) + `}}`},
		{"deep arrays 9999 in error", `{"error":{"code":"c","x":` + deepArr(9999) + `}}`},
		{"deep in details 9997", `{"details":[{"issue":"I","x":` + deepArr(9997) + `}]}`},
		{"deep in details 9998", `{"details":[{"issue":"I","x":` + deepArr(9998) + `}]}`},
		{"deep unterminated", `{"id":"pi_1","x":` + strings.Repeat("[", 20000)},
		{"deep mixed 10000", `{"id":"pi_1","x":` + strings.Repeat(`[{"a":`, 4999) + "1" + strings.Repeat("}]", 4999) + `}`},
		{"deep mixed 10001", `{"id":"pi_1","x":` + strings.Repeat(`[{"a":`, 5000) + "1" + strings.Repeat("}]", 5000) + `}`},

		// Arrays on index paths.
		{"details index 0 null", `{"name":"N","details":[null,{"issue":"B"}]}`},
		{"details index 0 array", `{"name":"N","details":[[{"issue":"A"}]]}`},
		{"details many", `{"name":"N","details":[{"issue":"A"},{"issue":"B"},{"issue":"C"}]}`},
		{"details object with index names", `{"name":"N","details":{"00":{"issue":"A"},"+0":{"issue":"B"},"0":{"issue":"C"}}}`},
		{"errors deep arrays", `{"errors":[[[]],{"code":"X"}]}`},
		{"errors first empty object", `{"errors":[{},{"category":"C","code":"D"}]}`},
		{"errors of strings", `{"errors":["CARD_DECLINED"]}`},

		// null vs missing.
		{"id null, action_id", `{"id":null,"action_id":"act_1"}`},
		{"error null", `{"error":null,"id":"pi_1"}`},
		{"error code null, type", `{"error":{"code":null,"type":"card_error"}}`},
		{"payment null, refund", `{"payment":null,"refund":{"id":"r_1"}}`},
		{"payment id null, refund", `{"payment":{"id":null},"refund":{"id":"r_1"}}`},
		{"errors null", `{"errors":null}`},
		{"details null", `{"name":"N","details":null}`},
		{"pspReference null", `{"pspReference":null,"resultCode":"Refused"}`},

		// Big answers.
		{"many members", "{" + strings.Repeat(`"a":1,`, 20000) + `"id":"pi_1"}`},
		{"many escaped members", "{" + strings.Repeat(`"\u0061":1,`, 5000) + `"\u0069d":"pi_1"}`},
		{"long id", `{"id":"` + strings.Repeat("x", 100000) + `"}`},
	}
}

// TestAHostileAnswerClassifiesAsBefore: every built-in Outcome makes of a
// hostile answer exactly what it made when it read a decoded map.
func TestAHostileAnswerClassifiesAsBefore(t *testing.T) {
	for _, a := range hostileAnswers() {
		outcomeIsAsBefore(t, a[0], []byte(a[1]))
	}
}

// answerGen makes random answers from the names and values the rules read,
// spelled every way JSON allows and some ways it does not.
type answerGen struct{ r *rand.Rand }

var genNames = []string{"id", "error", "code", "type", "payment_intent", "details", "0", "1", "issue", "name", "errors",
	"category", "payment", "refund", "order", "card", "approved", "action_id", "response_summary", "error_type",
	"pspReference", "errorCode", "resultCode", "refusalReason", "errorType", "x", "Id", "ID", "a", "data", "n", "00", "+0"}

var genStrings = []string{"", "pi_1", "Refused", "Error", "Cancelled", "Authorised", "704", "703", "card_declined", "true", "false",
	"N", "I", `{"id":"fake"}`, "é", "\U0001F600", "\u2028"}

// genShapes are members the rules read, $ a random value.
var genShapes = [][2]string{
	{"id", `"pi_1"`}, {"id", "$"}, {"error", `{"code":$,"type":$,"payment_intent":{"id":$}}`}, {"error", `{"type":"t","code":$}`},
	{"details", `[{"issue":$},{"issue":"B"}]`}, {"details", `[$,{"issue":$}]`}, {"errors", `[{"category":$,"code":$}]`},
	{"payment", `{"id":$}`}, {"refund", `{"id":"r_1"}`}, {"approved", "false"}, {"approved", "$"}, {"resultCode", `"Refused"`},
	{"errorCode", `"704"`}, {"errorCode", `"703"`}, {"name", `"N"`}, {"action_id", `"act_1"`}, {"pspReference", "$"},
	{"refusalReason", "$"}, {"response_summary", "$"}, {"error_type", "$"}, {"errorType", "$"},
}

func (g answerGen) ws() string {
	switch g.r.Intn(12) {
	case 0:
		return " "
	case 1:
		return "\n\t"
	case 2:
		return "\r\n "
	case 3:
		if g.r.Intn(8) == 0 {
			return []string{"\f", "\v", "\u00a0", "\x00", "\xef\xbb\xbf"}[g.r.Intn(5)] // not JSON space
		}
	}
	return ""
}

// quoted spells s as a JSON string: plainly, or with some characters
// escaped, or with a byte or escape that changes it.
func (g answerGen) quoted(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch g.r.Intn(10) {
		case 0:
			if c < 0x10000 {
				fmt.Fprintf(&b, `\u%04x`, c)
			} else {
				c -= 0x10000
				fmt.Fprintf(&b, `\u%04X\u%04x`, 0xD800+(c>>10), 0xDC00+(c&0x3FF))
			}
		case 1:
			if g.r.Intn(12) == 0 {
				b.WriteString([]string{`\u0000`, `\ud800`, `\udc00`, "\xff", "\xc0\xaf", `\"`, `\/`, "\x1f", `\x`, "\xed\xa0\x80"}[g.r.Intn(10)])
			}
			b.WriteRune(c)
		default:
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(c)
		}
	}
	if g.r.Intn(40) == 0 {
		b.WriteString([]string{`\u0000`, "\xff", `\ud800`}[g.r.Intn(3)])
	}
	b.WriteByte('"')
	return b.String()
}

func (g answerGen) value(depth int) string {
	n := 9
	if depth > 4 {
		n = 6 // scalars only
	}
	switch g.r.Intn(n) {
	case 0, 1:
		return g.quoted(genStrings[g.r.Intn(len(genStrings))])
	case 2:
		if g.r.Intn(20) == 0 {
			return []string{"01", "1.", "-", "+1", ".5", "1e", "NaN"}[g.r.Intn(7)] // not JSON
		}
		return []string{"0", "-0", "1.5", "-2e10", "3E+2", "1e999999", "123456789012345678901234567890", "704"}[g.r.Intn(8)]
	case 3:
		if g.r.Intn(20) == 0 {
			return []string{"tru", "nul", "True", "falsey"}[g.r.Intn(4)] // not JSON
		}
		return []string{"true", "false", "null"}[g.r.Intn(3)]
	case 4:
		return g.quoted(genNames[g.r.Intn(len(genNames))])
	case 5:
		return "null"
	case 6, 7:
		return g.object(depth + 1)
	default:
		return g.array(depth + 1)
	}
}

func (g answerGen) object(depth int) string {
	var b strings.Builder
	b.WriteString("{" + g.ws())
	n := g.r.Intn(5)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString("," + g.ws())
		}
		name, value := genNames[g.r.Intn(len(genNames))], ""
		if g.r.Intn(2) == 0 { // a member of a shape the rules read
			m := genShapes[g.r.Intn(len(genShapes))]
			name, value = m[0], m[1]
			for strings.Contains(value, "$") {
				value = strings.Replace(value, "$", g.value(depth+2), 1)
			}
		} else {
			value = g.value(depth)
		}
		b.WriteString(g.quoted(name) + g.ws() + ":" + g.ws() + value + g.ws())
	}
	if g.r.Intn(60) == 0 {
		b.WriteString(",")
	}
	b.WriteString("}")
	return b.String()
}

func (g answerGen) array(depth int) string {
	var b strings.Builder
	b.WriteString("[" + g.ws())
	n := g.r.Intn(4)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString("," + g.ws())
		}
		b.WriteString(g.value(depth) + g.ws())
	}
	b.WriteString("]")
	return b.String()
}

// answer is a generated answer, now and then broken: cut short, a byte
// changed, data after it, not an object.
func (g answerGen) answer() []byte {
	s := g.ws() + g.object(0) + g.ws()
	switch g.r.Intn(10) {
	case 0:
		s = s[:g.r.Intn(len(s)+1)]
	case 1:
		i := g.r.Intn(len(s) + 1)
		const bytes = "{}[]\",:\\ \x00\xff0an"
		s = s[:i] + string([]byte{bytes[g.r.Intn(len(bytes))]}) + s[i:]
	case 2:
		s += []string{"x", "}", "{", `{"id":"pi_2"}`, "\xff", ","}[g.r.Intn(6)]
	case 3:
		if g.r.Intn(3) == 0 {
			s = "[" + s + "]"
		}
	}
	return []byte(s)
}

// TestAGeneratedAnswerClassifiesAsBefore: random answers built from the
// names and values the rules read (duplicates, escapes, nesting, broken
// and trailing bytes) classify as the map-reading rules classify them.
func TestAGeneratedAnswerClassifiesAsBefore(t *testing.T) {
	n := 3000
	if testing.Short() {
		n = 500
	}
	g := answerGen{rand.New(rand.NewSource(31))}
	for i := 0; i < n && !t.Failed(); i++ {
		outcomeIsAsBefore(t, fmt.Sprintf("answer %d", i), g.answer())
	}
}
