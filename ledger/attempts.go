package ledger

import (
	"context"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// AttemptKey is the vendor idempotency key Ratchet handed out with one
// attempt of an effect: what an operator searches the vendor's dashboard or
// API by to learn whether an attempt whose outcome is unknown happened. The
// proxy stamped it on the request it forwarded (when the vendor takes a
// key); an agent was handed it in the execute answer.
type AttemptKey struct {
	Attempt              int         `json:"attempt"`
	VendorIdempotencyKey vendors.Key `json:"vendor_idempotency_key"`
}

// AttemptKeys returns the vendor key of every attempt of an effect, oldest
// first; none for an effect that names no vendor. It is for operators
// only (no namespace: the admin API sees every namespace). An agent is
// never answered with it by this call: it holds the key of its own attempt
// from its execute answer, and another namespace's agent must not learn a
// key it could replay at the vendor.
//
// The keys are derived again (vendorKey), as the purge does to find their
// index entries: a change to the derivation must keep deriving the keys of
// attempts granted before it.
func (e *Engine) AttemptKeys(ctx context.Context, effectID string) ([]AttemptKey, error) {
	if err := checkText("effect_id", effectID, MaxIDLen, true); err != nil {
		return nil, err
	}
	var out []AttemptKey
	err := e.view(ctx, func(r Reader) error {
		rec, err := e.effectByID(r, "", effectID)
		if err != nil {
			return notFound(err, effectID)
		}
		for i, k := range e.attemptKeys(rec) {
			out = append(out, AttemptKey{Attempt: i + 1, VendorIdempotencyKey: k})
		}
		return nil
	})
	return out, err
}

// attemptKeys are the vendor keys of attempts 1 to rec.Attempt.
func (e *Engine) attemptKeys(rec *effectRec) []vendors.Key {
	if rec.Vendor == "" {
		return nil
	}
	ks := make([]vendors.Key, 0, rec.Attempt)
	for a := 1; a <= rec.Attempt; a++ {
		r := *rec
		r.Attempt = a
		ks = append(ks, e.vendorKey(&r))
	}
	return ks
}

// DimensionScope is the scope under which ceilings per dimension:<name>
// count the value: its keyed hash, as Budgets shows it. It lets an operator
// who knows a value (a counterparty) find its row; the value is hashed and
// dropped, never stored.
func (e *Engine) DimensionScope(name, value string) (string, error) {
	if !isDimName(name) {
		return "", invalidArg("dimension", "name %q must be lowercase letters, digits and _ (at most 63)", truncate(name, 64))
	}
	if err := checkText("value", value, MaxDimValueLen, true); err != nil {
		return "", err
	}
	return e.macs.keyedHash("dimension", name, value), nil
}
