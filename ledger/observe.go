package ledger

// Observe mode. A rule with mode: observe (or every rule, with the config's
// top-level mode: observe) is evaluated with the others, in SPEC section
// 4's order, but never decides: the answer is the one the enforced rules
// give, as if the observed rules were absent. When an observed rule would
// have refused a begin that the enforced rules let through (execute), or
// refused it before it reached a human (approval_required), the engine
// records what it would have answered: a policy.observed event in the
// same write as the decision (audited with it), a log line and
// ratchet_observed_total{effect_type,would}.
//
// An observed rule can never loosen an enforced one: it adds nothing to the
// enforced policy (no deny, threshold, dimension, ceiling, lease cap or
// unreported limit of it applies), so every rule that is enforced decides
// exactly as it would without it.
//
// An observed ceiling counts what the enforced rules let through, as an
// enforced one counts (reserved at execute, settled and released by
// reports), so it shows in "ratchet budgets", apart, how much of its limit
// real traffic would have used; it can count past its limit, since it never
// refuses. Turning a rule from observe to enforce keeps its counters.

// Observation outcomes: the "would" of a policy.observed event and of
// ratchet_observed_total.
const (
	WouldDeny              = "denied"
	WouldRequireApproval   = "approval_required"
	WouldRequireDimension  = "dimension_required"
	WouldRequireCost       = "cost_required"
	reasonApprovalRequired = "approval_threshold"
)

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// observation is what observed rules would have answered a begin: the
// first refusal in evaluation order.
type observation struct {
	would  string // a Would* value
	reason string // the reason of a denial, the dimension, or approval_threshold
	rule   string // the observed ceiling's name or the rule's match
}

// note records o unless an earlier refusal was noted.
func (in *beginInput) note(o observation) {
	if in.observed == nil {
		in.observed = &o
	}
}

// changes reports whether the observation would have changed decision d.
func (o *observation) changes(d Decision) bool {
	switch d {
	case DecisionExecute:
		return true
	case DecisionApprovalRequired:
		return o.would != WouldRequireApproval
	}
	return false
}

// ObserveModeObserver is an Observer that is also told of each observation
// (metrics: ratchet_observed_total).
type ObserveModeObserver interface {
	Observed(effectType, would string)
}
