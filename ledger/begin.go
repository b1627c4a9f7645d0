package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Begin asks for a decision immediately before a side effect. It returns a
// decision (never an error) for everything the agent must obey, and an
// *Error for input the agent must fix: invalid_argument,
// idempotency_key_conflict, dimension_required, cost_required.
//
// The order of evaluation is SPEC section 4's: validate, the key's existing
// state, the group, deny, required dimensions, cost required, ceilings,
// approval threshold, execute. A begin that is denied for a key never seen
// before records nothing (there is nothing to remember: a later begin is
// evaluated afresh) and carries no effect_id.
func (e *Engine) Begin(ctx context.Context, req BeginRequest) (*BeginResult, error) {
	start := time.Now()
	in, err := e.validateBegin(req)
	if err != nil {
		return nil, err
	}
	res, err := submitReading(ctx, e, in.reads, func(t *opTxn, now time.Time) (*BeginResult, error) {
		t.principal = req.Principal
		return e.begin(t, in, now)
	})
	if err != nil {
		return nil, err
	}
	e.obs.Begin(in.req.EffectType, res.Decision, time.Since(start))
	if w := res.DimensionWarning; w != nil {
		if dw, ok := e.obs.(DimensionWarningObserver); ok {
			dw.DimensionWarning(in.req.EffectType, len(w.Ceilings))
		}
		e.log.WarnContext(ctx, "ceiling not applied: the begin declared none of its dimension", "namespace", in.req.Namespace,
			"effect_type", in.req.EffectType, "effect_id", res.EffectID, "ceilings", w.Ceilings, "dimensions", w.Dimensions)
	}
	if o := in.observed; o != nil {
		if ob, ok := e.obs.(ObserveModeObserver); ok {
			ob.Observed(in.req.EffectType, o.would)
		}
		e.log.InfoContext(ctx, "observed rule would have refused", "namespace", in.req.Namespace, "effect_type", in.req.EffectType,
			"effect_id", res.EffectID, "decision", res.Decision, "would", o.would, "reason", o.reason, "rule", o.rule)
	}
	if e.log.Enabled(ctx, slog.LevelInfo) { // its arguments cost 4 allocations a begin even when nothing logs
		e.log.InfoContext(ctx, "begin", "namespace", in.req.Namespace, "effect_type", in.req.EffectType,
			"vendor", in.req.Vendor, "operation", in.req.Operation, "decision", res.Decision, "effect_id", res.EffectID, "attempt", res.Attempt, "reason", res.Reason)
	}
	return res, nil
}

// reads names what a begin reads: its key (and SameAs) and, once known, the
// effect it points to; the agent's unreported summary (unreported.go); the halts; its group; the
// effect it compensates; its ceilings' counters.
func (in *beginInput) reads(known knownFunc) [][]byte {
	req := &in.req
	ks := [][]byte{key(kindUnreported, req.Namespace, req.AgentID), haltsKey}
	idem := func(k string) { // the key and, once known, its effect
		kk := key(kindIdemKey, req.Namespace, k)
		ks = append(ks, kk)
		if id, ok := known(kk); ok && id != nil {
			ks = append(ks, key(kindEffect, string(id)))
		}
	}
	idem(req.IdempotencyKey)
	for _, k := range req.SameAs {
		idem(k)
	}
	if req.CompensatesEffectID != "" {
		ks = append(ks, key(kindEffect, req.CompensatesEffectID))
	} else if req.GroupKey != "" {
		ks = append(ks, key(kindGroup, req.Namespace, req.GroupKey))
	}
	for _, c := range in.pol.ceilings {
		if k, _, _, ok := counterKey(c, in); ok {
			ks = append(ks, k)
			if in.replica != "" {
				ks = append(ks, shareKey(k, in.replica))
			}
		}
	}
	return ks
}

func (e *Engine) begin(t *opTxn, in *beginInput, now time.Time) (*BeginResult, error) {
	req := &in.req
	in.observed = nil // a batch decided again decides afresh
	rec, err := e.effectByKey(t, req.Namespace, req.IdempotencyKey)
	if errors.Is(err, ErrNotFound) {
		rec, err = e.sameAs(t, req, now)
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	res, err := e.beginDecide(t, in, rec, now)
	if err != nil || res == nil {
		return res, err
	}
	if res.IntegrationWarning, err = e.integrationWarning(t, req.Namespace, req.AgentID); err != nil {
		return nil, err
	}
	t.emit(Event{Type: EventEffectBegun, Namespace: req.Namespace, EffectID: res.EffectID, EffectType: req.EffectType,
		Vendor: req.Vendor, Operation: req.Operation, Attempt: res.Attempt, AgentID: req.AgentID, RunID: req.RunID, GroupKey: req.GroupKey, ApprovalID: res.ApprovalID,
		Decision: res.Decision, State: res.State, Reason: res.Reason, CostMicros: req.EstimatedCostMicros, Dimensions: in.dims,
		NotApplied: notApplied(res), Actor: confirmedBy(req), Note: confirmNote(req)})
	if o := in.observed; o != nil && o.changes(res.Decision) {
		t.emit(Event{Type: EventPolicyObserved, Namespace: req.Namespace, EffectID: res.EffectID, EffectType: req.EffectType,
			Attempt: res.Attempt, AgentID: req.AgentID, RunID: req.RunID, GroupKey: req.GroupKey, Decision: Decision(o.would),
			Reason: o.reason, Rule: o.rule, CostMicros: req.EstimatedCostMicros, Dimensions: in.dims})
	} else {
		in.observed = nil
	}
	return res, nil
}

// sameAs returns the effect of the first of req.SameAs created less than
// req.SameWithin ago, switching req to its key, or ErrNotFound.
func (e *Engine) sameAs(t *opTxn, req *BeginRequest, now time.Time) (*effectRec, error) {
	for _, k := range req.SameAs {
		rec, err := e.effectByKey(t, req.Namespace, k)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return nil, err
		case now.Sub(rec.CreatedAt) < req.SameWithin:
			req.IdempotencyKey = k
			return rec, nil
		}
	}
	return nil, ErrNotFound
}

func (e *Engine) beginDecide(t *opTxn, in *beginInput, rec *effectRec, now time.Time) (*BeginResult, error) {
	req := &in.req
	if rec != nil {
		if rec.EffectID == req.CompensatesEffectID {
			return nil, invalidArg("compensates_effect_id", "an effect cannot compensate itself")
		}
		if rec.Fingerprint != in.fingerprint {
			return nil, &Error{Code: CodeIdempotencyKeyConflict, Field: "idempotency_key", Message: fmt.Sprintf(
				"idempotency_key %q was first used with a different effect_type, vendor or payload (effect %s); "+
					"a retry must send exactly the same action, and a different action needs its own key", truncate(req.IdempotencyKey, 64), rec.EffectID)}
		}
		if rec.CompensatesEffectID != req.CompensatesEffectID {
			return nil, &Error{Code: CodeIdempotencyKeyConflict, Field: "idempotency_key", Message: fmt.Sprintf(
				"idempotency_key %q was first used %s (effect %s); a compensation and an ordinary action never share a key",
				truncate(req.IdempotencyKey, 64), compensationRole(rec.CompensatesEffectID), rec.EffectID)}
		}
		if res, err := e.existing(t, rec, now); res != nil || err != nil {
			return res, err
		}
		// failed, approved, or an expired approval request: evaluate anew.
	}
	return e.evaluate(t, in, rec, now)
}

// existing answers a begin from the key's current state, or returns nil when
// the begin must be evaluated as a new attempt.
func (e *Engine) existing(t *opTxn, rec *effectRec, now time.Time) (*BeginResult, error) {
	res := &BeginResult{EffectID: rec.EffectID, Attempt: rec.Attempt, State: rec.State}
	switch rec.State {
	case StatePending:
		if !now.Before(*rec.LeaseExpiresAt) {
			if err := e.expireLease(t, rec); err != nil {
				return nil, err
			}
			return blocked(rec), nil
		}
		left := rec.LeaseExpiresAt.Sub(now)
		res.Decision = DecisionInFlight
		res.RetryAfterSeconds = max(1, int(left/time.Second))
		res.LeaseExpiresAt = rec.LeaseExpiresAt
		res.Message = fmt.Sprintf("Another caller holds the lease for this action. Do not perform it; wait %d seconds and begin again with the same key.", res.RetryAfterSeconds)
		return res, nil
	case StateSucceeded, StateCompensated:
		res.Decision = DecisionDuplicate
		res.Result, res.VendorReference, res.CompletedAt = rec.Result, rec.VendorReference, rec.CompletedAt
		res.Message = "This action already happened. Do not perform it again; use the returned result as if you had just done it."
		if rec.State == StateCompensated {
			res.Message = "This action already happened and was later undone by a compensation. Do not perform it again."
		}
		return res, nil
	case StateIndeterminate:
		return blocked(rec), nil
	case StateRejected:
		res.Decision, res.Reason = DecisionDenied, ReasonApprovalRejected
		res.ApprovalID = rec.Approval.ApprovalID
		res.Message = "An operator rejected this action. Do not perform it; tell the user it was refused."
		return res, nil
	case StateAwaitingApproval:
		if now.Before(rec.Approval.ExpiresAt) {
			// A grant made since it asked decides it (grants.go).
			if granted, err := e.waitingGrant(t, rec, now); err != nil || !granted {
				return e.approvalAnswer(rec, now), err
			}
		}
	}
	return nil, nil
}

func blocked(rec *effectRec) *BeginResult {
	res := &BeginResult{Decision: DecisionBlocked, EffectID: rec.EffectID, Attempt: rec.Attempt,
		State: StateIndeterminate, Reason: rec.Reason, Since: rec.Since}
	if rec.Reason == ReasonLeaseExpired {
		res.Message = "An earlier attempt's lease ran out without a report, so it may or may not have happened. Do not perform it; check at the vendor and resolve it, or tell the user it is unresolved."
	} else {
		res.Message = "An earlier attempt was reported with an unknown outcome. Do not perform it; check at the vendor and resolve it, or tell the user it is unresolved."
	}
	return res
}

func approvalRequired(rec *effectRec) *BeginResult {
	a := rec.Approval
	est, thr := a.EstimatedCostMicros, a.ThresholdMicros
	return &BeginResult{Decision: DecisionApprovalRequired, EffectID: rec.EffectID, Attempt: rec.Attempt + 1,
		State: StateAwaitingApproval, ApprovalID: a.ApprovalID, ThresholdMicros: &thr, EstimatedCostMicros: &est,
		Message: fmt.Sprintf("%s must approve this action (approval %s). Do not perform it now; begin again with the same key after an operator approves.", approverText(a), a.ApprovalID)}
}

func approverText(a *Approval) string {
	if a.ApproversRequired < 2 {
		return "A human"
	}
	return fmt.Sprintf("%d people (%d so far)", a.ApproversRequired, len(a.ApprovedBy))
}

func denied(rec *effectRec, reason, msg string) *BeginResult {
	res := &BeginResult{Decision: DecisionDenied, Reason: reason, Message: msg}
	if rec != nil {
		res.EffectID, res.Attempt, res.State = rec.EffectID, rec.Attempt+1, rec.State
	}
	return res
}

// evaluate runs the policy for a new key or a new attempt of an existing one.
func (e *Engine) evaluate(t *opTxn, in *beginInput, rec *effectRec, now time.Time) (*BeginResult, error) {
	req := &in.req
	pol := &in.pol
	// A halt refuses every attempt in its scope, undos too (halt.go).
	if h, err := haltFor(t, req.Namespace, req.EffectType, req.Operation, req.AgentID, req.Vendor); err != nil || h != nil {
		if err != nil {
			return nil, err
		}
		return halted(rec, h), nil
	}
	compensation := req.CompensatesEffectID != ""
	// undo: a compensation that skips approval thresholds and ceiling
	// checks (SPEC section 4, "undo must always be possible"). Only one an
	// unwind handed out qualifies (checkHandedOut), begun by its step's
	// agent, and only when it costs no more than its step was estimated at
	// when it was checked: the agent declares a compensation itself, so one
	// worth more (a $10,000 "refund" of a no-cost step) is checked like any
	// begin, but for the group.
	undo := false
	var target *effectRec
	if compensation {
		var err error
		if target, err = e.compensationTarget(t, in); err != nil {
			return nil, err
		}
		if len(in.dims) == 0 { // the undo targets whom its step did
			in.dims = target.Dimensions
		}
		// What an undo may skip is capped at the cost its step was checked
		// (and approved) at, never at an actual cost the agent reported
		// later: a step begun at $1 and reported at $10,000 does not unlock
		// a $10,000 "refund".
		var checked int64
		if target.EstimatedCostMicros != nil {
			checked = *target.EstimatedCostMicros
		}
		undo = req.EstimatedCostMicros != nil && *req.EstimatedCostMicros <= checked
	}
	// The group the effect joined when it was first begun decides, not the
	// request: a retry that drops or changes group_key is still a step of
	// the group it joined.
	group := req.GroupKey
	if rec != nil {
		group = rec.GroupKey
	}
	if group != "" && !compensation {
		var g groupRec
		err := getJSON(t, key(kindGroup, req.Namespace, group), &g)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if err == nil {
			if err := e.checkJoin(t, req, group, &g); err != nil {
				return nil, err
			}
		}
		if g.State == GroupUnwinding || g.State == GroupUnwound {
			return denied(rec, ReasonGroupUnwinding, fmt.Sprintf("Group %q is being rolled back. Do not perform new steps in it; perform only the compensations its unwind returns.", truncate(group, 64))), nil
		}
	}
	approved := rec != nil && rec.approvalCovers(req.EstimatedCostMicros, now)
	g := &gate{t: t, in: in, rec: rec, undo: undo, approved: approved}
	for _, check := range gateChecks {
		if r, err := g.run(check); err != nil || r != nil {
			if err != nil {
				return nil, err
			}
			return r.res, r.err
		}
	}
	// A user confirmation (confirm_with) is asked before ceilings and
	// approval, so a rule may ask for both; an approved request was
	// confirmed when it was made.
	if pol.asksUser(req.EstimatedCostMicros) && !undo && !approved && req.Confirmation == nil {
		return nil, &Error{Code: CodeConfirmationRequired, Message: fmt.Sprintf(
			"a rule asks the user to confirm %s actions in their MCP client (a form), and this call carries no confirmation: "+
				"do not perform it; tell the user it needs their confirmation from an MCP client that shows forms", req.EffectType)}
	}
	uses, err := ceilingsFor(t, in, now)
	if err != nil {
		return nil, err
	}
	var uncounted []string
	for _, u := range uses {
		if u.c.money && req.EstimatedCostMicros == nil && !u.c.observed {
			uncounted = append(uncounted, u.c.Name)
		}
		if undo {
			continue
		}
		if u.c.observed { // it counts (reserve, below) but never refuses
			if ok, err := u.admit(t, now); err != nil {
				return nil, err
			} else if !ok {
				in.note(observation{would: WouldDeny, reason: ReasonBudgetExceeded, rule: u.c.Name})
			}
			continue
		}
		if ok, err := u.admit(t, now); err != nil {
			return nil, err
		} else if !ok {
			b := u.budget(now)
			res := denied(rec, ReasonBudgetExceeded, fmt.Sprintf(
				"Ceiling %q would be exceeded (%d of %d %s counted, this action adds %d). Do not perform it; tell the user the budget is spent.",
				u.c.Name, b.Counted, b.Limit, b.Unit, u.amount))
			res.Ceiling = &b
			return res, nil
		}
	}
	var grant *Grant // a scoped approval that covers it (grants.go)
	if g.overThreshold(&pol.gates) {
		// A grant is one operator's decision: it never stands in for a
		// quorum of several people (approvers_required).
		need := pol.approvers(*req.EstimatedCostMicros)
		var gr *Grant
		if need == 1 {
			if gr, err = e.grantForEffect(t, req.Namespace, req.EffectType, req.Operation, req.AgentID, req.RunID, *req.EstimatedCostMicros, now); err != nil {
				return nil, err
			}
		}
		if gr == nil {
			return e.requestApproval(t, in, rec, *pol.threshold, need, now)
		}
		grant = gr
		if err := e.useGrant(t, gr, in, rec, now); err != nil {
			return nil, err
		}
	}
	if g.overThreshold(&pol.observe) {
		in.note(observation{would: WouldRequireApproval, reason: reasonApprovalRequired})
	}
	if approved { // an approval is for one execute: a later attempt asks again
		rec.Approval.UsedAt = &now
	}
	res, err := e.execute(t, in, rec, uses, now)
	if err != nil {
		return nil, err
	}
	if grant != nil {
		res.GrantID = grant.GrantID
		res.Message += fmt.Sprintf(" Grant %s covers it: no approval request was needed.", grant.GrantID)
	}
	if target != nil {
		res.Message = fmt.Sprintf("Perform this compensation now (it undoes %s), then report its outcome.", target.EffectID)
	}
	if len(uncounted) > 0 {
		res.BudgetWarning = &BudgetWarning{Ceilings: uncounted, Message: "A spend ceiling applies to this action but no estimated_cost_micros was sent, so nothing was counted against it. Tell the operator, and send the cost on every begin that spends money."}
	}
	res.DimensionWarning = dimensionWarning(in)
	return res, nil
}

// A gate runs the checks of SPEC section 4's order that refuse a begin
// besides its ceilings over the enforced rules' gates (a refusal is the
// answer) and then over the observed rules' (a refusal is noted:
// observe.go), so the two modes cannot disagree on what a rule refuses.
// The ceilings come after these (evaluate, one loop for both modes) and
// the approval threshold after them (overThreshold).
type gate struct {
	t              *opTxn
	in             *beginInput
	rec            *effectRec
	undo, approved bool
	unreported     *agentRec // read once, for both modes
}

// A refusal is what a check answers a begin it refuses: res or err for an
// enforced rule, the observation for an observed one.
type refusal struct {
	observation
	res *BeginResult
	err error
}

// gateChecks are the checks a gate runs, in SPEC section 4's order.
var gateChecks = [...]func(g *gate, r *gates) (*refusal, error){(*gate).deny, (*gate).unreportedLimit, (*gate).requiredDimensions, (*gate).costRequired}

// run runs check over the enforced gates and then the observed ones.
func (g *gate) run(check func(g *gate, r *gates) (*refusal, error)) (*refusal, error) {
	if r, err := check(g, &g.in.pol.gates); err != nil || r != nil {
		return r, err
	}
	r, err := check(g, &g.in.pol.observe)
	if r != nil {
		g.in.note(r.observation)
	}
	return nil, err
}

func (g *gate) deny(r *gates) (*refusal, error) {
	if r.deny == "" {
		return nil, nil
	}
	return &refusal{observation: observation{would: WouldDeny, reason: ReasonPolicyDenied, rule: r.deny},
		res: denied(g.rec, ReasonPolicyDenied, fmt.Sprintf("Policy forbids %s actions. Do not perform it; tell the user it is not allowed.", g.in.req.EffectType))}, nil
}

func (g *gate) unreportedLimit(r *gates) (*refusal, error) {
	if r.maxUnreported == 0 {
		return nil, nil
	}
	if g.unreported == nil {
		a, _, err := readAgent(g.t, g.in.req.Namespace, g.in.req.AgentID)
		if err != nil {
			return nil, err
		}
		g.unreported = &a
	}
	n := g.unreported.Count
	if n < r.maxUnreported {
		return nil, nil
	}
	return &refusal{observation: observation{would: WouldDeny, reason: ReasonUnreported},
		res: denied(g.rec, ReasonUnreported, fmt.Sprintf("This agent has %d effects whose leases expired without a report (policy allows %d). Do not perform it; an operator must resolve them first, and every action must be reported after it is done.", n, r.maxUnreported))}, nil
}

func (g *gate) requiredDimensions(r *gates) (*refusal, error) {
	for _, d := range r.requireDims {
		if _, ok := g.in.dims[d]; !ok {
			return &refusal{observation: observation{would: WouldRequireDimension, reason: d},
				err: &Error{Code: CodeDimensionRequired, Field: "dimensions." + d, Message: fmt.Sprintf(
					"policy requires dimension %q for %s; begin again with dimensions {%q: <who or what this action targets>}", d, g.in.req.EffectType, d)}}, nil
		}
	}
	return nil, nil
}

func (g *gate) costRequired(r *gates) (*refusal, error) {
	if r.threshold == nil || g.in.req.EstimatedCostMicros != nil || g.undo || g.approved {
		return nil, nil
	}
	return &refusal{observation: observation{would: WouldRequireCost},
		err: &Error{Code: CodeCostRequired, Field: "estimated_cost_micros", Message: fmt.Sprintf(
			"an approval threshold applies to %s; begin again with estimated_cost_micros (micro-USD, 1000000 = $1)", g.in.req.EffectType)}}, nil
}

// overThreshold reports whether r's approval threshold asks a human about
// the begin: for the enforced rules, unless a grant covers it (evaluate).
// It comes after the ceilings, and costRequired has made sure an enforced
// threshold has a cost to compare.
func (g *gate) overThreshold(r *gates) bool {
	cost := g.in.req.EstimatedCostMicros
	return r.threshold != nil && !g.undo && !g.approved && cost != nil && *cost >= *r.threshold
}

// dimensionWarning names the enforced ceilings of a begin's rules that are
// per a dimension the begin did not declare, and so did not apply to it
// (scopeOf): nil when there are none. Declaring is the agent's to do and
// require_dimensions the operator's way to make it so; until then the
// answer, ratchet_dimension_warnings_total and the effect.begun audit
// record say which ceiling was not applied, so that a limit never fails to
// apply unseen.
func dimensionWarning(in *beginInput) *DimensionWarning {
	var w *DimensionWarning
	for _, c := range in.pol.ceilings {
		if _, ok := in.dims[c.dim]; c.dim == "" || ok || c.observed {
			continue
		}
		if w == nil {
			w = &DimensionWarning{}
		}
		w.Ceilings = append(w.Ceilings, c.Name)
		if !contains(w.Dimensions, c.dim) {
			w.Dimensions = append(w.Dimensions, c.dim)
		}
	}
	if w != nil {
		w.Message = fmt.Sprintf("A ceiling per dimension applies to this action but the begin declared no %s, so the ceiling was not applied. "+
			"Tell the operator, and declare %s on every begin of this type.", strings.Join(w.Dimensions, ", "), strings.Join(w.Dimensions, ", "))
	}
	return w
}

// approvalCovers reports whether a granted, unexpired approval covers a
// begin declaring cost: an approval is for the cost it was asked for, so a
// larger estimate asks again, and a begin that declares no cost is not
// covered (it would count nothing against the ceilings the approver saw).
func (r *effectRec) approvalCovers(cost *int64, now time.Time) bool {
	a := r.Approval
	if a == nil || a.State != ApprovalApproved || a.UsedAt != nil || !now.Before(a.ExpiresAt) {
		return false
	}
	return cost != nil && *cost <= a.EstimatedCostMicros
}

// noNull is a canonical payload with null as no payload.
func noNull(p []byte) []byte {
	if string(p) == "null" {
		return nil
	}
	return p
}

func compensationRole(compensates string) string {
	if compensates == "" {
		return "for an ordinary action"
	}
	return "for the compensation of effect " + compensates
}

func (e *Engine) compensationTarget(t *opTxn, in *beginInput) (*effectRec, error) {
	req := &in.req
	target, err := e.effectByID(t, req.Namespace, req.CompensatesEffectID)
	if errors.Is(err, ErrNotFound) {
		return nil, &Error{Code: CodeEffectNotFound, Field: "compensates_effect_id", Message: fmt.Sprintf(
			"no effect %q in this namespace; use the compensates_effect_id that the group's unwind returned", truncate(req.CompensatesEffectID, 64))}
	}
	if err != nil {
		return nil, err
	}
	// An undo is its step's owner's to perform (and so to report: a report
	// is its attempt's agent's): another agent's "compensation", reported
	// succeeded, would mark the step compensated with nothing undone. The
	// group's owner may undo every step of its group too: one a caller
	// fixing no agent added under another label is in the owner's work.
	if !req.AgentClaimed && req.AgentID != target.owner() {
		if ok, err := e.ownsGroup(t, target, req.AgentID); err != nil || !ok {
			if err != nil {
				return nil, err
			}
			return nil, &Error{Code: CodeUnauthorized, Field: "compensates_effect_id", Message: fmt.Sprintf(
				"effect %s was performed by another agent; your credentials may begin only the compensations of your own steps", target.EffectID)}
		}
	}
	// A compensation is a member of its step's group, whether or not it
	// names it (an unwind's entry does not): the group's listing shows the
	// undo, and its unwind lists it while its outcome is unknown. It joins
	// no other group: one begun into another group would hold that group
	// back.
	if req.GroupKey != "" && req.GroupKey != target.GroupKey {
		return nil, invalidArg("group_key", "a compensation is in its step's group (%q); omit group_key", truncate(target.GroupKey, 64))
	}
	req.GroupKey = target.GroupKey
	switch {
	case target.CompensatesEffectID != "":
		return nil, invalidArg("compensates_effect_id", "effect %s is itself a compensation and cannot be compensated", target.EffectID)
	case target.State == StateCompensated:
		return nil, newErr(CodeInvalidStateTransition, "effect %s was already compensated by %s", target.EffectID, target.CompensatedBy)
	case target.State != StateSucceeded:
		return nil, newErr(CodeInvalidStateTransition, "effect %s is %s; only succeeded effects can be compensated", target.EffectID, target.State)
	}
	if err := e.checkHandedOut(t, in, target); err != nil {
		return nil, err
	}
	return target, nil
}

// checkHandedOut refuses a compensation that is not one an unwind handed
// out: a compensation skips approvals and ceiling checks, so calling an
// action an undo must never unlock spending (SPEC section 4). Its target must
// be a step of a group being unwound that declared a compensation, and the
// begin must be that compensation: its type, vendor and payload, the undo
// key the unwind returned, its description or none, and a cost no higher
// than declared (none or 0 when none or 0 was declared).
func (e *Engine) checkHandedOut(t *opTxn, in *beginInput, target *effectRec) error {
	req := &in.req
	const how = "; begin a compensation only as the unwind returned it"
	if target.GroupKey == "" {
		return invalidArg("compensates_effect_id", "effect %s is in no group, so nothing unwinds it%s", target.EffectID, how)
	}
	var g groupRec
	if err := getJSON(t, key(kindGroup, target.Namespace, target.GroupKey), &g); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if g.State != GroupUnwinding {
		return invalidArg("compensates_effect_id", "the group of effect %s is not being unwound; unwind the group first%s", target.EffectID, how)
	}
	c := target.Compensation
	if c == nil {
		return invalidArg("compensates_effect_id", "effect %s declared no compensation: it is permanent and cannot be undone", target.EffectID)
	}
	want, err := e.undoKey(t, target)
	if err != nil {
		return err
	}
	if req.IdempotencyKey != want {
		return invalidArg("idempotency_key", "the compensation of effect %s must be begun with idempotency_key %q%s", target.EffectID, want, how)
	}
	if req.Description != "" && req.Description != c.Description {
		return invalidArg("description", "differs from the description declared for the compensation of effect %s%s", target.EffectID, how)
	}
	if req.EffectType != c.EffectType {
		return invalidArg("effect_type", "the compensation of effect %s was declared as %q, not %q%s", target.EffectID, c.EffectType, req.EffectType, how)
	}
	if req.Vendor != c.Vendor {
		return invalidArg("vendor", "the compensation of effect %s was declared with vendor %q, not %q%s", target.EffectID, c.Vendor, req.Vendor, how)
	}
	if !bytes.Equal(noNull(in.payload), noNull(c.Payload)) {
		return invalidArg("payload", "differs from the compensation payload declared for effect %s%s", target.EffectID, how)
	}
	switch cost := req.EstimatedCostMicros; {
	case c.EstimatedCostMicros == nil && cost != nil && *cost > 0:
		return invalidArg("estimated_cost_micros", "the compensation of effect %s declared no cost, so it may declare none (or 0)", target.EffectID)
	case c.EstimatedCostMicros != nil && *c.EstimatedCostMicros > 0 && cost == nil:
		return invalidArg("estimated_cost_micros", "is required: the compensation of effect %s declared %d micro-USD; send that or less", target.EffectID, *c.EstimatedCostMicros)
	case c.EstimatedCostMicros != nil && cost != nil && *cost > *c.EstimatedCostMicros:
		return invalidArg("estimated_cost_micros", "%d is more than the %d micro-USD declared for the compensation of effect %s", *cost, *c.EstimatedCostMicros, target.EffectID)
	}
	return nil
}

func (e *Engine) requestApproval(t *opTxn, in *beginInput, rec *effectRec, threshold int64, need int, now time.Time) (*BeginResult, error) {
	req := &in.req
	if rec == nil {
		rec = e.newEffect(in, now)
	}
	rec.State = StateAwaitingApproval
	prior := rec.Approval
	if rec.Approval != nil { // its id still answers "superseded" until the effect is purged
		rec.PriorApprovals = append(rec.PriorApprovals, rec.Approval.ApprovalID)
	}
	rec.Approval = &Approval{
		ApprovalID: e.ids.next("apr_", now), EffectID: rec.EffectID, Namespace: rec.Namespace,
		EffectType: rec.EffectType, AgentID: req.AgentID, RunID: req.RunID,
		EstimatedCostMicros: *req.EstimatedCostMicros, ThresholdMicros: threshold,
		RequestedAt: now, ExpiresAt: now.Add(e.defaults.ApprovalTTL), State: ApprovalPending,
	}
	if need > 1 {
		rec.Approval.ApproversRequired = need
	}
	rec.EstimatedCostMicros = req.EstimatedCostMicros
	if err := t.Set(key(kindApproval, rec.Approval.ApprovalID), []byte(rec.EffectID)); err != nil {
		return nil, err
	}
	if err := e.approvalRequested(t, rec, prior); err != nil {
		return nil, err
	}
	if err := e.putEffect(t, rec, now); err != nil {
		return nil, err
	}
	ev := effectEvent(EventApprovalRequested, rec)
	ev.AgentID, ev.ApprovalID, ev.CostMicros = req.AgentID, rec.Approval.ApprovalID, req.EstimatedCostMicros
	ev.Compensation = rec.Compensation.withoutPayload()
	ev.ApproversRequired = rec.Approval.ApproversRequired
	t.emit(ev)
	return e.approvalAnswer(rec, now), nil
}

func (e *Engine) newEffect(in *beginInput, now time.Time) *effectRec {
	req := &in.req
	rec := &effectRec{Dimensions: in.dims}
	rec.Effect = Effect{
		EffectID: e.ids.next("eff_", now), Namespace: req.Namespace, IdempotencyKey: req.IdempotencyKey,
		EffectType: req.EffectType, Vendor: req.Vendor, Operation: req.Operation, RunID: req.RunID, AgentID: req.AgentID,
		GroupKey: req.GroupKey, Fingerprint: in.fingerprint, Compensation: req.Compensation,
		CompensatesEffectID: req.CompensatesEffectID, CreatedAt: now,
	}
	return rec
}

func (e *Engine) execute(t *opTxn, in *beginInput, rec *effectRec, uses []*ceilingUse, now time.Time) (*BeginResult, error) {
	req := &in.req
	minted := rec == nil
	if minted {
		rec = e.newEffect(in, now)
	}
	res, err := reserve(t, uses, now)
	if err != nil {
		return nil, err
	}
	if err := e.fireThresholds(t, in, uses, now); err != nil {
		return nil, err
	}
	lease := now.Add(time.Duration(in.lease) * time.Second)
	rec.State, rec.Attempt, rec.Reservations = StatePending, rec.Attempt+1, res
	rec.AttemptAgent = req.AgentID
	rec.LeaseExpiresAt, rec.GrantedAt = &lease, now
	rec.EstimatedCostMicros, rec.ActualCostMicros = req.EstimatedCostMicros, nil
	rec.Reason, rec.Since, rec.Error, rec.CompletedAt = "", nil, "", nil
	// A new attempt keeps the effect's first run and agent labels (its
	// listings stay put); its reservations follow this begin's labels.
	if err := e.indexLease(t, rec, lease, minted, now); err != nil {
		return nil, err
	}
	if err := e.putEffect(t, rec, now); err != nil {
		return nil, err
	}
	out := &BeginResult{Decision: DecisionExecute, EffectID: rec.EffectID, Attempt: rec.Attempt,
		State: StatePending, LeaseExpiresAt: &lease,
		Message: "Perform the action now, then report its outcome for effect_id " + rec.EffectID + " before the lease ends."}
	if req.Vendor != "" {
		k := e.vendorKey(rec)
		if err := indexVendorKey(t, rec, k.Value); err != nil {
			return nil, err
		}
		out.VendorIdempotencyKey = &k
		out.Message += fmt.Sprintf(" Send vendor_idempotency_key.value to %s as its own idempotency key (%s %q).", req.Vendor, k.Location, k.Name)
	}
	for _, u := range uses {
		if !u.c.observed { // the agent is answered as if observed rules were absent
			if out.Budgets == nil {
				out.Budgets = make([]BudgetUse, 0, len(uses))
			}
			out.Budgets = append(out.Budgets, u.budget(now))
		}
	}
	return out, nil
}

// vendorKey derives the vendor's idempotency key for the current attempt:
// deterministic in namespace, key, attempt and vendor, unguessable without
// the server secret, and new for every attempt. It is made from the
// digest's bytes (122 random bits in the UUID). It is handed out when the
// attempt is granted; no later answer to an agent derives it again. The
// operator's view of an effect (AttemptKeys) and the purge derive it again
// for past attempts, so a change to the derivation must keep the old one
// for attempts granted before it.
func (e *Engine) vendorKey(rec *effectRec) vendors.Key {
	digest := e.macs.keyedSum("vendor-key", rec.Namespace, rec.IdempotencyKey, fmt.Sprint(rec.Attempt), rec.Vendor)
	return e.vendors.ShapeKey(rec.Vendor, digest)
}

// integrationWarning reports an agent's unreported lease expiries.
func (e *Engine) integrationWarning(t *opTxn, ns, agent string) (*IntegrationWarning, error) {
	a, _, err := readAgent(t, ns, agent)
	if err != nil || a.Count == 0 {
		return nil, err
	}
	return &IntegrationWarning{UnreportedCount: a.Count, OldestEffectID: a.Oldest, OldestSince: a.Since,
		Message: "You have begun effects whose leases expired without a report. Report the outcome after every action, and tell the operator: those effects are blocked until resolved."}, nil
}

// notApplied is what an effect.begun record says of a dimension warning.
func notApplied(res *BeginResult) []string {
	if res.DimensionWarning == nil {
		return nil
	}
	return res.DimensionWarning.Ceilings
}

// grantForEffect is grantFor by the effect type, then by the operation:
// as for rules, a grant made on the proxy's old names (stripe.*) still
// covers the proxied calls it covered, now typed payment.charge.
func (e *Engine) grantForEffect(t *opTxn, ns, effectType, operation, agent, run string, cost int64, now time.Time) (*Grant, error) {
	g, err := e.grantFor(t, ns, effectType, agent, run, cost, now)
	if g != nil || err != nil || operation == "" {
		return g, err
	}
	return e.grantFor(t, ns, operation, agent, run, cost, now)
}

// confirmedBy is who confirmed a begin for its user, as effect.begun
// records it: the MCP client that answered the form.
func confirmedBy(req *BeginRequest) string {
	if req.Confirmation == nil {
		return ""
	}
	// The client names itself (MCP clientInfo): its control and invisible
	// characters, which every other recorded text is refused, are shown as
	// U+FFFD so that the name cannot start a forged line in a listing.
	name := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || isInvisible(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(req.Confirmation.Client, "\uFFFD"))
	return "user via client:" + truncate(name, 128)
}

// confirmNote says how soon the client answered: a host that accepts on
// its own answers in milliseconds, a person in seconds.
func confirmNote(req *BeginRequest) string {
	if req.Confirmation == nil {
		return ""
	}
	return fmt.Sprintf("user confirmation accepted after %d ms", req.Confirmation.AnswerMS)
}
