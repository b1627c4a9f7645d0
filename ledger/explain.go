package ledger

import (
	"context"
	"errors"
	"time"
)

// Explain. An operator asks what a begin would get before it matters, and
// a support engineer why one was refused: Explain answers with the rules
// that match it, the ceilings that apply with what they count now, the
// threshold, the required dimensions, and the decision. It records
// nothing.
//
// There is one evaluation path: Explain validates the begin as Begin does
// (validateBegin) and runs the writer's own decision (begin, and so
// evaluate, ceilings, grants, approvals) against a read-only view of the
// ledger, with an opTxn whose buffered writes and events are dropped
// instead of committed. What it answers is therefore what Begin would
// answer at that moment, by construction; a begin racing it may of course
// change what the next one gets. Two things are not done in a dry run:
// budget alerts are not fired (the writer's memory of fired thresholds is
// the writer's alone), and nothing is logged, counted or audited as a
// begin.

// Explanation is what a begin would get and why.
type Explanation struct {
	EffectType string `json:"effect_type"`
	Vendor     string `json:"vendor,omitempty"`
	Operation  string `json:"operation,omitempty"`
	// Rules are the rules that match the begin, in file order.
	Rules []ExplainedRule `json:"rules"`
	// ThresholdMicros is the enforced approval threshold, if any.
	ThresholdMicros *int64 `json:"threshold_micros,omitempty"`
	// ApproversRequired is how many people must approve the begin's cost
	// when more than one (approvers_required).
	ApproversRequired int `json:"approvers_required,omitempty"`
	// RequireDimensions are the dimensions enforced rules require.
	RequireDimensions []string `json:"require_dimensions,omitempty"`
	// Ceilings are every ceiling of the matching rules, with its count
	// now for the begin's scope, or why it does not apply.
	Ceilings []ExplainedCeiling `json:"ceilings,omitempty"`
	// Decision is the answer the begin would get, or nil when it would be
	// refused with Error (invalid_argument, dimension_required, …).
	Decision *BeginResult `json:"decision,omitempty"`
	Error    *Error       `json:"error,omitempty"`
	// Observed is what observed rules (mode: observe) would have answered
	// instead, when that differs from Decision.
	Observed *ExplainedObservation `json:"observed,omitempty"`
}

// ExplainedRule is one matching rule.
type ExplainedRule struct {
	Index     int    `json:"index"` // its place in policies
	Match     string `json:"match"`
	Vendor    string `json:"vendor,omitempty"`
	Operation string `json:"operation,omitempty"`
	Mode      string `json:"mode"` // enforce or observe
	Deny      bool   `json:"deny,omitempty"`
}

// ExplainedCeiling is one ceiling as it applies to the begin.
type ExplainedCeiling struct {
	BudgetUse
	Observed bool `json:"observed,omitempty"`
	// NotApplied, when set, is why the ceiling does not apply (a
	// dimension the begin does not declare); Counted is then zero.
	NotApplied string `json:"not_applied,omitempty"`
}

// ExplainedObservation is what the observed rules would have answered.
type ExplainedObservation struct {
	Would  string `json:"would"`
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
}

// readOnly is a Reader as a Txn for a dry run: opTxn buffers every write,
// and a dry run never flushes them.
type readOnly struct{ Reader }

var errDryRun = errors.New("a dry run writes nothing")

func (readOnly) Set([]byte, []byte) error { return errDryRun }
func (readOnly) Delete([]byte) error      { return errDryRun }

// Explain answers what Begin would answer req now, and why, recording
// nothing. Its error is for the explanation itself (the ledger could not be
// read); a begin that would be refused is an Explanation with Error.
func (e *Engine) Explain(ctx context.Context, req BeginRequest) (*Explanation, error) {
	ex := &Explanation{EffectType: req.EffectType, Vendor: req.Vendor, Operation: req.Operation, Rules: []ExplainedRule{}}
	in, err := e.validateBegin(req)
	if err != nil {
		ex.Error = Classify(err)
		v, _ := checkVendor("vendor", req.Vendor)
		pol := e.policy.forEffect(req.EffectType, v, req.Operation)
		e.explainRules(ex, &pol)
		return ex, nil
	}
	ex.Vendor = in.req.Vendor
	e.explainRules(ex, &in.pol)
	if c, thr := in.req.EstimatedCostMicros, in.pol.threshold; c != nil && thr != nil && *c >= *thr {
		if n := in.pol.approvers(*c); n > 1 {
			ex.ApproversRequired = n
		}
	}
	err = e.view(ctx, func(r Reader) error {
		now := e.clock.Now()
		t := &opTxn{tx: readOnly{r}, dry: true}
		res, err := e.begin(t, in, now)
		var le *Error
		switch {
		case errors.As(err, &le):
			ex.Error = le
		case err != nil:
			return err
		default:
			ex.Decision = res
			if err := e.dryAnswer(r, in, res); err != nil {
				return err
			}
		}
		if o := in.observed; o != nil && (ex.Decision == nil || o.changes(ex.Decision.Decision)) {
			ex.Observed = &ExplainedObservation{Would: o.would, Reason: o.reason, Rule: o.rule}
		}
		// The counts as the begin found them, before its own writes.
		fresh := &opTxn{tx: readOnly{r}, dry: true}
		uses, err := ceilingsFor(fresh, in, now)
		if err != nil {
			return err
		}
		e.explainCeilings(ex, in, uses, now)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ex, nil
}

func (e *Engine) explainRules(ex *Explanation, pol *effectivePolicy) {
	for _, i := range pol.rules {
		r := e.policy.rules[i]
		mode := r.Mode
		if mode == "" {
			mode = ModeEnforce
		}
		ex.Rules = append(ex.Rules, ExplainedRule{Index: i, Match: r.Match, Vendor: r.Vendor, Operation: r.Operation, Mode: mode, Deny: r.Deny})
	}
	ex.ThresholdMicros = pol.threshold
	ex.RequireDimensions = pol.requireDims
}

func (e *Engine) explainCeilings(ex *Explanation, in *beginInput, uses []*ceilingUse, now time.Time) {
	applied := map[*ceiling]*ceilingUse{}
	for _, u := range uses {
		applied[u.c] = u
	}
	for _, c := range in.pol.ceilings {
		if u, ok := applied[c]; ok {
			ex.Ceilings = append(ex.Ceilings, ExplainedCeiling{BudgetUse: u.budget(now), Observed: c.observed})
			continue
		}
		ex.Ceilings = append(ex.Ceilings, ExplainedCeiling{
			BudgetUse: BudgetUse{Name: c.Name, Per: c.Per, Unit: c.unit(), Limit: c.limit, Remaining: c.limit, Window: c.Window},
			Observed:  c.observed, NotApplied: "the begin declares no " + c.dim + " dimension",
		})
	}
}

// dryAnswer drops from a dry run's answer what the dry run made up and
// nobody will find: the id of an effect or approval request that was not
// recorded, an execute's lease and vendor key. What exists (the key's
// effect, its pending approval) is kept.
func (e *Engine) dryAnswer(r Reader, in *beginInput, res *BeginResult) error {
	rec, err := e.effectByKey(r, in.req.Namespace, in.req.IdempotencyKey)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	if rec == nil {
		res.EffectID, res.Attempt, res.State = "", 0, ""
	}
	if res.Decision == DecisionExecute {
		res.LeaseExpiresAt, res.VendorIdempotencyKey = nil, nil
		res.Message = "A begin would execute: perform the action, then report its outcome."
	}
	if res.ApprovalID != "" && (rec == nil || rec.Approval == nil || rec.Approval.ApprovalID != res.ApprovalID) {
		res.ApprovalID, res.ExpiresAt, res.RetryAfterSeconds = "", nil, 0
		res.Message = "A begin would ask a human to approve this action (its cost reaches the threshold); it would not be performed until approved."
	}
	return nil
}
