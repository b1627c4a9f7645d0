package ledger

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"time"
)

// Recovery claims. Same-key recovery (package recovery) sends an
// indeterminate attempt's request again with the same vendor key. Between
// its check that the attempt is still open and its send, an agent or
// operator could resolve the attempt failed and begin the next one, which
// the vendor executes; the resend of the first attempt's key would then
// execute too. So the recoverer claims the attempt first: while the claim
// holds (its ttl: the resend's timeout and a grace), the attempt cannot be
// settled failed by a resolve or a report, so no new attempt can begin;
// the vendor's own record (Settle) still settles it either way, since the
// vendor keeps that answer under the key and replays it to the resend.
// The claim is a key of its own (kindRecoveryClaim), never a field of the
// effect record, so it needs no new record format; it ends when released,
// when it expires, or when the effect is purged.

// ClaimRecovery claims effectID's attempt for a resend for ttl. It fails
// with invalid_state_transition unless the effect is indeterminate (a
// pending one whose lease ran out included) on that attempt, and with
// effect_not_found when there is no such effect. Claiming again renews it.
func (e *Engine) ClaimRecovery(ctx context.Context, effectID string, attempt int, ttl time.Duration) (*Effect, error) {
	if err := checkText("effect_id", effectID, MaxIDLen, true); err != nil {
		return nil, err
	}
	if attempt <= 0 {
		return nil, invalidArg("attempt", "must be > 0")
	}
	if ttl <= 0 || ttl > time.Hour {
		return nil, invalidArg("ttl", "must be between 0 and 1h")
	}
	eff, err := submit(ctx, e, func(t *opTxn, now time.Time) (*Effect, error) {
		rec, err := e.effectByID(t, "", effectID)
		if err != nil {
			return nil, notFound(err, effectID)
		}
		if err := e.expireLapsed(t, rec, now); err != nil {
			return nil, err
		}
		if rec.Attempt != attempt || rec.State != StateIndeterminate {
			return nil, newErr(CodeInvalidStateTransition, "effect %s is %s on attempt %d; only an indeterminate attempt can be recovered",
				rec.EffectID, rec.State, rec.Attempt)
		}
		// A halt pauses resends in its scope (halt.go): the recoverer keeps
		// the request and tries again later.
		if h, err := haltFor(t, rec.Namespace, rec.EffectType, rec.Operation, rec.AttemptAgent, rec.Vendor); err != nil || h != nil {
			if err != nil {
				return nil, err
			}
			return nil, haltedErr(h, "effect "+effectID+" is not resent while halted")
		}
		if err := t.Set(key(kindRecoveryClaim, effectID), claimValue(attempt, now.Add(ttl))); err != nil {
			return nil, err
		}
		view := rec.view(now)
		return &view, nil
	})
	if err != nil {
		return nil, err
	}
	return eff, nil
}

// ReleaseRecovery ends a claim on effectID's attempt, if it holds one.
func (e *Engine) ReleaseRecovery(ctx context.Context, effectID string, attempt int) error {
	if err := checkText("effect_id", effectID, MaxIDLen, true); err != nil {
		return err
	}
	_, err := submit(ctx, e, func(t *opTxn, now time.Time) (any, error) {
		k := key(kindRecoveryClaim, effectID)
		b, err := t.Get(k)
		if errors.Is(err, ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if a, _, ok := parseClaim(b); ok && a != attempt {
			return nil, nil // another attempt's
		}
		return nil, t.Delete(k)
	})
	return err
}

// recoveryClaimed refuses to settle rec's attempt failed while a resend of
// it may be in flight.
func recoveryClaimed(t *opTxn, rec *effectRec, now time.Time) error {
	b, err := t.Get(key(kindRecoveryClaim, rec.EffectID))
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	attempt, until, ok := parseClaim(b)
	if !ok || attempt != rec.Attempt || !now.Before(until) {
		return nil
	}
	return newErr(CodeInvalidStateTransition, "effect %s: a same-key recovery of attempt %d may be in flight at the vendor until %s; "+
		"settling it failed now could execute it twice. Try again after that (the recovery may settle it first)",
		rec.EffectID, attempt, until.Format(time.RFC3339))
}

func claimValue(attempt int, until time.Time) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(until.UnixNano()))
	return append(b, strconv.Itoa(attempt)...)
}

func parseClaim(b []byte) (attempt int, until time.Time, ok bool) {
	if len(b) < 9 {
		return 0, time.Time{}, false
	}
	n, err := strconv.Atoi(string(b[8:]))
	return n, time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))), err == nil
}
