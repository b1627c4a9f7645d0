package proxy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// parsedCanonicalContent is canonicalContent as it was before the payload
// of a form was made from the form the rules parsed (git show
// 2962f25:proxy/gate.go): the body parsed again here, the payload
// json.Marshal's.
func parsedCanonicalContent(method, path, contentType string, body []byte, e vendors.Effect) json.RawMessage {
	c := content{Method: method, Path: path, Scope: e.Scope}
	switch {
	case len(body) == 0:
	case strings.HasPrefix(contentType, "application/x-www-form-urlencoded"):
		if form, err := url.ParseQuery(string(body)); err == nil {
			c.Form = &form
		} else {
			c.BodySHA256 = hashed(string(body))
		}
	default:
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) != nil || obj == nil {
			c.BodySHA256 = hashed(string(body))
			break
		}
		if e.Key.Location == vendors.InBody {
			delete(obj, e.Key.Name)
		}
		c.JSON = &obj
	}
	b, _ := json.Marshal(c)
	if len(b) <= ledger.MaxPayloadBytes {
		return b
	}
	if c.JSON != nil {
		pb, _ := json.Marshal(*c.JSON)
		c.JSON, c.JSONSHA256 = nil, hashed(string(pb))
	}
	if c.Form != nil {
		pb, _ := json.Marshal(*c.Form)
		c.Form, c.FormSHA256 = nil, hashed(string(pb))
	}
	if b, _ = json.Marshal(c); len(b) > ledger.MaxPayloadBytes {
		b, _ = json.Marshal(map[string]string{"content_sha256": hashed(string(b))})
	}
	return b
}

// hostileForms are form bodies a client may send that a second parse
// could read differently from the first: repeated keys, ';' separators,
// every percent-encoding of one name, bad escapes, invalid UTF-8, empty
// pairs, and bodies over the payload limit.
func hostileForms() []string {
	big := strings.Repeat("x", ledger.MaxPayloadBytes)
	return []string{
		"", "&", "&&", "=", "==", "a", "a=", "=a", "a==b", "a=1&&b=2", "&a=1&",
		"amount=1000&currency=usd", "currency=usd&amount=1000",
		"amount=1000&amount=1000", "amount=100&amount=6000000&currency=usd",
		"expand[]=a&expand[]=b", "expand%5B%5D=a&expand[]=b", "expand%5b%5d=a&expand%5B%5D=b",
		"amount=1000;currency=usd", "amount=1000&currency=usd;x=1", ";", "a;b=1",
		"%61mount=1000&currency=usd", "amount=1000&%61mount=2000", "am%6Funt=1&am%6funt=1",
		"a=%2B&b=+&c=%20&d=%2b", "a+b=c+d", "a%20b=c%20d",
		"a=%", "a=%g0", "a=%zz", "%=1", "a=%4", "a=%%41",
		"a=%ff", "a=%c3%28", "a=%ed%a0%80", "\xff=\xfe", "a=\x00", "a=%00", "%00=1",
		"a=<>&b=%26&c=%3C%3E", "a=%E2%80%A8", "a=\u2028", "a=%22%5C", "a=\"\\",
		"metadata[order]=1&metadata%5Border%5D=2",
		"customer=cus_1&transfer_data[destination]=acct_1&amount=1&currency=eur",
		"a=" + big, "a=1&b=" + big, strings.Repeat("k=v&", 20000),
	}
}

// TestAFormBodyFingerprintsAsItParsed: a form body's payload (and so its
// fingerprint) made from the form Stripe's rules parsed is, byte for byte,
// the payload made from parsing the body again, for every hostile form,
// content type and Stripe endpoint; and building it leaves the parsed
// form as it was, so the second begin of an owned call (gatedBegin again)
// makes the same payload.
func TestAFormBodyFingerprintsAsItParsed(t *testing.T) {
	v, ok := all.Lookup("stripe")
	if !ok {
		t.Fatal("no stripe vendor")
	}
	types := []string{"application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-8",
		"application/x-www-form-urlencoded;charset=ISO-8859-1", "Application/X-WWW-Form-Urlencoded", "application/json", "text/plain", ""}
	routes := [][2]string{{"POST", "/v1/payment_intents"}, {"POST", "/v1/checkout/sessions"}, {"DELETE", "/v1/customers/cus_1"},
		{"POST", "/v2/core/accounts"}}
	for _, body := range hostileForms() {
		for _, ct := range types {
			for _, rt := range routes {
				h := http.Header{"Content-Type": {ct}}
				e, isEffect := v.Classify(&vendors.Request{Method: rt[0], Path: rt[1], Header: h, Body: []byte(body)})
				if !isEffect {
					t.Fatalf("%s %s is no effect", rt[0], rt[1])
				}
				name := rt[0] + " " + rt[1] + " " + ct + " " + shorten(body)
				before, _ := json.Marshal(e.Form)
				want := parsedCanonicalContent(rt[0], rt[1], ct, []byte(body), e)
				got := canonicalContent(rt[0], rt[1], ct, []byte(body), e)
				if diff := cmp.Diff(string(want), string(got)); diff != "" {
					t.Errorf("%s (refused %q): payload (-parsed again +the rules' form):\n%s", name, e.Refuse, diff)
				}
				if again := canonicalContent(rt[0], rt[1], ct, []byte(body), e); string(again) != string(got) {
					t.Errorf("%s: a second payload of one effect differs:\n%s\n%s", name, got, again)
				}
				if after, _ := json.Marshal(e.Form); string(after) != string(before) {
					t.Errorf("%s: building the payload changed the rules' form: %s, now %s", name, before, after)
				}
			}
		}
	}
}

func shorten(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// FuzzFormPayloadIsParsedPayload holds the payload made from Stripe's
// parsed form to the payload of the body parsed again, for any body.
func FuzzFormPayloadIsParsedPayload(f *testing.F) {
	for _, b := range hostileForms()[:len(hostileForms())-3] {
		f.Add("/v1/payment_intents", b)
	}
	v, _ := all.Lookup("stripe")
	f.Fuzz(func(t *testing.T, path, body string) {
		const ct = "application/x-www-form-urlencoded"
		e, isEffect := v.Classify(&vendors.Request{Method: "POST", Path: path, Header: http.Header{"Content-Type": {ct}}, Body: []byte(body)})
		if !isEffect {
			return
		}
		want := parsedCanonicalContent("POST", path, ct, []byte(body), e)
		if got := canonicalContent("POST", path, ct, []byte(body), e); string(got) != string(want) {
			t.Fatalf("%q: payload %s, parsed again %s", body, got, want)
		}
	})
}
