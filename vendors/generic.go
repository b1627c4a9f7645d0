package vendors

// Generic is the fallback for vendors Ratchet has no rules for: the key goes in
// an Idempotency-Key header (the IETF httpapi draft's name) and nothing
// promises that the vendor honours it, so Enforced is false.
type Generic struct{}

var _ Vendor = Generic{}

// Name implements Vendor.
func (Generic) Name() string { return "generic" }

// KeyRule implements Vendor.
func (Generic) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "Idempotency-Key", MaxLen: 255}
}
