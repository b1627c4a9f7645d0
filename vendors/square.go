package vendors

// Square is connect.squareup.com.
//
// Sources: Square's OpenAPI specification (square/connect-api-specification,
// api.json, CreatePaymentRequest and RefundPaymentRequest): the key is the
// JSON body field idempotency_key, 1 to 45 characters for payments and
// refunds (other endpoints allow 64 to 255, so 45 is the strictest and is
// used for every endpoint). Square documents no retention period
// (developer forum threads 28303 and 28309), hence RetentionHours 0.
type Square struct{}

var _ Vendor = Square{}

// Name implements Vendor.
func (Square) Name() string { return "square" }

// KeyRule implements Vendor.
func (Square) KeyRule() KeyRule {
	return KeyRule{Location: InBody, Name: "idempotency_key", MaxLen: 45, Enforced: true}
}
