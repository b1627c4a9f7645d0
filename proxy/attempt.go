package proxy

import (
	"context"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
)

// Attempt names the gated attempt an outbound request carries out
// (outbound.Attempt, which package recovery reads).
type Attempt = outbound.Attempt

// WithAttempt returns ctx carrying a.
func WithAttempt(ctx context.Context, a Attempt) context.Context { return outbound.WithAttempt(ctx, a) }

// AttemptOf returns the attempt ctx carries, if any.
func AttemptOf(ctx context.Context) (Attempt, bool) { return outbound.AttemptOf(ctx) }
