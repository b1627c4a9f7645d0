package vendors_test

import (
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

func compiled(t *testing.T, d vendors.Definition) *vendors.Declared {
	t.Helper()
	v, errs := vendors.Compile(d, nil)
	if errs != nil {
		t.Fatalf("Compile: %+v", errs)
	}
	return v
}

func acme(key vendors.DefinedKey) vendors.Definition {
	return vendors.Definition{Name: "acme", Upstream: "https://api.acme.test", Key: key,
		Routes: []vendors.Route{{Method: "POST", Path: "/v1/charges", EffectType: "payment.charge",
			Amount: &vendors.AmountField{Field: "amount", Unit: "minor"}, Currency: &vendors.Field{Value: "usd"}, Counterparty: &vendors.Field{Field: "to.id"}},
			{Method: "POST", Path: "/v1/mails", EffectType: "email.send", CostMicros: new(int64(1000))}}}
}

// TestADeclaredVendorsKeyFitsItsAlphabet: Ratchet's key for a declared
// vendor is a UUID where its alphabet and length take one, else 32 hex
// digits in the case the alphabet allows; the registry shapes it so.
func TestADeclaredVendorsKeyFitsItsAlphabet(t *testing.T) {
	digest := sha256.Sum256([]byte("attempt 1"))
	cases := []struct {
		name string
		key  vendors.DefinedKey
		want *regexp.Regexp
	}{
		{"any alphabet, 64", vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64}, uuidRe},
		{"no dash", vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64, Alphabet: "a-z0-9"}, regexp.MustCompile(`^[0-9a-f]{32}$`)},
		{"too short for a UUID", vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 32}, regexp.MustCompile(`^[0-9a-f]{32}$`)},
		{"upper case only", vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64, Alphabet: "A-Z0-9-"}, regexp.MustCompile(`^[0-9A-F]{32}$`)},
	}
	for _, c := range cases {
		v := compiled(t, acme(c.key))
		reg, err := vendors.NewRegistry(append(all.List(), v)...)
		if err != nil {
			t.Fatal(err)
		}
		if k := reg.ShapeKey("acme", digest[:]); !c.want.MatchString(k.Value) {
			t.Errorf("%s: key %q does not match %s", c.name, k.Value, c.want)
		}
	}
}

// TestADeclaredVendorClassifiesByItsRoutes: a route names the effect type,
// money, counterparty and fixed cost; a body key is read as the caller's
// key; an unlisted call is typed by its path; a repeated key header is
// refused.
func TestADeclaredVendorClassifiesByItsRoutes(t *testing.T) {
	v := compiled(t, acme(vendors.DefinedKey{In: "body", Name: "idempotency_key", MaxLength: 64}))
	e, ok := v.Classify(&vendors.Request{Method: "POST", Path: "/v1/charges", Header: http.Header{"Authorization": {"Bearer k"}, "Content-Type": {"application/json"}},
		Body: []byte(`{"amount": 1250, "to": {"id": "acct_9"}, "idempotency_key": "order-7"}`)})
	if !ok {
		t.Fatal("a charge is not an effect")
	}
	want := vendors.Effect{EffectType: "payment.charge", Operation: "acme.charges.create", Money: &vendors.Money{Minor: 1250, Currency: "USD"},
		Counterparty: "acct_9", CallerKey: "order-7", Credential: "Bearer k", Key: v.KeyRule()}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("the charge (-want +got):\n%s", diff)
	}
	mail, _ := v.Classify(&vendors.Request{Method: "POST", Path: "/v1/mails", Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{}`)})
	if mail.EffectType != "email.send" || mail.CostMicros == nil || *mail.CostMicros != 1000 {
		t.Errorf("a mail: type %q cost %v, want email.send at 1000 micros", mail.EffectType, mail.CostMicros)
	}
	other, _ := v.Classify(&vendors.Request{Method: "DELETE", Path: "/v1/customers/cus_1", Header: http.Header{}})
	if other.EffectType != "acme.customers.delete" {
		t.Errorf("an unlisted call is typed %q, want acme.customers.delete", other.EffectType)
	}
	if _, ok := v.Classify(&vendors.Request{Method: "GET", Path: "/v1/charges", Header: http.Header{}}); ok {
		t.Error("a read is an effect")
	}
	h := compiled(t, acme(vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64}))
	twice, _ := h.Classify(&vendors.Request{Method: "POST", Path: "/v1/charges", Header: http.Header{"Idempotency-Key": {"a", "b"}}, Body: []byte(`{}`)})
	if twice.Refuse == "" {
		t.Error("a request with its key header twice is not refused")
	}
}

// TestADeclaredVendorsOutcomesAndRefusals: an exact status wins over its
// class, an unlisted one is unknown; a refusal fills the template with
// the message JSON-escaped.
func TestADeclaredVendorsOutcomesAndRefusals(t *testing.T) {
	d := acme(vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64})
	d.Outcome = vendors.OutcomeRules{Failed: []string{"4xx"}, Unknown: []string{"429", "5xx"}, ObjectID: "data.id", Reason: "error.type"}
	d.Refusal = vendors.RefusalShape{Body: `{"error": {"type": "{{code}}", "message": "{{message}}", "http": {{status}}}}`}
	v := compiled(t, d)
	for status, want := range map[int]vendors.Result{201: vendors.Succeeded, 404: vendors.Failed, 429: vendors.Unknown, 503: vendors.Unknown, 302: vendors.Unknown} {
		if got := v.Outcome(&vendors.Response{Status: status, Body: []byte(`{"data": {"id": "ch_1"}, "error": {"type": "x"}}`)}).Result; got != want {
			t.Errorf("status %d reads %s, want %s", status, got, want)
		}
	}
	if ref := v.Outcome(&vendors.Response{Status: 201, Body: []byte(`{"data": {"id": "ch_1"}}`)}).VendorReference; ref != "ch_1" {
		t.Errorf("the object id is %q, want ch_1 (outcome.object_id)", ref)
	}
	rep := v.Refusal(403, vendors.RefusalBlocked, `Ratchet: "denied"`+"\n")
	var got map[string]any
	if err := json.Unmarshal(rep.Body, &got); err != nil {
		t.Fatalf("the refusal is not JSON: %v: %s", err, rep.Body)
	}
	want := map[string]any{"error": map[string]any{"type": vendors.RefusalBlocked, "message": `Ratchet: "denied"` + "\n", "http": float64(403)}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the refusal (-want +got):\n%s", diff)
	}
	if rep.Header.Get("Content-Type") != "application/json" {
		t.Errorf("the refusal's Content-Type is %q, want the default application/json", rep.Header.Get("Content-Type"))
	}
}

// TestARegistryRefusesANameOrHostTwice: two vendors of one name, or one
// host claimed by two, are an error, not one silently shadowing the other.
func TestARegistryRefusesANameOrHostTwice(t *testing.T) {
	a := compiled(t, vendors.Definition{Name: "acme", Hosts: []string{"api.acme.test"}, Upstream: "https://api.acme.test",
		Key: vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64}})
	b := compiled(t, vendors.Definition{Name: "other", Hosts: []string{"api.acme.test"}, Upstream: "https://api.acme.test",
		Key: vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64}})
	if _, err := vendors.NewRegistry(a, a); err == nil {
		t.Error("a name twice is accepted")
	}
	if _, err := vendors.NewRegistry(a, b); err == nil {
		t.Error("a host twice is accepted")
	}
	reg, err := vendors.NewRegistry(append(all.List(), a)...)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := reg.ForHost("API.ACME.TEST"); !ok || v.Name() != "acme" {
		t.Errorf("ForHost in upper case: %v %v, want acme", v, ok)
	}
	var none *vendors.Registry
	if v, ok := none.Lookup("stripe"); ok || v.Name() != "generic" {
		t.Errorf("a nil registry's stripe: %v %v, want Generic, unknown", v, ok)
	}
	if v, ok := all.Registry().Lookup("stripe"); !ok || v.Name() != "stripe" {
		t.Errorf("the built-in registry's stripe: %v %v", v, ok)
	}
}

// TestADefinitionThatLosesTheKeyOrRepeatsACallIsRefused: a careless
// definition is refused when it compiles, with the field at fault, rather
// than let the proxy forward a call without Ratchet's key (a key header
// that the proxy strips as hop-by-hop or as Ratchet's own, or one that
// replaces the credentials or the body's framing) or let a retry act
// again (a 5xx under failed: the vendor may have acted, and a failed
// attempt is one a new key may repeat).
func TestADefinitionThatLosesTheKeyOrRepeatsACallIsRefused(t *testing.T) {
	base := func() vendors.Definition {
		return acme(vendors.DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64})
	}
	cases := []struct {
		name, path string
		edit       func(d *vendors.Definition)
	}{
		{"5xx failed", "outcome.failed[1]", func(d *vendors.Definition) {
			d.Outcome = vendors.OutcomeRules{Unknown: []string{"408"}, Failed: []string{"4xx", "5xx"}}
		}},
		{"500 failed", "outcome.failed[0]", func(d *vendors.Definition) { d.Outcome = vendors.OutcomeRules{Failed: []string{"500"}} }},
		{"503 failed, in upper case", "outcome.failed[0]", func(d *vendors.Definition) { d.Outcome = vendors.OutcomeRules{Failed: []string{"5XX"}} }},
	}
	for _, h := range []string{"Connection", "Keep-Alive", "Transfer-Encoding", "TE", "Upgrade", "Proxy-Authorization", "Trailer",
		"Ratchet-Idempotency-Key", "ratchet-group-key", "Authorization", "Host", "Content-Length", "Content-Type"} {
		cases = append(cases, struct {
			name, path string
			edit       func(d *vendors.Definition)
		}{"key header " + h, "key.name", func(d *vendors.Definition) { d.Key.Name = h }})
	}
	for _, c := range cases {
		d := base()
		c.edit(&d)
		_, errs := vendors.Compile(d, nil)
		var paths []string
		for _, e := range errs {
			paths = append(paths, e.Path)
		}
		if diff := cmp.Diff([]string{c.path}, paths); diff != "" {
			t.Errorf("%s: the errors' fields (-want +got):\n%s", c.name, diff)
		}
	}
	ok := base()
	ok.Outcome = vendors.OutcomeRules{Succeeded: []string{"2xx", "503"}, Unknown: []string{"5xx"}}
	if _, errs := vendors.Compile(ok, nil); errs != nil {
		t.Errorf("a 503 the vendor documents as done, under succeeded: %+v", errs)
	}
}

// TestADeclaredVendorsBodyKeyAndAccountAreReadAsTheVendorWould: the body
// key in another case is refused (a vendor matching names in any case
// would take it, after the key Ratchet stamps: the caller's raw key would
// reach it), as is the key or the account in the query string (merged
// into the body by some servers); a numeric account field scopes the key
// as its text.
func TestADeclaredVendorsBodyKeyAndAccountAreReadAsTheVendorWould(t *testing.T) {
	d := acme(vendors.DefinedKey{In: "body", Name: "idempotency_key", MaxLength: 64})
	d.Account = &vendors.Account{Field: "profile.id"}
	v := compiled(t, d)
	classify := func(query, body string) vendors.Effect {
		e, _ := v.Classify(&vendors.Request{Method: "POST", Path: "/v1/charges", Query: query,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)})
		return e
	}
	if e := classify("", `{"amount": 100, "IDEMPOTENCY_KEY": "mine"}`); e.Refuse == "" {
		t.Error("a body key in upper case is not refused")
	}
	if e := classify("idempotency_key=mine", `{"amount": 100}`); e.Refuse == "" {
		t.Error("the key in the query string is not refused")
	}
	if e := classify("Profile%5Bid%5D=p_2", `{"amount": 100, "profile": {"id": "p_1"}}`); e.Refuse == "" {
		t.Error("the account in the query string is not refused")
	}
	if e := classify("expand=customer", `{"amount": 100}`); e.Refuse != "" {
		t.Errorf("a query naming no field Ratchet reads is refused: %s", e.Refuse)
	}
	if e := classify("", `{"amount": 100, "profile": {"id": 123}}`); e.Merchant != "123" {
		t.Errorf("a numeric account field scopes as %q, want 123", e.Merchant)
	}
}
