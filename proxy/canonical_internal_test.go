package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
)

// TestCanonicalContentIsUnchanged pins the payload (and so the
// fingerprint) of each kind of body byte for byte: an effect begun before
// an upgrade must be the same content after it, however the payload is
// built.
func TestCanonicalContentIsUnchanged(t *testing.T) {
	big := strings.Repeat("x", 70_000)
	inBody := vendors.Effect{Key: vendors.KeyRule{Location: vendors.InBody, Name: "idempotency_key"}}
	cases := []struct {
		name, method, path, ct, body string
		e                            vendors.Effect
		want                         string
	}{
		{"form", "POST", "/v1/payment_intents", "application/x-www-form-urlencoded", "currency=usd&amount=1000&a%3Cb=%26&expand[]=x&expand[]=y", vendors.Effect{},
			`{"form":{"a\u003cb":["\u0026"],"amount":["1000"],"currency":["usd"],"expand[]":["x","y"]},"method":"POST","path":"/v1/payment_intents"}`},
		{"empty form", "POST", "/v1/x", "application/x-www-form-urlencoded; charset=utf-8", "&", vendors.Effect{Scope: "acct_1"},
			`{"form":{},"method":"POST","path":"/v1/x","scope":"acct_1"}`},
		{"bad form", "POST", "/v1/x", "application/x-www-form-urlencoded", "a=%zz", vendors.Effect{},
			`{"body_sha256":"` + sum("a=%zz") + `","method":"POST","path":"/v1/x"}`},
		{"json", "POST", "/v2/payments", "application/json", `{"b": [1, 2],"a":{"z":1,"y":"<"},"idempotency_key":"k"}`, inBody,
			`{"json":{"a":{"z":1,"y":"\u003c"},"b":[1,2]},"method":"POST","path":"/v2/payments"}`},
		{"empty json", "POST", "/v2/x", "application/json", `{}`, vendors.Effect{Scope: "\n\"s\""},
			`{"json":{},"method":"POST","path":"/v2/x","scope":"\n\"s\""}`},
		{"not json", "PUT", "/v1/x", "text/plain", `[1]`, vendors.Effect{},
			`{"body_sha256":"` + sum("[1]") + `","method":"PUT","path":"/v1/x"}`},
		{"no body", "DELETE", "/v1/x/1", "", "", vendors.Effect{},
			`{"method":"DELETE","path":"/v1/x/1"}`},
		{"large form", "POST", "/v1/x", "application/x-www-form-urlencoded", "a=" + big, vendors.Effect{Scope: "s"},
			`{"form_sha256":"` + sum(`{"a":["`+big+`"]}`) + `","method":"POST","path":"/v1/x","scope":"s"}`},
		{"large json", "POST", "/v1/x", "application/json", `{"a":"` + big + `"}`, vendors.Effect{},
			`{"json_sha256":"` + sum(`{"a":"`+big+`"}`) + `","method":"POST","path":"/v1/x"}`},
	}
	for _, c := range cases {
		got := string(canonicalContent(c.method, c.path, c.ct, []byte(c.body), c.e))
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: payload changed (-want +got):\n%s", c.name, diff)
		}
		// The same body with the form Stripe's rules parsed it into
		// (Effect.Form), which the payload is then made from.
		e, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: c.method, Path: c.path, Header: http.Header{}, Body: []byte(c.body)})
		if e.Form == nil {
			continue
		}
		c.e.Form = e.Form
		got = string(canonicalContent(c.method, c.path, c.ct, []byte(c.body), c.e))
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s, with the form Stripe's rules parsed: payload changed (-want +got):\n%s", c.name, diff)
		}
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// contentCases are payload contents of each kind marshalContent writes by
// hand, with every string escape encoding/json makes.
func contentCases() []content {
	escapes := "a\"b\\c/d\b\f\n\r\t\x00\x01\x1f\x7f<>&é\u2028\u2029\xff\xc3(😀\ud7ff"
	form := url.Values{"amount": {"1000"}, "expand[]": {"x", "y"}, escapes: {escapes, ""}, "": {}, "B": {"1"}, "a": {"2"}}
	empty, nilForm := url.Values{}, url.Values(nil)
	withNil := url.Values{"k": nil}
	return []content{
		{Method: "POST", Path: "/v1/payment_intents"},
		{Method: "POST", Path: "/v1/x", Scope: "acct_1", Form: &form},
		{Method: "POST", Path: "/v1/x", Form: &empty},
		{Method: "POST", Path: "/v1/x", Form: &nilForm},
		{Method: "POST", Path: "/v1/x", Form: &withNil},
		{Method: "PUT", Path: escapes, Scope: escapes, BodySHA256: sum("x")},
		{Method: "POST", Path: "/v1/x", FormSHA256: sum("y"), JSONSHA256: sum("z"), Scope: "\n\"s\""},
		{Method: "", Path: ""},
	}
}

// TestMarshalContentIsJSONMarshal: the payload written by hand is
// json.Marshal's, byte for byte.
func TestMarshalContentIsJSONMarshal(t *testing.T) {
	for i, c := range contentCases() {
		want, _ := json.Marshal(c)
		if diff := cmp.Diff(string(want), string(marshalContent(c))); diff != "" {
			t.Errorf("case %d: (-json.Marshal +marshalContent):\n%s", i, diff)
		}
	}
}

// FuzzMarshalContent holds marshalContent to json.Marshal for any form,
// path and scope.
func FuzzMarshalContent(f *testing.F) {
	f.Add("POST", "/v1/payment_intents", "", "amount=1000&currency=usd&customer=cus_1")
	f.Add("POST", "/v1/x\u2028", "acct_<1>", "a%3Cb=%26&expand[]=x&expand[]=y&%FF=%00")
	f.Fuzz(func(t *testing.T, method, path, scope, body string) {
		form, err := url.ParseQuery(body)
		if err != nil {
			form = url.Values{body: {path, scope}}
		}
		for _, c := range []content{{Method: method, Path: path, Scope: scope, Form: &form}, {Method: method, Path: path, Scope: scope, BodySHA256: body}} {
			want, _ := json.Marshal(c)
			if got := marshalContent(c); string(got) != string(want) {
				t.Fatalf("marshalContent %q, json.Marshal %q", got, want)
			}
		}
	})
}
