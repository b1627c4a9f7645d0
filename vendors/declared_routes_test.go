package vendors

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestABadPathIsReportedOnceNotAsADuplicate: two routes whose paths share
// a bad segment ({customerId}: names are lowercase) get the segment's
// error each, and no claim that the second is the first's already (it was
// made, as both were cut short at the bad segment).
func TestABadPathIsReportedOnceNotAsADuplicate(t *testing.T) {
	reg, err := NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	_, errs := Compile(Definition{
		Name: "acme", Upstream: "https://api.acme.example",
		Key: DefinedKey{In: "header", Name: "Idempotency-Key", MaxLength: 64},
		Routes: []Route{
			{Method: "POST", Path: "/v2/customers/{customerId}/payments", EffectType: "payment.charge"},
			{Method: "POST", Path: "/v2/customers/{customerId}/subscriptions", EffectType: "payment.subscription"},
		},
	}, reg)
	want := []FieldError{
		{Path: "routes[0].path", Message: `"/v2/customers/{customerId}/payments": the segment "{customerId}" is not a literal path segment or {name}`},
		{Path: "routes[1].path", Message: `"/v2/customers/{customerId}/subscriptions": the segment "{customerId}" is not a literal path segment or {name}`},
	}
	if diff := cmp.Diff(want, errs); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}
