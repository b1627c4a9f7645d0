package ledger

import (
	"context"
	"errors"
	"time"
)

// Request states. The MCP adapter answers a 2026-07-28 client's
// approval_required with an input_required result whose requestState it
// seals (AEAD) under a key derived from the server secret, and redeems
// each state at most once when the client retries with it: a state
// replayed, by the client or by anyone who saw it, is refused. The ledger
// holds only the redeemed states' ids, each under its expiry
// (kindRedeemed) so that those past it can be dropped; a state past its
// expiry is never redeemed (the adapter asks again instead), so dropping
// its id forgets nothing that could be replayed.

// StateKey is a 32-byte key derived from the server secret for purpose
// (e.g. "mcp-request-state"): the same on every replica that shares the
// secret, and telling nothing of the secret or of another purpose's key.
func (e *Engine) StateKey(purpose string) []byte {
	return e.macs.keyedSum("ratchet-state-key", purpose)
}

// ErrStateExpired is RedeemState's answer for a state past its expiry,
// which is never redeemed: the caller asks again instead.
var ErrStateExpired = errors.New("the request state has expired")

// maxStateID bounds a request state's id.
const maxStateID = 64

// pruneRedeemed is how many expired redeemed ids a redemption drops.
const pruneRedeemed = 16

// RedeemState records that the request state id, valid until expires, was
// used. It fails with invalid_argument (field requestState) when it was
// redeemed before, on this replica or another, and with ErrStateExpired
// (recording nothing) when it is past expires by the engine's clock; at
// most one of several redemptions at once succeeds.
func (e *Engine) RedeemState(ctx context.Context, id string, expires time.Time) error {
	if err := checkText("requestState", id, maxStateID, true); err != nil {
		return err
	}
	_, err := submit(ctx, e, func(t *opTxn, now time.Time) (any, error) {
		if !now.Before(expires) {
			return nil, ErrStateExpired
		}
		k := timeKey(kindRedeemed, expires, id)
		if _, err := t.Get(k); err == nil {
			return nil, invalidArg("requestState", "was already used: a requestState is redeemed once; call again without it")
		} else if !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		var old [][]byte
		err := t.Scan(prefix(kindRedeemed), nil, func(k, _ []byte) (bool, error) {
			if at, _, _ := timeKeyParts(k); !at.Before(now) || len(old) == pruneRedeemed {
				return false, nil
			}
			old = append(old, k)
			return true, nil
		})
		if err != nil {
			return nil, err
		}
		for _, k := range old {
			if err := t.Delete(k); err != nil {
				return nil, err
			}
		}
		return nil, t.Set(k, nil)
	})
	return err
}
