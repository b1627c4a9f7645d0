package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Report records the outcome of an executed attempt. Reporting the same
// outcome twice is a no-op that returns the same effect; a contradicting
// report is invalid_state_transition, except on an indeterminate effect,
// where a late report of the same attempt settles it.
func (e *Engine) Report(ctx context.Context, req ReportRequest) (*Effect, error) {
	start := time.Now()
	var err *Error
	if req.Namespace, err = checkNamespace(req.Namespace); err != nil {
		return nil, err
	}
	if err = checkText("effect_id", req.EffectID, MaxIDLen, true); err != nil {
		return nil, err
	}
	switch req.Outcome {
	case OutcomeSucceeded, OutcomeFailed, OutcomeUnknown:
	default:
		return nil, invalidArg("outcome", "%q must be succeeded, failed or unknown", truncate(string(req.Outcome), 32))
	}
	if req.Attempt < 0 {
		return nil, invalidArg("attempt", "must be > 0")
	}
	var resultNote, errorNote string
	if req.Result, resultNote, err = keepResult("result", req.Result); err != nil {
		return nil, err
	}
	if err = checkCost("actual_cost_micros", req.ActualCostMicros); err != nil {
		return nil, err
	}
	var refNote string
	if n := utf8.RuneCountInString(req.VendorReference); n > MaxIDLen {
		// An id cut short would name another object: it is left out.
		req.VendorReference, refNote = "", fmt.Sprintf("vendor_reference was %d characters, over the limit of %d: Ratchet did not keep it.", n, MaxIDLen)
	}
	if bad := checkText("vendor_reference", req.VendorReference, MaxIDLen, false); bad != nil {
		// An id changed would name another object, and a refusal would
		// leave the effect to lapse: it is left out, as one too long.
		req.VendorReference, refNote = "", "Ratchet did not keep vendor_reference: it "+bad.Message+"."
	}
	if req.Error, errorNote, err = keepNote("error", req.Error); err != nil {
		return nil, err
	}
	ek := key(kindEffect, req.EffectID)
	eff, serr := submitReading(ctx, e, func(knownFunc) [][]byte { return [][]byte{ek} }, func(t *opTxn, now time.Time) (*Effect, error) {
		t.principal = req.Principal
		rec, err := e.effectByID(t, req.Namespace, req.EffectID)
		if err != nil {
			return nil, notFound(err, req.EffectID)
		}
		if err := rec.checkCaller(req.AgentID, req.NotAgents, req.Attempt, "report", true); err != nil {
			return nil, err
		}
		if err := e.expireLapsed(t, rec, now); err != nil {
			return nil, err
		}
		o := outcome{state: outcomeState(req.Outcome), result: req.Result, vendorRef: req.VendorReference,
			errText: req.Error, actual: req.ActualCostMicros}
		eff, err := e.settleOutcome(t, rec, o, "report", now)
		if err == nil {
			ev := effectEvent(EventEffectReported, rec)
			ev.CostMicros, ev.Actor = req.ActualCostMicros, actor("agent", req.AgentID)
			t.emit(ev)
			if req.Outcome == OutcomeUnknown && eff.State == StateIndeterminate {
				t.emit(effectEvent(EventEffectIndeterminate, rec))
			}
		}
		return eff, err
	})
	if serr != nil {
		return nil, serr
	}
	eff.ResultNote = strings.Join(slices.DeleteFunc([]string{resultNote, refNote, errorNote}, func(s string) bool { return s == "" }), " ")
	e.obs.Report(req.Outcome, time.Since(start))
	if e.log.Enabled(ctx, slog.LevelInfo) { // as Begin's
		e.log.Info("report", "namespace", eff.Namespace, "effect_id", eff.EffectID, "attempt", eff.Attempt, "outcome", req.Outcome, "state", eff.State)
	}
	return eff, nil
}

// Resolve settles an effect whose outcome is unknown (state indeterminate,
// including a pending effect whose lease has run out) after someone checked
// at the vendor. failed frees the key for a new attempt and releases the
// reserved spend; succeeded keeps it.
func (e *Engine) Resolve(ctx context.Context, req ResolveRequest) (*Effect, error) {
	var err *Error
	if req.Namespace != "" {
		if req.Namespace, err = checkNamespace(req.Namespace); err != nil {
			return nil, err
		}
	}
	if req.EffectID == "" && req.IdempotencyKey == "" {
		return nil, invalidArg("effect_id", "effect_id or idempotency_key is required")
	}
	if req.EffectID == "" && req.Namespace == "" {
		return nil, invalidArg("effect_id", "resolving by idempotency_key needs a namespace")
	}
	for _, f := range []struct{ name, val string }{
		{"effect_id", req.EffectID}, {"idempotency_key", req.IdempotencyKey}, {"vendor_reference", req.VendorReference},
	} {
		if err = checkText(f.name, f.val, MaxIDLen, false); err != nil {
			return nil, err
		}
	}
	if req.Attempt < 0 {
		return nil, invalidArg("attempt", "must be > 0")
	}
	if req.Resolution != OutcomeSucceeded && req.Resolution != OutcomeFailed {
		return nil, invalidArg("resolution", "%q must be succeeded or failed", truncate(string(req.Resolution), 32))
	}
	var resultNote string
	if req.Result, resultNote, err = keepResult("result", req.Result); err != nil {
		return nil, err
	}
	if err = checkNote("note", req.Note); err != nil {
		return nil, err
	}
	eff, serr := submit(ctx, e, func(t *opTxn, now time.Time) (*Effect, error) {
		t.principal = req.Principal
		var rec *effectRec
		var err error
		if req.EffectID != "" {
			rec, err = e.effectByID(t, req.Namespace, req.EffectID)
		} else {
			rec, err = e.effectByKey(t, req.Namespace, req.IdempotencyKey)
		}
		if err != nil {
			return nil, notFound(err, req.EffectID+req.IdempotencyKey)
		}
		operator := req.byOperator()
		if err := rec.checkCaller(req.AgentID, req.NotAgents, req.Attempt, "resolve", !operator); err != nil {
			return nil, err
		}
		if err := e.expireLapsed(t, rec, now); err != nil {
			return nil, err
		}
		want := outcomeState(req.Resolution)
		settled := rec.State == want || rec.State == StateCompensated && want == StateSucceeded
		switch {
		case settled && operator && !rec.UnreportedAt.IsZero():
			// Settled that way by its agent's late report or own resolve
			// (and perhaps compensated since): the operator's agreement
			// clears the unreported expiry it still counts as.
			if err := e.clearUnreported(t, rec); err != nil {
				return nil, err
			}
			rec.ResolvedBy, rec.ResolutionNote = req.ResolvedBy, req.Note
			if err := e.putEffect(t, rec, now); err != nil {
				return nil, err
			}
			v := rec.view(now)
			return &v, nil
		case settled:
			v := rec.view(now)
			return &v, nil // already settled that way: a no-op
		case operator && rec.State == StateFailed && want == StateSucceeded && !rec.UnreportedAt.IsZero() && rec.Reservations == nil:
			return e.overturnLateFailure(t, rec, &req, now)
		case rec.State == StatePending && now.Before(*rec.LeaseExpiresAt):
			return nil, newErr(CodeInvalidStateTransition, "effect %s is in flight until %s; only an effect whose outcome is unknown can be resolved", rec.EffectID, rec.LeaseExpiresAt.Format(time.RFC3339))
		case rec.State != StatePending && rec.State != StateIndeterminate:
			return nil, newErr(CodeInvalidStateTransition, "effect %s is %s; only an effect whose outcome is unknown can be resolved", rec.EffectID, rec.State)
		}
		rec.ResolvedBy, rec.ResolutionNote = req.ResolvedBy, req.Note
		if rec.ResolvedBy == "" {
			rec.ResolvedBy = "unknown"
		}
		if operator {
			if err := e.clearUnreported(t, rec); err != nil {
				return nil, err
			}
		}
		o := outcome{state: want, result: req.Result, vendorRef: req.VendorReference}
		eff, err := e.settleOutcome(t, rec, o, "resolve", now)
		if err == nil {
			ev := effectEvent(EventEffectResolved, rec)
			ev.Actor = rec.ResolvedBy
			t.emit(ev)
		}
		return eff, err
	})
	if serr != nil {
		return nil, serr
	}
	eff.ResultNote = resultNote
	e.log.Info("resolve", "namespace", eff.Namespace, "effect_id", eff.EffectID, "state", eff.State, "by", eff.ResolvedBy)
	return eff, nil
}

// overturnLateFailure records an operator's finding that an attempt its
// agent reported (or resolved) failed only after its lease had run out did
// happen: the vendor shows it. The agent's late word released its spend and
// freed the key; the operator's succeeded counts the spend again, now, in
// every ceiling that applies (past its limit if need be: the money is
// spent, and the ceiling then refuses what comes next), and makes later
// begins duplicates. Only while the effect is still that failed attempt (no
// new attempt began, nothing holds a reservation) and still marked as an
// unreported expiry: a timely report is the agent's to make.
func (e *Engine) overturnLateFailure(t *opTxn, rec *effectRec, req *ResolveRequest, now time.Time) (*Effect, error) {
	in := &beginInput{req: BeginRequest{Namespace: rec.Namespace, EffectType: rec.EffectType, Vendor: rec.Vendor, Operation: rec.Operation, AgentID: rec.owner(),
		RunID: rec.RunID, EstimatedCostMicros: rec.EstimatedCostMicros}, dims: rec.Dimensions,
		pol: e.policy.forEffect(rec.EffectType, rec.Vendor, rec.Operation), replica: e.replica}
	if rec.ActualCostMicros != nil {
		in.req.EstimatedCostMicros = rec.ActualCostMicros
	}
	uses, err := ceilingsFor(t, in, now)
	if err != nil {
		return nil, err
	}
	for _, u := range uses {
		if err := u.admitSpent(t, now); err != nil {
			return nil, err
		}
	}
	if rec.Reservations, err = reserve(t, uses, now); err != nil {
		return nil, err
	}
	if err := e.clearUnreported(t, rec); err != nil {
		return nil, err
	}
	rec.State, rec.Error = StateSucceeded, ""
	rec.ResolvedBy, rec.ResolutionNote = req.ResolvedBy, req.Note
	rec.Result, rec.VendorReference, rec.CompletedAt = req.Result, req.VendorReference, &now
	if err := e.putEffect(t, rec, now); err != nil {
		return nil, err
	}
	ev := effectEvent(EventEffectResolved, rec)
	ev.Actor, ev.Reason, ev.CostMicros = rec.ResolvedBy, "overturned a late failed report", in.req.EstimatedCostMicros
	t.emit(ev)
	v := rec.view(now)
	return &v, nil
}

// byOperator reports whether the resolve comes from an operator (the admin
// API, which resolves in any namespace) rather than an agent. Only an
// operator clears an effect's unreported expiry, which max_unreported
// counts (SPEC section 4): an agent's own report or resolve settles the
// effect but leaves that mark.
func (r *ResolveRequest) byOperator() bool { return r.Namespace == "" }

// checkCaller refuses a report or resolve that may not settle the effect's
// current attempt: one from a caller whose credentials fix an agent other
// than the one that began it, or that fix none, when a credential fixes
// the one that began it (notAgents); one for another attempt; and, when the
// attempt is required (from agents), one that does not say which attempt
// it is for once the effect has had more than one, so that a retried call
// about an earlier attempt never settles a later one, which may be under
// way.
func (r *effectRec) checkCaller(agent string, notAgents []string, attempt int, verb string, attemptRequired bool) error {
	// The attempt first: an agent retrying a call about its own earlier
	// attempt, which another agent has since followed, is told its call is
	// stale, not that the effect is someone else's.
	if attempt == 0 && attemptRequired && r.Attempt > 1 {
		return invalidArg("attempt", "effect %s has had %d attempts, so a %s must say which it is for: send the attempt number of the attempt you acted on or checked. Nothing was applied", r.EffectID, r.Attempt, verb)
	}
	if attempt != 0 && attempt != r.Attempt {
		return newErr(CodeInvalidStateTransition, "effect %s is on attempt %d; a %s for attempt %d is stale and was not applied", r.EffectID, r.Attempt, verb, attempt)
	}
	if agent != "" && agent != r.owner() {
		return &Error{Code: CodeUnauthorized, Field: "effect_id", Message: fmt.Sprintf(
			"effect %s was begun by another agent; your credentials may report and resolve only the attempts you began", r.EffectID)}
	}
	if agent == "" && slices.Contains(notAgents, r.owner()) {
		return &Error{Code: CodeUnauthorized, Field: "effect_id", Message: fmt.Sprintf(
			"effect %s was begun by agent %q, which a credential fixes (an agent token, or the proxy); only that credential reports and resolves its attempts", r.EffectID, r.owner())}
	}
	return nil
}

// owner is the agent that began the current attempt.
func (r *effectRec) owner() string {
	if r.AttemptAgent != "" {
		return r.AttemptAgent
	}
	return r.AgentID
}

// expireLapsed expires a pending effect whose lease has run out before a
// report or resolve settles it, as the reaper would have: the lease ran out
// without a report all the same, so it counts as an unreported expiry
// whether or not a reap got to it first.
func (e *Engine) expireLapsed(t *opTxn, rec *effectRec, now time.Time) error {
	if rec.State != StatePending || now.Before(*rec.LeaseExpiresAt) {
		return nil
	}
	return e.expireLease(t, rec)
}

func notFound(err error, id string) error {
	if errors.Is(err, ErrNotFound) {
		return &Error{Code: CodeEffectNotFound, Field: "effect_id", Message: fmt.Sprintf("no effect %q in this namespace", truncate(id, 64))}
	}
	return err
}

func outcomeState(o Outcome) State {
	switch o {
	case OutcomeSucceeded:
		return StateSucceeded
	case OutcomeFailed:
		return StateFailed
	}
	return StateIndeterminate
}

type outcome struct {
	state     State
	result    []byte
	vendorRef string
	errText   string
	actual    *int64
}

// settleOutcome applies a report or resolution to an effect.
func (e *Engine) settleOutcome(t *opTxn, rec *effectRec, o outcome, verb string, now time.Time) (*Effect, error) {
	switch rec.State {
	case StatePending, StateIndeterminate:
		if o.state == StateFailed && verb != "settlement" {
			// A resend of this attempt may be in flight (recoveryclaim.go).
			if err := recoveryClaimed(t, rec, now); err != nil {
				return nil, err
			}
		}
	case o.state:
		// The same outcome again: a no-op, but for the answer of a
		// success settled without one (a vendor's event overtook it).
		if err := e.fillResult(t, rec, o.state, o.result, now); err != nil {
			return nil, err
		}
		v := rec.view(now)
		return &v, nil
	case StateCompensated:
		if o.state == StateSucceeded {
			v := rec.view(now)
			return &v, nil
		}
		fallthrough
	default:
		return nil, newErr(CodeInvalidStateTransition, "effect %s is already %s; a %s of %s contradicts it and was not applied", rec.EffectID, rec.State, verb, o.state)
	}
	wasIndeterminate := rec.State == StateIndeterminate
	if rec.State == StatePending {
		if err := e.dropLease(t, rec); err != nil {
			return nil, err
		}
	}
	if o.actual != nil {
		if err := chargeActual(t, e.policy, rec, *o.actual, now); err != nil {
			return nil, err
		}
		rec.ActualCostMicros = o.actual
	}
	rec.State = o.state
	rec.VendorReference = o.vendorRef
	switch o.state {
	case StateSucceeded:
		rec.Result, rec.CompletedAt, rec.Reason, rec.Since = o.result, &now, "", nil
	case StateFailed:
		if err := release(t, e.policy, rec, now); err != nil {
			return nil, err
		}
		rec.Error, rec.CompletedAt, rec.Reason, rec.Since = o.errText, &now, "", nil
	case StateIndeterminate:
		if rec.Reason != ReasonReportedUnknown {
			rec.Reason, rec.Since = ReasonReportedUnknown, &now
		}
		rec.Error = o.errText
	}
	if err := e.putEffect(t, rec, now); err != nil {
		return nil, err
	}
	if rec.State == StateSucceeded && rec.CompensatesEffectID != "" {
		if err := e.markCompensated(t, rec, now); err != nil {
			return nil, err
		}
	}
	if rec.GroupKey != "" && rec.State.terminal() {
		if err := e.checkUnwound(t, rec.Namespace, rec.GroupKey, now); err != nil {
			return nil, err
		}
	}
	if wasIndeterminate && rec.State != StateIndeterminate {
		// The counterpart of effect.indeterminate, for whoever was told to
		// check at the vendor: a pager resolves the alert it opened
		// (notify.PagerDuty pairs them by effect id and attempt).
		ev := effectEvent(EventEffectDetermined, rec)
		ev.Reason, ev.Actor = verb, rec.ResolvedBy
		if verb == "report" {
			ev.Actor = actor("agent", rec.owner())
		}
		t.emit(ev)
	}
	v := rec.view(now)
	return &v, nil
}

// fillResult keeps result as the answer of an effect that succeeded
// without one (settled by a vendor's record that carried none, say); an
// answer already kept is never replaced.
func (e *Engine) fillResult(t *opTxn, rec *effectRec, state State, result []byte, now time.Time) error {
	if state != StateSucceeded || rec.Result != nil || result == nil {
		return nil
	}
	rec.Result = result
	return e.putEffect(t, rec, now)
}

// expireLease turns a pending effect whose lease ran out into an
// indeterminate one and counts it against its agent as unreported. Its
// reservations stay: the action may have happened.
func (e *Engine) expireLease(t *opTxn, rec *effectRec) error {
	at := *rec.LeaseExpiresAt
	if err := e.dropLease(t, rec); err != nil {
		return err
	}
	// An effect still counted from an earlier attempt's expiry (reported
	// late, then begun again) is counted once, now, against this attempt's
	// agent.
	if err := e.clearUnreported(t, rec); err != nil {
		return err
	}
	rec.State, rec.Reason, rec.Since = StateIndeterminate, ReasonLeaseExpired, &at
	rec.UnreportedAt, rec.UnreportedAgent = at, rec.owner()
	n, err := addUnreported(t, rec.Namespace, rec.UnreportedAgent, rec.EffectID, at)
	if err != nil {
		return err
	}
	t.emit(effectEvent(EventEffectIndeterminate, rec))
	t.emit(Event{Type: EventIntegrationWarning, Namespace: rec.Namespace, AgentID: rec.UnreportedAgent,
		EffectID: rec.EffectID, Count: n})
	return e.putEffect(t, rec, at)
}

// actor names who acted: kind:id, or "" when the id is not known.
func actor(kind, id string) string {
	if id == "" {
		return ""
	}
	return kind + ":" + id
}

// clearUnreported removes an effect from its agent's unreported set.
func (e *Engine) clearUnreported(t *opTxn, rec *effectRec) error {
	if rec.UnreportedAt.IsZero() {
		return nil
	}
	agent := rec.UnreportedAgent
	if agent == "" { // a record written as JSON, before it was kept
		agent = rec.AgentID
	}
	at := rec.UnreportedAt
	rec.UnreportedAt, rec.UnreportedAgent = time.Time{}, ""
	return removeUnreported(t, rec.Namespace, agent, rec.EffectID, at)
}
