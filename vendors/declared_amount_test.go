package vendors

import (
	"net/http"
	"testing"
)

// TestADeclaredAmountRatchetCannotReadIsRefused: a route that names where
// its amount is must not let a call through uncounted because the amount
// is written in a way Ratchet does not read (a float or an exponent for
// minor units, a space, an exponent or a third decimal for major ones, a
// currency that is not a code, an amount without its currency): the vendor
// might read it (25000.0 is 25000 to many parsers) and the money would pass
// every ceiling. Such a request is refused, as one the vendor could read
// otherwise than Ratchet. A route without an amount, a call that names none
// and a negative minor amount (Increase's debits pull money in) are
// classified as before, without a cost.
func TestADeclaredAmountRatchetCannotReadIsRefused(t *testing.T) {
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	v, errs := Compile(Definition{
		Name: "acme", Upstream: "https://api.acme.example",
		Key: DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64},
		Routes: []Route{
			{Method: "POST", Path: "/minor", EffectType: "payment.payout",
				Amount: &AmountField{Field: "amount", Unit: "minor"}, Currency: &Field{Value: "USD"}},
			{Method: "POST", Path: "/major", EffectType: "payment.charge",
				Amount: &AmountField{Field: "amount.value", Unit: "major"}, Currency: &Field{Field: "amount.currency"}},
		},
	}, reg)
	if errs != nil {
		t.Fatal(errs)
	}
	cases := []struct {
		name, path, body string
		refused          bool
		minor            int64 // the amount read, when not refused; -1: none
	}{
		{"minor integer", "/minor", `{"amount": 25000}`, false, 25000},
		{"minor as a float", "/minor", `{"amount": 25000.0}`, true, 0},
		{"minor with an exponent", "/minor", `{"amount": 2.5e4}`, true, 0},
		{"minor as a decimal string", "/minor", `{"amount": "250.00"}`, true, 0},
		{"minor as an object", "/minor", `{"amount": {"value": 25000}}`, true, 0},
		{"minor negative (a debit)", "/minor", `{"amount": -25000}`, false, -1},
		{"minor absent", "/minor", `{"note": "x"}`, false, -1},
		{"major decimal", "/major", `{"amount": {"value": "500.00", "currency": "EUR"}}`, false, 50000},
		{"major number", "/major", `{"amount": {"value": 500, "currency": "EUR"}}`, false, 50000},
		{"major with an exponent", "/major", `{"amount": {"value": "5e2", "currency": "EUR"}}`, true, 0},
		{"major with a space", "/major", `{"amount": {"value": " 500.00", "currency": "EUR"}}`, true, 0},
		{"major with a third decimal", "/major", `{"amount": {"value": "500.001", "currency": "EUR"}}`, true, 0},
		{"major without its currency", "/major", `{"amount": {"value": "500.00"}}`, true, 0},
		{"major with a currency that is not a code", "/major", `{"amount": {"value": "500.00", "currency": "EURO"}}`, true, 0},
		{"major absent", "/major", `{"description": "x"}`, false, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ok := v.Classify(&Request{Method: "POST", Path: c.path, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(c.body)})
			if !ok {
				t.Fatal("not an effect")
			}
			if got := e.Refuse != ""; got != c.refused {
				t.Fatalf("refused = %v (%q), want %v", got, e.Refuse, c.refused)
			}
			if c.refused {
				return
			}
			got := int64(-1)
			if e.Money != nil {
				got = e.Money.Minor
			}
			if got != c.minor {
				t.Errorf("amount read = %d minor units, want %d", got, c.minor)
			}
		})
	}
}
