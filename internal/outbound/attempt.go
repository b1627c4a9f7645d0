package outbound

import "context"

// Attempt names the gated attempt an outbound request carries out. The
// proxy puts it in the request's context before forwarding, so a
// Transport (Options.Transport) can tell a gated call from a pass-through
// and knows whose it is without reading Ratchet's headers, which never go
// upstream: package recovery keeps the request it sees for same-key
// recovery.
type Attempt struct {
	Vendor   string
	EffectID string
	Attempt  int
	// VendorKey is the idempotency key stamped on the request; empty when
	// the endpoint takes none.
	VendorKey string
}

type attemptKey struct{}

// WithAttempt returns ctx carrying a.
func WithAttempt(ctx context.Context, a Attempt) context.Context {
	return context.WithValue(ctx, attemptKey{}, a)
}

// AttemptOf returns the attempt ctx carries, if any.
func AttemptOf(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(Attempt)
	return a, ok
}
