package vendors

// Stripe is api.stripe.com (v1).
//
// Sources: https://docs.stripe.com/api/idempotent_requests — header
// Idempotency-Key on every POST, at most 255 characters, keys may be pruned
// once at least 24 hours old, a replay returns the saved response.
type Stripe struct{}

var _ Vendor = Stripe{}

// Name implements Vendor.
func (Stripe) Name() string { return "stripe" }

// KeyRule implements Vendor.
func (Stripe) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "Idempotency-Key", MaxLen: 255, Enforced: true, RetentionHours: 24}
}
