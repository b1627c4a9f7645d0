package ledger

import (
	"sort"
	"time"
)

// effectRec is the stored effect: the public view plus bookkeeping that is
// never shown as is.
type effectRec struct {
	Effect
	// Dimensions maps each dimension name to the keyed hash of its value.
	Dimensions   map[string]string `json:"dimensions,omitempty"`
	Reservations []reservation     `json:"reservations,omitempty"`
	// PriorApprovals are the ids of earlier approval requests of this
	// effect, whose index entries go when it is purged.
	PriorApprovals []string  `json:"prior_approvals,omitempty"`
	GrantedAt      time.Time `json:"granted_at,omitzero"`
	// UnreportedAt is set while the effect counts as an unreported expiry.
	UnreportedAt time.Time `json:"unreported_at,omitzero"`
	// RetainedAt is when retention starts counting for it (zero: kept);
	// see retention.
	RetainedAt time.Time `json:"retained_at,omitzero"`
	// AttemptAgent is the agent that began the current attempt, which a
	// token fixed to another agent may not report or resolve (see owner).
	AttemptAgent string `json:"attempt_agent,omitempty"`
	// UnreportedAgent is the agent UnreportedAt counts against: the one
	// whose attempt's lease ran out.
	UnreportedAgent string `json:"unreported_agent,omitempty"`
	// Records are stored in the binary form of codec.go; records
	// written as JSON (segmentio's encoding/json, which ignores omitzero:
	// zero times were written out and read back as zero) are still read.
	//
	// stored is the state as last written, so a write knows which state
	// count to move.
	stored State
}

// reservation is what one attempt holds in one ceiling counter.
type reservation struct {
	Counter string `json:"counter"`
	Bucket  int64  `json:"bucket"`
	Amount  int64  `json:"amount"`
	Count   int64  `json:"count"`
}

// view is the public Effect as of now: a pending effect whose lease has run
// out shows as indeterminate even before the reaper has written it, and a
// pending approval past its expiry shows as expired.
func (r *effectRec) view(now time.Time) Effect {
	v := r.Effect
	if v.State == StatePending && v.LeaseExpiresAt != nil && !now.Before(*v.LeaseExpiresAt) {
		v.State, v.Reason, v.Since = StateIndeterminate, ReasonLeaseExpired, v.LeaseExpiresAt
	}
	if v.Approval != nil {
		a := *v.Approval
		if a.State == ApprovalPending && !now.Before(a.ExpiresAt) {
			a.State = ApprovalExpired
		}
		a.Compensation = r.Compensation
		v.Approval = &a
	}
	v.DimensionNames = nil
	for name := range r.Dimensions {
		v.DimensionNames = append(v.DimensionNames, name)
	}
	sort.Strings(v.DimensionNames)
	return v
}

// effectByKey loads the effect of an idempotency key.
func (e *Engine) effectByKey(r Reader, ns, idemKey string) (*effectRec, error) {
	id, err := r.Get(key(kindIdemKey, ns, idemKey))
	if err != nil {
		return nil, err
	}
	return e.effectByID(r, ns, string(id))
}

// effectByID loads an effect; a namespace other than "" must match, and a
// mismatch is reported as not found so namespaces cannot probe each other.
func (e *Engine) effectByID(r Reader, ns, id string) (*effectRec, error) {
	return readEffect(r, ns, id)
}

// readEffect is effectByID, for code that has no engine at hand.
func readEffect(r Reader, ns, id string) (*effectRec, error) {
	rec := cachedEffect(r, id)
	if rec == nil {
		b, err := r.Get(key(kindEffect, id))
		if err != nil {
			return nil, err
		}
		rec = &effectRec{}
		if err := decodeEffect(b, rec); err != nil {
			return nil, err
		}
		rec.stored = rec.State
		if t, ok := r.(*opTxn); ok && t.cache != nil {
			t.cache.recs.put(id, rec.clone())
		}
	}
	if ns != "" && rec.Namespace != ns {
		return nil, ErrNotFound
	}
	return rec, nil
}

// cachedEffect returns a writable copy of an effect this writer op, or an
// earlier one, wrote; nil when it must be read from the store.
func cachedEffect(r Reader, id string) *effectRec {
	t, ok := r.(*opTxn)
	if !ok || t.cache == nil {
		return nil
	}
	if rec, ok := t.recs[id]; ok {
		if rec == nil {
			return nil // deleted by this op: the store read answers not found
		}
		return rec.clone()
	}
	if rec, ok := t.cache.recs.get(id); ok {
		return rec.clone()
	}
	return nil
}

// putEffect writes an effect and, on first write, its indexes.
func (e *Engine) putEffect(t *opTxn, rec *effectRec, now time.Time) error {
	first := rec.UpdatedAt.IsZero()
	rec.UpdatedAt = now
	retain := rec.retention(now) // before the stored state moves on
	if first {
		idx := [][]byte{
			key(kindIdemKey, rec.Namespace, rec.IdempotencyKey),
			key(kindNamespace, rec.Namespace, rec.EffectID),
		}
		if rec.RunID != "" {
			idx = append(idx, key(kindRun, rec.Namespace, rec.RunID, rec.EffectID))
		}
		for i, k := range idx {
			val := []byte(nil)
			if i == 0 {
				val = []byte(rec.EffectID)
			}
			if err := t.Set(k, val); err != nil {
				return err
			}
		}
		if rec.GroupKey != "" {
			if err := e.joinGroup(t, rec); err != nil {
				return err
			}
		}
	}
	if rec.State != rec.stored {
		if err := moveStateCount(t, rec.stored, rec.State); err != nil {
			return err
		}
		rec.stored = rec.State
	}
	// No index entry follows RetainedAt: Purge finds due effects by their
	// ids (purgeFinished). An entry a ledger written before holds is left
	// to the sweep of that index, which drops one its effect no longer owns.
	rec.RetainedAt = retain
	b, err := encodeEffect(rec)
	if err != nil {
		return err
	}
	if err := t.Set(key(kindEffect, rec.EffectID), b); err != nil {
		return err
	}
	t.remember(rec.EffectID, rec)
	return nil
}

// retention is the time from which retention counts for rec, or zero
// while it must stay: a finished
// effect from when it first finished; an approval request or an unused
// grant from when it expires (nothing was done or reserved, and the next
// begin would ask again anyway). Pending and indeterminate effects stay
// until someone acts, and so does an effect still counted as an unreported
// expiry (reported late by its agent): only an operator clears that.
func (r *effectRec) retention(now time.Time) time.Time {
	switch {
	case !r.UnreportedAt.IsZero():
		return time.Time{}
	case r.State.terminal() && r.stored.terminal() && !r.RetainedAt.IsZero():
		return r.RetainedAt
	case r.State.terminal():
		return now
	case (r.State == StateAwaitingApproval || r.State == StateApproved) && r.Approval != nil:
		return r.Approval.ExpiresAt
	}
	return time.Time{}
}

// remember notes a record this op wrote (nil: deleted), for the writer's
// cache.
func (t *opTxn) remember(id string, rec *effectRec) {
	if t.cache == nil {
		return
	}
	if t.recs == nil {
		t.recs = map[string]*effectRec{}
	}
	if rec != nil {
		rec = rec.clone()
	}
	t.recs[id] = rec
}
