package vendors_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/adyen"
	"github.com/ratchet-mcp/ratchet/vendors/all"
	"github.com/ratchet-mcp/ratchet/vendors/checkout"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
	"github.com/ratchet-mcp/ratchet/vendors/square"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
)

// fixture returns one file of testdata/<vendor>.txtar.
func fixture(t testing.TB, vendor, name string) []byte {
	t.Helper()
	a, err := txtar.ParseFile("testdata/" + vendor + ".txtar")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range a.Files {
		if f.Name == name {
			return []byte(strings.TrimSpace(string(f.Data)))
		}
	}
	t.Fatalf("no fixture %s in %s.txtar", name, vendor)
	return nil
}

func TestClassify(t *testing.T) {
	cases := []struct {
		vendor, method, path, fixture string
		header                        http.Header
		effect                        bool
		effectType                    string // the operation (stripe.refunds.create); TestEffectTypeTable checks the types
		money                         *vendors.Money
		counterparty, callerKey       string
		keyLoc                        vendors.Location
		keyName                       string
		keyMax                        int
	}{
		{vendor: "stripe", method: "POST", path: "/v1/payment_intents", fixture: "payment_intent.create.req", header: http.Header{"Idempotency-Key": {"caller-1"}},
			effect: true, effectType: "stripe.payment_intents.create", money: &vendors.Money{2000, "USD"}, counterparty: "cus_NeGfPRiPKxeBi1", callerKey: "caller-1", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/payment_intents", fixture: "destination.create.req",
			effect: true, effectType: "stripe.payment_intents.create", money: &vendors.Money{1000, "USD"}, counterparty: "acct_1MtJUT2eZvKYlo2C", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/charges", fixture: "jpy.create.req",
			effect: true, effectType: "stripe.charges.create", money: &vendors.Money{500, "JPY"}, keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/refunds", fixture: "refund.create.req", // no currency: no cost
			effect: true, effectType: "stripe.refunds.create", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/payment_intents/pi_1/confirm",
			effect: true, effectType: "stripe.payment_intents.confirm", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/customers/cus_1", effect: true, effectType: "stripe.customers.update", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/customers/cus_1/sources", effect: true, effectType: "stripe.customers.sources.create", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "POST", path: "/v1/checkout/sessions", effect: true, effectType: "stripe.checkout_sessions.create", keyLoc: vendors.InHeader, keyName: "Idempotency-Key", keyMax: 255},
		{vendor: "stripe", method: "DELETE", path: "/v1/customers/cus_1", effect: true, effectType: "stripe.customers.delete"}, // v1 DELETE takes no key
		{vendor: "stripe", method: "GET", path: "/v1/payment_intents/pi_1"},
		{vendor: "stripe", method: "POST", path: "/health"},

		{vendor: "square", method: "POST", path: "/v2/payments", fixture: "payment.create.req",
			effect: true, effectType: "square.payments.create", money: &vendors.Money{1000, "USD"}, counterparty: "W92WH6P11H4Z77CTET0RNTGFW8",
			callerKey: "7b0f3ec5-086a-4871-8f13-3c81b3875218", keyLoc: vendors.InBody, keyName: "idempotency_key", keyMax: 45},
		{vendor: "square", method: "POST", path: "/v2/refunds", fixture: "refund.create.req",
			effect: true, effectType: "square.refunds.create", money: &vendors.Money{1000, "USD"}, callerKey: "9b7f2dcf-49da-4411-b23e-a2d6af21333a", keyLoc: vendors.InBody, keyName: "idempotency_key", keyMax: 45},
		{vendor: "square", method: "POST", path: "/v2/orders/o_1/pay", effect: true, effectType: "square.orders.pay", keyLoc: vendors.InBody, keyName: "idempotency_key", keyMax: 192},
		{vendor: "square", method: "POST", path: "/v2/payments/cancel", fixture: "cancel_by_key.req", effect: true, effectType: "square.payments.cancel_by_idempotency_key"},
		{vendor: "square", method: "POST", path: "/v2/payments/p_1/complete", effect: true, effectType: "square.payments.complete"},
		{vendor: "square", method: "POST", path: "/v2/loyalty/accounts", effect: true, effectType: "square.loyalty.post"},
		{vendor: "square", method: "POST", path: "/v2/orders/search"},
		{vendor: "square", method: "POST", path: "/v2/orders/calculate"},
		{vendor: "square", method: "GET", path: "/v2/payments"},

		{vendor: "adyen", method: "POST", path: "/v71/payments", fixture: "payment.create.req", header: http.Header{"Idempotency-Key": {"c-9"}},
			effect: true, effectType: "adyen.payments.create", money: &vendors.Money{1000, "EUR"}, counterparty: "YOUR_UNIQUE_SHOPPER_ID", callerKey: "c-9", keyLoc: vendors.InHeader, keyName: "idempotency-key", keyMax: 64},
		{vendor: "adyen", method: "POST", path: "/checkout/v71/payments/993617895204576J/captures", fixture: "capture.req",
			effect: true, effectType: "adyen.payments.capture", money: &vendors.Money{2500, "EUR"}, keyLoc: vendors.InHeader, keyName: "idempotency-key", keyMax: 64},
		{vendor: "adyen", method: "POST", path: "/v71/sessions", effect: true, effectType: "adyen.sessions.create", keyLoc: vendors.InHeader, keyName: "idempotency-key", keyMax: 64},
		{vendor: "adyen", method: "GET", path: "/v71/paymentLinks/PL1"},
		{vendor: "adyen", method: "POST", path: "/v71/paymentMethods"},
		{vendor: "adyen", method: "POST", path: "/v71/payments/details", effect: true, effectType: "adyen.payments.details", keyLoc: vendors.InHeader, keyName: "idempotency-key", keyMax: 64},

		{vendor: "paypal", method: "POST", path: "/v2/checkout/orders", fixture: "order.create.req", header: http.Header{"Paypal-Request-Id": {"pp-1"}},
			effect: true, effectType: "paypal.orders.create", money: &vendors.Money{10000, "USD"}, counterparty: "2P8X5VBLT4T4S", callerKey: "pp-1", keyLoc: vendors.InHeader, keyName: "PayPal-Request-Id", keyMax: 108},
		{vendor: "paypal", method: "POST", path: "/v2/payments/captures/2GG279541U471931P/refund", fixture: "refund.req",
			effect: true, effectType: "paypal.captures.refund", money: &vendors.Money{1099, "USD"}, keyLoc: vendors.InHeader, keyName: "PayPal-Request-Id", keyMax: 108},
		{vendor: "paypal", method: "POST", path: "/v2/checkout/orders/5O190127TN364715T/capture",
			effect: true, effectType: "paypal.orders.capture", keyLoc: vendors.InHeader, keyName: "PayPal-Request-Id", keyMax: 108},

		{vendor: "paypal", method: "POST", path: "/v1/oauth2/token"},
		{vendor: "checkout", method: "POST", path: "/payments", fixture: "payment.create.req",
			effect: true, effectType: "checkout.payments.create", money: &vendors.Money{6540, "USD"}, counterparty: "cus_udst2tfldj6upmye2reztkmm4i", keyLoc: vendors.InHeader, keyName: "Cko-Idempotency-Key"},
		{vendor: "checkout", method: "POST", path: "/payments/pay_1/refunds",
			effect: true, effectType: "checkout.payments.refund", keyLoc: vendors.InHeader, keyName: "Cko-Idempotency-Key"},
	}
	for _, c := range cases {
		t.Run(c.vendor+" "+c.method+" "+c.path, func(t *testing.T) {
			v, ok := all.Lookup(c.vendor)
			if !ok {
				t.Fatalf("vendor %s unknown", c.vendor)
			}
			r := &vendors.Request{Method: c.method, Path: c.path, Header: c.header}
			if r.Header == nil {
				r.Header = http.Header{}
			}
			if c.fixture != "" {
				r.Body = fixture(t, c.vendor, c.fixture)
			}
			e, isEffect := v.Classify(r)
			if isEffect != c.effect {
				t.Fatalf("effect = %v, want %v", isEffect, c.effect)
			}
			if !c.effect {
				return
			}
			if e.Operation != c.effectType || e.Counterparty != c.counterparty || e.CallerKey != c.callerKey {
				t.Fatalf("got %+v", e)
			}
			if (e.Money == nil) != (c.money == nil) || (e.Money != nil && *e.Money != *c.money) {
				t.Fatalf("money %+v, want %+v", e.Money, c.money)
			}
			if e.Key.Location != c.keyLoc || e.Key.Name != c.keyName || e.Key.MaxLen != c.keyMax {
				t.Fatalf("key rule %+v", e.Key)
			}
		})
	}
}

func TestOutcome(t *testing.T) {
	cases := []struct {
		vendor  string
		status  int
		header  http.Header
		fixture string
		want    vendors.Result
		ref     string
	}{
		{"stripe", 200, nil, "payment_intent.resp", vendors.Succeeded, "pi_3MtwBwLkdIwHu7ix28a3tqPa"},
		{"stripe", 200, http.Header{"Idempotent-Replayed": {"true"}}, "payment_intent.resp", vendors.Succeeded, "pi_3MtwBwLkdIwHu7ix28a3tqPa"},
		{"stripe", 402, nil, "card_declined.resp", vendors.Failed, "pi_3MtwBwLkdIwHu7ix1IGU1ueo"},
		{"stripe", 409, nil, "key_in_use.resp", vendors.Unknown, ""},
		{"stripe", 400, nil, "idempotency_mismatch.resp", vendors.Failed, ""},
		{"stripe", 429, nil, "rate_limited.resp", vendors.Failed, ""},
		{"stripe", 500, nil, "api_error.resp", vendors.Unknown, ""},
		{"stripe", 502, nil, "", vendors.Unknown, ""},
		{"square", 200, nil, "payment.resp", vendors.Succeeded, "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY"},
		{"square", 200, nil, "refund.resp", vendors.Succeeded, "R2B3Z8WMVt3EAmzYWLZvz7Y69EbZY_KlWP8IC1irjjjjjjjjjjjjjjjjjjjjj"},
		{"square", 402, nil, "declined.resp", vendors.Failed, "KkAkhdMsgzn59SM8A89WgKwekxLZY"},
		{"square", 400, nil, "reused.resp", vendors.Failed, ""},
		{"square", 500, nil, "internal.resp", vendors.Unknown, ""},
		{"adyen", 200, nil, "authorised.resp", vendors.Succeeded, "993617895204576J"},
		{"adyen", 200, nil, "refused.resp", vendors.Failed, "993617895215577D"},
		{"adyen", 201, nil, "capture.resp", vendors.Succeeded, "JDD6LKT8MBLZNN84"},
		{"adyen", 422, nil, "in_progress.resp", vendors.Unknown, ""},
		{"adyen", 409, nil, "in_progress.resp", vendors.Unknown, ""},
		{"adyen", 503, nil, "store_down.resp", vendors.Failed, ""},
		{"adyen", 422, nil, "validation.resp", vendors.Failed, "8816178914079738"},
		{"adyen", 422, http.Header{"Transient-Error": {"true"}}, "validation.resp", vendors.Unknown, "8816178914079738"},
		{"adyen", 500, nil, "", vendors.Unknown, ""},
		{"paypal", 201, nil, "order.resp", vendors.Succeeded, "5O190127TN364715T"},
		{"paypal", 422, nil, "unprocessable.resp", vendors.Failed, ""},
		{"checkout", 201, nil, "approved.resp", vendors.Succeeded, "pay_mbabizu24mvu3mela5njyhpit4"},
		{"checkout", 201, nil, "declined.resp", vendors.Failed, "pay_y3oqhf46pyzuxjbcn2giaqnb44"},
		{"checkout", 422, nil, "invalid.resp", vendors.Failed, ""},
		{"checkout", 409, nil, "", vendors.Unknown, ""},
	}
	for _, c := range cases {
		t.Run(c.vendor+" "+c.fixture, func(t *testing.T) {
			v, _ := all.Lookup(c.vendor)
			r := &vendors.Response{Status: c.status, Header: c.header}
			if r.Header == nil {
				r.Header = http.Header{}
			}
			if c.fixture != "" {
				r.Body = fixture(t, c.vendor, c.fixture)
			}
			o := v.Outcome(r)
			if o.Result != c.want || o.VendorReference != c.ref {
				t.Fatalf("%d: got %+v, want %s %q", c.status, o, c.want, c.ref)
			}
			if o.Result != vendors.Succeeded && o.Reason == "" && c.fixture != "" {
				t.Fatalf("no reason for %+v", o)
			}
		})
	}
	if o := vendors.TransportFailure(errTimeout{}); o.Result != vendors.Unknown {
		t.Fatalf("timeout: %+v", o)
	}
}

type errTimeout struct{}

func (errTimeout) Error() string { return "i/o timeout" }

func TestMoney(t *testing.T) {
	rates := map[string]int64{"usd": 1_000_000, "eur": 1_080_000, "jpy": 6_700, "kwd": 3_250_000}
	cases := []struct {
		m    vendors.Money
		want int64
		ok   bool
	}{
		{vendors.Money{2000, "USD"}, 20_000_000, true},
		{vendors.Money{1000, "EUR"}, 10_800_000, true},
		{vendors.Money{500, "JPY"}, 3_350_000, true},
		{vendors.Money{1500, "KWD"}, 4_875_000, true},
		{vendors.Money{1, "usd"}, 10_000, true},
		{vendors.Money{100, "GBP"}, 0, false},     // no rate: no cost
		{vendors.Money{-5, "USD"}, 0, false},      // negative
		{vendors.Money{1 << 62, "USD"}, 0, false}, // overflows
	}
	for _, c := range cases {
		got, ok := c.m.Micros(rates)
		if got != c.want || ok != c.ok {
			t.Errorf("%+v: %d %v, want %d %v", c.m, got, ok, c.want, c.ok)
		}
	}
	dec := []struct {
		s, cur string
		minor  int64
		ok     bool
	}{
		{"100.00", "USD", 10000, true}, {"10.99", "usd", 1099, true}, {"7", "USD", 700, true}, {"0.5", "USD", 50, true},
		{"1500", "JPY", 1500, true}, {"1.234", "KWD", 1234, true},
		{"1.5", "JPY", 0, false}, {"1.234", "USD", 0, false}, {"-1.00", "USD", 0, false}, {"1e3", "USD", 0, false},
		{"", "USD", 0, false}, {".", "USD", 0, false}, {"1.", "USD", 0, false}, {"99999999999999999999", "USD", 0, false},
	}
	for _, c := range dec {
		m, err := vendors.ParseDecimal(c.s, c.cur)
		if (err == nil) != c.ok || (c.ok && m.Minor != c.minor) {
			t.Errorf("ParseDecimal(%q, %s) = %+v, %v", c.s, c.cur, m, err)
		}
	}
}

func TestStamp(t *testing.T) {
	h := http.Header{"Idempotency-Key": {"caller"}}
	body, err := vendors.Stamp(stripe.Vendor{}.KeyRule(), h, []byte("amount=1"), "ratchet-key")
	if err != nil || h.Get("Idempotency-Key") != "ratchet-key" || string(body) != "amount=1" {
		t.Fatalf("header stamp: %q %v %v", body, h, err)
	}
	sq := square.Vendor{}.KeyRule()
	cases := []struct{ in, want string }{
		{`{"amount_money": {"amount": 1, "currency": "USD"}, "idempotency_key" :  "old" , "note":"x"}`,
			`{"amount_money": {"amount": 1, "currency": "USD"}, "idempotency_key":"new" , "note":"x"}`},
		{`{"note":"x"}`, `{"idempotency_key":"new","note":"x"}`},
		{` {} `, ` {"idempotency_key":"new"} `},
		{`{"nested":{"idempotency_key":"keep"}}`, `{"idempotency_key":"new","nested":{"idempotency_key":"keep"}}`},
	}
	for _, c := range cases {
		got, err := vendors.Stamp(sq, http.Header{}, []byte(c.in), "new")
		if err != nil || string(got) != c.want {
			t.Errorf("stamp %s = %s, %v; want %s", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{``, `[]`, `{"a":`, `{"idempotency_key":"a","idempotency_key":"b"}`, `{} {}`, `"x"`} {
		if got, err := vendors.Stamp(sq, http.Header{}, []byte(bad), "new"); err == nil {
			t.Errorf("stamp %q = %q, want an error", bad, got)
		}
	}
	// The documented Square request keeps every other byte.
	orig := fixture(t, "square", "payment.create.req")
	got, err := vendors.Stamp(sq, http.Header{}, orig, "0f1e2d3c-0000-8000-8000-000000000000")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Replace(string(got), `"idempotency_key":"0f1e2d3c-0000-8000-8000-000000000000"`, `"idempotency_key": "7b0f3ec5-086a-4871-8f13-3c81b3875218"`, 1) != string(orig) {
		t.Fatalf("stamping disturbed the body:\n%s", got)
	}
}

func TestErrorBodies(t *testing.T) {
	for _, name := range []string{"stripe", "square", "adyen", "paypal", "checkout", "acme"} {
		v, _ := all.Lookup(name)
		b := v.Refusal(403, "ratchet_denied", "Ratchet denied this request: budget exceeded").Body
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(string(b), "budget exceeded") {
			t.Fatalf("%s: message missing: %s", name, b)
		}
	}
	if got := (square.Vendor{}).Refusal(403, "ratchet_denied", "no").Body; !strings.Contains(string(got), `"code":"RATCHET_DENIED"`) {
		t.Fatalf("square error %s", got)
	}
}

// TestRefusalsEachSDKShows: each refusal comes at a status whose body the
// vendor's official SDK reads, and stripe SDKs are told not to retry what
// can only be refused again.
func TestRefusalsEachSDKShows(t *testing.T) {
	cases := []struct {
		vendor, code string
		status       int
		wantStatus   int
		wantBody     string
		shouldRetry  string // Stripe-Should-Retry
	}{
		{"stripe", vendors.RefusalBlocked, 409, 409, `"code":"ratchet_blocked"`, "false"},
		{"stripe", vendors.RefusalInFlight, 409, 409, `"code":"ratchet_in_flight"`, ""}, // worth a retry after a moment
		{"stripe", vendors.RefusalUnknown, 504, 504, `"type":"invalid_request_error"`, "false"},
		{"stripe", vendors.RefusalDuplicate, 409, 409, `ratchet_duplicate`, "false"},
		{"stripe", vendors.RefusalConflict, 400, 400, `"type":"idempotency_error"`, ""},
		{"stripe", "ratchet_denied", 403, 403, `"code":"ratchet_denied"`, ""},
		{"square", vendors.RefusalConflict, 400, 400, `"code":"IDEMPOTENCY_KEY_REUSED"`, ""},
		{"square", vendors.RefusalBlocked, 409, 409, `"code":"RATCHET_BLOCKED"`, ""},
		{"adyen", vendors.RefusalConflict, 400, 422, `"status":422`, ""},
		{"adyen", vendors.RefusalBlocked, 409, 409, `"status":409`, ""},
		{"paypal", vendors.RefusalBlocked, 409, 422, `"issue":"RATCHET_BLOCKED"`, ""},
		{"paypal", "ratchet_approval_required", 403, 422, `"name":"RATCHET_APPROVAL_REQUIRED"`, ""},
		{"paypal", "ratchet_body_too_large", 413, 422, `RATCHET_BODY_TOO_LARGE`, ""},
		{"paypal", "ratchet_cost_required", 400, 400, `RATCHET_COST_REQUIRED`, ""},
		{"paypal", vendors.RefusalConflict, 400, 422, `"issue":"PAYPAL_REQUEST_ID_PREVIOUSLY_USED"`, ""},
		{"paypal", vendors.RefusalUnknown, 504, 504, `RATCHET_UPSTREAM_UNKNOWN`, ""},
		{"checkout", vendors.RefusalInFlight, 409, 429, `"error_type":"ratchet_in_flight"`, ""},
		{"checkout", vendors.RefusalBlocked, 409, 422, `"error_type":"ratchet_blocked"`, ""},
		{"checkout", "ratchet_denied", 403, 422, `"error_type":"ratchet_denied"`, ""},
		{"checkout", vendors.RefusalUnknown, 502, 504, `"error_type":"ratchet_upstream_unknown"`, ""},
		{"checkout", vendors.RefusalConflict, 400, 422, `"error_type":"request_invalid"`, ""},
	}
	for _, c := range cases {
		v, _ := all.Lookup(c.vendor)
		r := v.Refusal(c.status, c.code, "Ratchet: the message")
		if r.Status != c.wantStatus || !strings.Contains(string(r.Body), c.wantBody) || !strings.Contains(string(r.Body), "Ratchet: the message") ||
			r.Header.Get("Stripe-Should-Retry") != c.shouldRetry {
			t.Errorf("%s %s %d: %d %v %s", c.vendor, c.code, c.status, r.Status, r.Header, r.Body)
		}
	}
}

// TestWhoseCallItIs: the caller's key, whether an SDK minted it, the
// account a header names, the merchant a body names, the credential that
// scopes keys (a static secret, named merchant or not; never a refreshed
// OAuth token), and the owner of the answer where only an OAuth token says
// whose call it is.
func TestWhoseCallItIs(t *testing.T) {
	cases := []struct {
		name, vendor, path, body     string
		header                       http.Header
		key                          string
		fromSDK                      bool
		scope, merchant, cred, owner string
	}{
		{"stripe, caller's key", "stripe", "/v1/payment_intents", "amount=1&currency=usd",
			http.Header{"Idempotency-Key": {"order-1"}, "Authorization": {"Bearer sk_test_1"}}, "order-1", false, "", "", "Bearer sk_test_1", ""},
		{"stripe-go's key", "stripe", "/v1/payment_intents", "amount=1&currency=usd",
			http.Header{"Idempotency-Key": {"1764581234567890123_Ab-_9z"}}, "1764581234567890123_Ab-_9z", true, "", "", "", ""},
		{"stripe-node's retry key", "stripe", "/v1/refunds", "charge=ch_1",
			http.Header{"Idempotency-Key": {"stripe-node-retry-7a5d4d1e-2c1a-4b7e-9f62-1b1e2f3a4b5c"}}, "stripe-node-retry-7a5d4d1e-2c1a-4b7e-9f62-1b1e2f3a4b5c", true, "", "", "", ""},
		{"stripe account", "stripe", "/v1/payment_intents", "", http.Header{"Stripe-Account": {"acct_1"}}, "", false, "acct_1", "", "", ""},
		{"stripe context", "stripe", "/v1/payment_intents", "", http.Header{"Stripe-Context": {"acct_1"}}, "", false, "\nStripe-Context=\"acct_1\"", "", "", ""},
		{"stripe account and context", "stripe", "/v1/payment_intents", "", http.Header{"Stripe-Account": {"acct_1"}, "Stripe-Context": {"acct_2"}},
			"", false, "\nStripe-Account=\"acct_1\"\nStripe-Context=\"acct_2\"", "", "", ""},
		{"square location", "square", "/v2/payments", `{"idempotency_key":"k","location_id":"L1"}`,
			http.Header{"Authorization": {"Bearer EAAA1"}}, "k", false, "", "location=L1", "", ""},
		{"square, no location", "square", "/v2/refunds", `{"idempotency_key":"k","payment_id":"p"}`,
			http.Header{"Authorization": {"Bearer EAAA1"}}, "k", false, "", "", "", "Bearer EAAA1"},
		{"square order location", "square", "/v2/orders", `{"idempotency_key":"k","order":{"location_id":"L2"}}`, nil, "k", false, "", "location=L2", "", ""},
		{"adyen merchant", "adyen", "/v71/payments", `{"merchantAccount":"M1"}`,
			http.Header{"X-Api-Key": {"AQE1"}, "Idempotency-Key": {"k"}}, "k", false, "", "merchantAccount=M1", "AQE1\x00", ""},
		{"adyen, no merchant", "adyen", "/v71/payments", `{}`, http.Header{"X-Api-Key": {"AQE1"}}, "", false, "", "", "AQE1\x00", ""},
		{"adyen oauth, no merchant", "adyen", "/v71/payments", `{}`, http.Header{"Authorization": {"Bearer tok"}}, "", false, "", "", "", "Bearer tok"},
		{"paypal assertion", "paypal", "/v2/checkout/orders", `{}`,
			http.Header{"Paypal-Auth-Assertion": {"eyJhbGciOiJub25lIn0.eyJpc3MiOiJjIiwicGF5ZXJfaWQiOiJQIn0."}, "Authorization": {"Bearer A21AA"}, "Paypal-Request-Id": {"k"}},
			"k", false, "auth_assertion=eyJhbGciOiJub25lIn0.eyJpc3MiOiJjIiwicGF5ZXJfaWQiOiJQIn0.", "", "", ""},
		{"paypal basic", "paypal", "/v2/checkout/orders", `{}`, http.Header{"Authorization": {"Basic Y2xpZW50OnNlY3JldA=="}}, "", false, "", "", "Basic Y2xpZW50OnNlY3JldA==", ""},
		{"paypal first party", "paypal", "/v2/checkout/orders", `{}`, http.Header{"Authorization": {"Bearer A21AA"}, "Paypal-Request-Id": {"k"}},
			"k", false, "", "", "", "Bearer A21AA"},
		{"checkout channel", "checkout", "/payments", `{"processing_channel_id":"pc_1"}`,
			http.Header{"Authorization": {"Bearer sk_sbox_1"}, "Cko-Idempotency-Key": {"k"}}, "k", false, "", "processing_channel_id=pc_1", "Bearer sk_sbox_1", ""},
		{"checkout oauth channel", "checkout", "/payments", `{"processing_channel_id":"pc_1"}`,
			http.Header{"Authorization": {"Bearer eyJhbGciOi"}}, "", false, "", "processing_channel_id=pc_1", "", ""},
		{"checkout secret key", "checkout", "/payments", `{}`, http.Header{"Authorization": {"Bearer sk_sbox_1"}}, "", false, "", "", "Bearer sk_sbox_1", ""},
		{"checkout oauth", "checkout", "/payments", `{}`, http.Header{"Authorization": {"Bearer eyJhbGciOi"}}, "", false, "", "", "", "Bearer eyJhbGciOi"},
	}
	for _, c := range cases {
		v, _ := all.Lookup(c.vendor)
		h := c.header
		if h == nil {
			h = http.Header{}
		}
		e, ok := v.Classify(&vendors.Request{Method: "POST", Path: c.path, Header: h, Body: []byte(c.body)})
		if !ok || e.CallerKey != c.key || e.KeyFromSDK != c.fromSDK || e.Scope != c.scope || e.Merchant != c.merchant ||
			e.Credential != c.cred || e.Owner != c.owner || e.Refuse != "" {
			t.Errorf("%s: %+v", c.name, e)
		}
	}
}

// TestAccountScopesAreInjective: no two selections of accounts share a
// scope. Stripe-Account "acct_1A context=acct_1B" (one odd value) and
// Stripe-Account acct_1A with Stripe-Context acct_1B were one scope.
func TestAccountScopesAreInjective(t *testing.T) {
	scope := func(h http.Header) string {
		e, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v1/payment_intents", Header: h, Body: []byte("amount=100&currency=usd")})
		return e.Scope
	}
	seen := map[string]string{}
	for _, h := range []http.Header{
		{"Stripe-Account": {"acct_1A context=acct_1B"}},
		{"Stripe-Account": {"acct_1A"}, "Stripe-Context": {"acct_1B"}},
		{"Stripe-Account": {"acct_1A"}},
		{"Stripe-Context": {"acct_1A"}},
		{"Stripe-Account": {"\nStripe-Context=\"acct_1A\""}},
		{"Stripe-Account": {"acct_1A", "acct_1B"}},
		{"Stripe-Account": {"acct_1A\nStripe-Account=\"acct_1B\""}},
		{},
	} {
		s := scope(h)
		if prev, ok := seen[s]; ok {
			t.Errorf("%v and %s share the scope %q", h, prev, s)
		}
		seen[s] = fmt.Sprint(h)
	}
}

// TestRepeatedFieldsAndHeadersAreRefused: a scalar form field, an account
// header, a credential or a caller's key sent twice is read one way by
// Ratchet and perhaps another by the vendor (Stripe's Rack keeps the last
// amount; Ratchet costed the first): such a request is refused, never
// costed or scoped by one value and sent with both. An array field
// (expand[]) may repeat. What is read is what Stripe reads: the last value.
func TestRepeatedFieldsAndHeadersAreRefused(t *testing.T) {
	e, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v1/payment_intents",
		Body: []byte("amount=100&currency=usd&amount=6000000")})
	if e.Refuse == "" || !strings.Contains(e.Refuse, `"amount"`) || e.Money == nil || e.Money.Minor != 6000000 {
		t.Errorf("amount=100&...&amount=6000000: refuse %q, money %+v", e.Refuse, e.Money)
	}
	for _, c := range []struct {
		vendor, path, body string
		header             http.Header
		refused            bool
	}{
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd&expand[]=a&expand[]=b", nil, false},
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd&customer=cus_1&customer=cus_2", nil, true},
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd;amount=6000000", nil, true}, // a ';' Go does not split on
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd", http.Header{"Stripe-Account": {"acct_1A", "acct_1B"}}, true},
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd", http.Header{"Stripe-Context": {"acct_1A", "acct_1B"}}, true},
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd", http.Header{"Authorization": {"Bearer sk_1", "Bearer sk_2"}}, true},
		{"stripe", "/v1/payment_intents", "amount=1&currency=usd", http.Header{"Idempotency-Key": {"a", "b"}}, true},
		{"paypal", "/v2/checkout/orders", `{}`, http.Header{"Paypal-Auth-Assertion": {"x.A.", "x.B."}}, true},
		{"paypal", "/v2/checkout/orders", `{}`, http.Header{"Paypal-Request-Id": {"a", "b"}}, true},
		{"adyen", "/v71/payments", `{}`, http.Header{"X-Api-Key": {"k1", "k2"}}, true},
		{"checkout", "/payments", `{}`, http.Header{"Authorization": {"Bearer sk_1", "Bearer sk_2"}}, true},
		{"square", "/v2/payments", `{}`, http.Header{"Authorization": {"Bearer a", "Bearer b"}}, true},
	} {
		v, _ := all.Lookup(c.vendor)
		h := c.header
		if h == nil {
			h = http.Header{}
		}
		e, _ := v.Classify(&vendors.Request{Method: "POST", Path: c.path, Header: h, Body: []byte(c.body)})
		if (e.Refuse != "") != c.refused {
			t.Errorf("%s %s %v: refuse %q", c.vendor, c.body, c.header, e.Refuse)
		}
	}
	// Repeated headers scope by every value, should they ever be sent.
	a, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v1/payment_intents", Header: http.Header{"Stripe-Account": {"acct_1A", "acct_1B"}}})
	b, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v1/payment_intents", Header: http.Header{"Stripe-Account": {"acct_1A", "acct_1C"}}})
	p1, _ := paypal.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v2/checkout/orders", Header: http.Header{"Paypal-Auth-Assertion": {"x.A.", "x.B."}}})
	p2, _ := paypal.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v2/checkout/orders", Header: http.Header{"Paypal-Auth-Assertion": {"x.A.", "x.C."}}})
	if a.Scope == b.Scope || p1.Scope == p2.Scope {
		t.Errorf("different account headers, one scope: stripe %q/%q, paypal %q/%q", a.Scope, b.Scope, p1.Scope, p2.Scope)
	}
	// A POST's parameters in the query string would be charged by Stripe
	// (Rack merges them) and not costed; a DELETE's are where the SDKs put
	// them.
	q, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/v1/payment_intents", Query: "amount=6000000", Header: http.Header{}, Body: []byte("amount=1&currency=usd")})
	d, _ := stripe.Vendor{}.Classify(&vendors.Request{Method: "DELETE", Path: "/v1/customers/cus_1", Query: "expand[0]=x", Header: http.Header{}})
	if q.Refuse == "" || d.Refuse != "" {
		t.Errorf("POST with a query: %q; DELETE with one: %q", q.Refuse, d.Refuse)
	}
}

// TestDuplicateJSONKeysAreRefused: JSON parsers disagree about a key sent
// twice (the first wins, the last wins, an error; .NET and Go match keys
// in any case), so a body with one, at any depth, is refused; so is one
// that is not exactly one JSON value (a lenient parser's trailing comma
// or second object would be charged and not costed).
func TestDuplicateJSONKeysAreRefused(t *testing.T) {
	for _, c := range []struct {
		body    string
		refused bool
	}{
		{``, false},
		{`{"merchantAccount":"A","total":{"value":1,"currency":"EUR"}}`, false},
		{`[{"op":"replace","path":"/a"},{"op":"add","path":"/a"}]`, false}, // PayPal's PATCH: the same keys in two objects
		{`{"merchantAccount":"A","x":1,"merchantAccount":"B"}`, true},
		{`{"amount":{"value":1,"currency":"EUR","value":6000000}}`, true},
		{`{"a":[{"b":1,"b":2}]}`, true},
		{`{"amount":1,"Amount":6000000}`, true},
		{`{"amount":1,"\u0061mount":6000000}`, true},
		{`{"kelvin":1,"\u212aelvin":2}`, true}, // K and the Kelvin sign fold alike
		{`{"amount":1}{"amount":6000000}`, true},
		{`{"amount":6000000,"currency":"USD",}`, true},
		{`{"amount":1`, true},
	} {
		for _, v := range []vendors.Vendor{square.Vendor{}, adyen.Vendor{}, paypal.Vendor{}, checkout.Vendor{}, stripe.Vendor{}} {
			path := map[string]string{"square": "/v2/payments", "adyen": "/v71/payments", "paypal": "/v2/checkout/orders",
				"checkout": "/payments", "stripe": "/v2/money_management/outbound_payments"}[v.Name()]
			e, ok := v.Classify(&vendors.Request{Method: "POST", Path: path, Header: http.Header{}, Body: []byte(c.body)})
			if !ok || (e.Refuse != "") != c.refused {
				t.Errorf("%s %s: refuse %q", v.Name(), c.body, e.Refuse)
			}
		}
	}
}

// TestCheckoutSecretKeyInAnyCaseScopes: the auth scheme is
// case-insensitive (RFC 9110 11.1), so "bearer sk_..." is a secret key
// and scopes the call; previous accounts send the bare key.
func TestCheckoutSecretKeyInAnyCaseScopes(t *testing.T) {
	for _, a := range []string{"bearer sk_sbox_abc", "BEARER sk_sbox_abc", "Bearer sk_sbox_abc", "sk_sbox_abc"} {
		e, _ := checkout.Vendor{}.Classify(&vendors.Request{Method: "POST", Path: "/payments",
			Header: http.Header{"Authorization": {a}}, Body: []byte(`{"amount":100,"currency":"USD"}`)})
		if e.Credential != a || e.Owner != "" {
			t.Errorf("%q: credential %q, owner %q", a, e.Credential, e.Owner)
		}
	}
}
