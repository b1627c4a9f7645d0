package vendors

// Generic is the fallback for vendors Ratchet has no rules for: the key goes in
// an Idempotency-Key header (the IETF httpapi draft's name) and nothing
// promises that the vendor honours it, so Enforced is false.
type Generic struct{}

var _ Vendor = Generic{}

// Name implements Vendor.
func (Generic) Name() string { return "generic" }

// Hosts implements Vendor.
func (Generic) Hosts() []string { return nil }

// KeyRule implements Vendor.
func (Generic) KeyRule() KeyRule {
	return KeyRule{Location: InHeader, Name: "Idempotency-Key", MaxLen: 255}
}

// Classify implements Vendor: every mutating request is an effect.
func (g Generic) Classify(r *Request) (Effect, bool) { return Typed(g.classify(r)) }

func (g Generic) classify(r *Request) (Effect, bool) {
	if !Mutating(r.Method) {
		return Effect{}, false
	}
	return Effect{Operation: RestType("generic", r.Method, Segments(r.Path)), Key: g.KeyRule(),
		CallerKey: r.Header.Get("Idempotency-Key"), Credential: r.Header.Get("Authorization"),
		Refuse: SingleHeaders(r.Header, "Authorization", "Idempotency-Key")}, true
}

var idField = []string{"id"}

// Outcome implements Vendor with the common status rule.
func (Generic) Outcome(r *Response) Outcome {
	body := ReadFields(r.Body, idField)
	return Outcome{Result: ByStatus(r.Status), VendorReference: body.Str(0)}
}

// Refusal implements Vendor.
func (Generic) Refusal(status int, code, message string) Reply {
	return Reply{Status: status, Body: ErrorJSON(map[string]any{"error": map[string]any{"code": code, "message": message}})}
}
