package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
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
