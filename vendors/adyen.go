package vendors

// Adyen is the Checkout API (checkout-test.adyen.com / live endpoints).
//
// Sources: https://docs.adyen.com/development-resources/api-idempotency —
// header idempotency-key on POST, at most 64 characters, kept "for a minimum
// period of 7 days after first submission".
type Adyen struct{}

var _ Vendor = Adyen{}

// Name implements Vendor.
func (Adyen) Name() string { return "adyen" }

// KeyRule implements Vendor.
func (Adyen) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "idempotency-key", MaxLen: 64, Enforced: true, RetentionHours: 7 * 24}
}
