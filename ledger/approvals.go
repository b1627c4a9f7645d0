package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// ListApprovals returns approvals in a state (pending, approved, rejected,
// expired; empty for all), oldest request first. An empty namespace lists
// every namespace.
func (e *Engine) ListApprovals(ctx context.Context, namespace, state string) ([]Approval, error) {
	switch state {
	case "", ApprovalPending, ApprovalApproved, ApprovalRejected, ApprovalExpired:
	default:
		return nil, invalidArg("state", "%q must be pending, approved, rejected or expired", truncate(state, 32))
	}
	now := e.clock.Now()
	out := []Approval{}
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindApproval), nil, func(k, val []byte) (bool, error) {
			rec, err := e.effectByID(r, namespace, string(val))
			if errors.Is(err, ErrNotFound) {
				return true, nil
			}
			if err != nil {
				return false, err
			}
			// An effect asked again after an expiry is indexed under every
			// approval id it had; it is listed under its current one.
			a := rec.view(now).Approval
			if a != nil && a.ApprovalID == lastPart(k) && (state == "" || a.State == state) {
				out = append(out, *a)
			}
			return true, nil
		})
	})
	return out, err
}

// Approve grants a pending approval; the agent's next begin with the same key
// gets execute (ceilings are still checked then). decidedBy is the admin's
// name.
func (e *Engine) Approve(ctx context.Context, approvalID, decidedBy, note string) (*Approval, error) {
	return e.decide(ctx, approvalID, decidedBy, note, ApprovalApproved)
}

// Reject refuses a pending approval; every later begin with the key is
// denied with approval_rejected.
func (e *Engine) Reject(ctx context.Context, approvalID, decidedBy, note string) (*Approval, error) {
	return e.decide(ctx, approvalID, decidedBy, note, ApprovalRejected)
}

func (e *Engine) decide(ctx context.Context, approvalID, decidedBy, note, to string) (*Approval, error) {
	if err := checkText("approval_id", approvalID, MaxIDLen, true); err != nil {
		return nil, err
	}
	// An agent never decides, so never counts toward a quorum: the admin
	// API and the console refuse agents' tokens; this refuses an agent's
	// name from any other caller of the engine.
	if DeciderKey(decidedBy) == "" || strings.HasPrefix(DeciderKey(decidedBy), "agent:") {
		return nil, &Error{Code: CodeUnauthorized, Message: fmt.Sprintf("%q cannot decide an approval: a person must (an admin, the console's admin, a Slack user)", truncate(decidedBy, 64))}
	}
	if err := checkNote("note", note); err != nil {
		return nil, err
	}
	a, err := submit(ctx, e, func(t *opTxn, now time.Time) (*Approval, error) {
		id, err := t.Get(key(kindApproval, approvalID))
		if err != nil {
			return nil, approvalNotFound(err, approvalID)
		}
		rec, err := e.effectByID(t, "", string(id))
		if err != nil {
			return nil, approvalNotFound(err, approvalID)
		}
		a := rec.Approval
		if a == nil || a.ApprovalID != approvalID {
			// The effect moved on to a newer approval request.
			return nil, newErr(CodeInvalidStateTransition, "approval %s was superseded by a newer request for effect %s", approvalID, rec.EffectID)
		}
		switch {
		case a.State == to:
			v := *rec.view(now).Approval
			return &v, nil
		case a.State != ApprovalPending:
			return nil, newErr(CodeInvalidStateTransition, "approval %s is already %s", approvalID, a.State)
		case !now.Before(a.ExpiresAt):
			return nil, newErr(CodeInvalidStateTransition, "approval %s expired at %s; the agent's next begin will ask again", approvalID, a.ExpiresAt.Format(time.RFC3339))
		}
		if to == ApprovalApproved { // a halt may let it be rejected, never approved (halt.go)
			if h, err := haltFor(t, rec.Namespace, rec.EffectType, rec.Operation, a.AgentID, rec.Vendor); err != nil || h != nil {
				if err != nil {
					return nil, err
				}
				return nil, haltedErr(h, "approval "+approvalID+" cannot be approved while halted (it may be rejected)")
			}
		}
		if to == ApprovalApproved && a.ApproversRequired > 1 {
			who := DeciderKey(decidedBy)
			if slices.ContainsFunc(a.ApprovedBy, func(p Approver) bool { return DeciderKey(p.By) == who }) {
				v := *rec.view(now).Approval // the same person again counts once
				return &v, nil
			}
			a.ApprovedBy = append(a.ApprovedBy, Approver{By: decidedBy, At: now, Note: note})
			if len(a.ApprovedBy) < a.ApproversRequired {
				if err := e.putEffect(t, rec, now); err != nil {
					return nil, err
				}
				t.emit(approvalEvent(EventApprovalPartiallyApproved, rec, decidedBy))
				v := *rec.view(now).Approval
				return &v, nil
			}
		}
		a.State, a.DecidedBy, a.DecidedAt, a.Note = to, decidedBy, &now, note
		if to == ApprovalApproved {
			a.ExpiresAt = now.Add(e.defaults.ApprovalTTL)
			rec.State = StateApproved
		} else {
			rec.State = StateRejected
		}
		if err := e.putEffect(t, rec, now); err != nil {
			return nil, err
		}
		t.emit(approvalEvent(EventApprovalDecided, rec, decidedBy))
		v := *rec.view(now).Approval
		return &v, nil
	})
	if err != nil {
		return nil, err
	}
	e.log.Info("approval decided", "approval_id", a.ApprovalID, "effect_id", a.EffectID, "state", a.State, "by", a.DecidedBy)
	return a, nil
}

// DeciderKey is who a decider is, for counting approvals and for telling
// an agent's name: decidedBy in NFKC (full-width letters are letters),
// without invisible or control characters, its spaces collapsed and
// trimmed, case-folded. Found breaking the quorum: "admin:alice" and
// "admin:Alice" (a second admin token, or a renamed one, given a name that
// reads the same) were two approvers, and "Agent:bot" was not an agent's
// name. The config refuses two admin names with one key
// (internal/config); this holds for every caller of the engine.
func DeciderKey(decidedBy string) string {
	s := strings.Map(func(r rune) rune {
		if isInvisible(r) || unicode.IsControl(r) {
			return -1
		}
		return r
	}, norm.NFKC.String(decidedBy))
	return cases.Fold().String(strings.Join(strings.Fields(s), " "))
}

// approvalEvent is an approval.* event of rec's request decided by by,
// with its approvers so far when it needs several.
func approvalEvent(typ string, rec *effectRec, by string) Event {
	a := rec.Approval
	ev := effectEvent(typ, rec)
	ev.AgentID, ev.ApprovalID, ev.Actor, ev.CostMicros = a.AgentID, a.ApprovalID, by, &a.EstimatedCostMicros
	if a.ApproversRequired > 1 {
		ev.ApproversRequired = a.ApproversRequired
		for _, p := range a.ApprovedBy {
			ev.ApprovedBy = append(ev.ApprovedBy, p.By)
		}
	}
	if typ == EventApprovalPartiallyApproved {
		ev.Compensation = rec.Compensation.withoutPayload() // the request's text is shown again
	}
	return ev
}

func approvalNotFound(err error, id string) error {
	if errors.Is(err, ErrNotFound) {
		return &Error{Code: CodeApprovalNotFound, Field: "approval_id", Message: fmt.Sprintf("no approval %q", truncate(id, 64))}
	}
	return err
}

// approvalAnswer is the approval_required answer for rec's pending
// request: when to begin again (Defaults.ApprovalRetryAfter, never past
// the request's expiry) and when the request lapses.
func (e *Engine) approvalAnswer(rec *effectRec, now time.Time) *BeginResult {
	res := approvalRequired(rec)
	exp := rec.Approval.ExpiresAt
	left := exp.Sub(now)
	res.RetryAfterSeconds = max(1, int(min(e.defaults.ApprovalRetryAfter, left)/time.Second))
	res.ExpiresAt = &exp
	res.Message += fmt.Sprintf(" Begin again in %d seconds to see whether it was decided; the request lapses at %s.",
		res.RetryAfterSeconds, exp.UTC().Format(time.RFC3339))
	return res
}

// approvalRequested indexes rec's new request by its expiry, for the
// expiry sweep, after telling of the request it replaces if that one
// lapsed undecided and the sweep has not told of it yet.
func (e *Engine) approvalRequested(t *opTxn, rec *effectRec, prior *Approval) error {
	if prior != nil && prior.State == ApprovalPending {
		e.emitExpired(t, rec, prior)
	}
	e.dueAt(rec.Approval.ExpiresAt)
	return t.Set(timeKey(kindApprovalDue, rec.Approval.ExpiresAt, rec.EffectID), nil)
}

func (e *Engine) emitExpired(t *opTxn, rec *effectRec, a *Approval) {
	ev := effectEvent(EventApprovalExpired, rec)
	ev.AgentID, ev.ApprovalID, ev.CostMicros, ev.Actor = a.AgentID, a.ApprovalID, &a.EstimatedCostMicros, "expiry"
	ev.State = StateAwaitingApproval
	t.emit(ev)
}

// ExpireApprovals marks every pending approval request past its expiry as
// expired and emits approval.expired for each, once, so that whoever was
// asked hears that it lapsed. It returns how many it expired. The
// background reaper calls it. An agent's begin after the expiry asks again
// whether or not the sweep ran.
func (e *Engine) ExpireApprovals(ctx context.Context) (int, error) {
	n, _, err := e.expireApprovals(ctx)
	return n, err
}

// expireApprovals is ExpireApprovals, also returning when the next pending
// request it saw lapses (zero when none does).
func (e *Engine) expireApprovals(ctx context.Context) (int, time.Time, error) {
	return e.sweep(ctx, kindApprovalDue, func(now time.Time) time.Time { return now },
		func(t *opTxn, rec *effectRec, now time.Time) (bool, error) {
			a := rec.Approval
			if rec.State != StateAwaitingApproval || a == nil || a.State != ApprovalPending || now.Before(a.ExpiresAt) {
				return false, nil
			}
			if err := t.Delete(timeKey(kindApprovalDue, a.ExpiresAt, rec.EffectID)); err != nil {
				return false, err
			}
			a.State = ApprovalExpired
			if err := e.putEffect(t, rec, now); err != nil {
				return false, err
			}
			e.emitExpired(t, rec, a)
			return true, nil
		}, func(rec *effectRec, at time.Time) bool {
			a := rec.Approval
			return rec.State == StateAwaitingApproval && a != nil && a.State == ApprovalPending && a.ExpiresAt.Equal(at)
		})
}
