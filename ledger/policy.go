package ledger

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"
)

// Rule is one entry of the policies list in the config file. Every rule that
// matches a begin applies, and the strictest value wins.
//
// A rule matches when its Match glob matches the begin's effect type, or
// its operation (the vendor's own name of a proxied call); and, when the
// rule names them, the begin's vendor is Vendor and its operation matches
// Operation. Matching the operation with Match keeps a rule written before
// the proxy's calls had vendor-neutral types (match: "stripe.*") governing
// the calls it governed: old names are aliases (config validate names the
// new type). Matching more can only make a begin's policy stricter, since
// the strictest value of every matching rule wins.
//
// Narrowing by Vendor or Operation is exact for the proxy, which sets both
// from the request it gates. An MCP agent declares its own vendor (and no
// operation), so a narrowed rule restricts what an agent declares, not what
// it does: put a limit every agent must meet in a rule that is not narrowed.
type Rule struct {
	// Match is a glob over effect types ("payment.*", "*"). "*" crosses dots.
	Match string `yaml:"match"`
	// Vendor, when set, limits the rule to begins of this vendor (stripe).
	Vendor string `yaml:"vendor,omitempty"`
	// Operation, when set, is a glob the begin's operation must match
	// (stripe.refunds.*); a begin with no operation never matches it.
	Operation string `yaml:"operation,omitempty"`
	// Deny refuses the effect type outright (policy_denied).
	Deny bool `yaml:"deny,omitempty"`
	// ApprovalThresholdMicros routes effects whose declared cost reaches it to
	// a human; nil means no threshold.
	ApprovalThresholdMicros *int64 `yaml:"approval_threshold_micros,omitempty"`
	// ApproversRequired is how many distinct people must approve what
	// the rule's threshold sends to a human (2 to MaxApprovers; zero is
	// one). With ApproversThresholdMicros, only effects declaring at least
	// that cost need them; below it one approver decides.
	ApproversRequired        int    `yaml:"approvers_required,omitempty"`
	ApproversThresholdMicros *int64 `yaml:"approvers_threshold_micros,omitempty"`
	// ConfirmWith "user" asks the agent's user to confirm the action in
	// their MCP client (a form showing what and how much, from what the
	// agent declared) before it may execute, from ConfirmThresholdMicros
	// on (nil: every begin; a begin without a cost is asked). A weaker
	// control than approval: it trusts the MCP host to show the prompt
	// to a person. A rule may ask for both; a begin that cannot be
	// confirmed (the proxy, a client without form elicitation) is
	// refused confirmation_required.
	ConfirmWith            string `yaml:"confirm_with,omitempty"`
	ConfirmThresholdMicros *int64 `yaml:"confirm_threshold_micros,omitempty"`
	// RequireDimensions names dimensions a begin must declare.
	RequireDimensions []string `yaml:"require_dimensions,omitempty"`
	// Ceilings limit money or count over a window per scope.
	Ceilings []Ceiling `yaml:"ceilings,omitempty"`
	// MaxLeaseSeconds caps lease_seconds; zero means the default cap.
	MaxLeaseSeconds int `yaml:"max_lease_seconds,omitempty"`
	// MaxUnreported denies an agent's begins once it has this many effects
	// whose leases expired without a report; zero means no limit.
	MaxUnreported int `yaml:"max_unreported,omitempty"`
	// Mode is ModeEnforce (the default, "") or ModeObserve: an observed
	// rule is evaluated and what it would have refused is logged, counted
	// and audited, but the answer is as if the rule were absent (see
	// observe.go).
	Mode string `yaml:"mode,omitempty"`
}

// Rule modes.
const (
	ModeEnforce = "enforce"
	ModeObserve = "observe"
)

// Ceiling is a limit on money (micro-USD) or count over a window per scope.
// Exactly one of LimitMicros and LimitCount is set.
type Ceiling struct {
	Name        string `yaml:"name"`
	LimitMicros *int64 `yaml:"limit_micros,omitempty"`
	LimitCount  *int64 `yaml:"limit_count,omitempty"`
	// Window is a Go duration ("24h", "90m") or "run" for the lifetime of a run.
	Window string `yaml:"window"`
	// Per is global, agent, run or dimension:<name>.
	Per string `yaml:"per"`
	// OnThreshold "halt": when the highest of the budget thresholds
	// (Options.BudgetThresholds) fires for this ceiling, the same write
	// halts the rule's effect types in the namespace (only the agent's,
	// per agent), as an operator's halt would (halt.go).
	OnThreshold string `yaml:"on_threshold,omitempty"`
}

// OnThresholdHalt is Ceiling.OnThreshold's one action.
const OnThresholdHalt = "halt"

// FieldError is a validation problem at a path such as
// "policies[1].ceilings[0].window". Config loaders turn the path into a line.
type FieldError struct {
	Path    string
	Message string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Message }

var (
	globRe      = regexp.MustCompile(`^[a-z0-9_.*?\-\[\]^!]+$`)
	dimNameRe   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	ceilingName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)
)

// ValidatePolicies checks rules and returns every problem found, each with the
// path of the field at fault.
func ValidatePolicies(rules []Rule) []*FieldError {
	var errs []*FieldError
	add := func(p, format string, args ...any) {
		errs = append(errs, &FieldError{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	names := map[string]string{}
	for i, r := range rules {
		rp := fmt.Sprintf("policies[%d]", i)
		if r.Match == "" {
			add(rp+".match", "is required (a glob over effect types, e.g. \"payment.*\")")
		} else if _, err := path.Match(r.Match, ""); err != nil || !globRe.MatchString(r.Match) {
			add(rp+".match", "%q is not a valid glob over lowercase effect types", r.Match)
		}
		if r.Vendor != "" && (r.Vendor != strings.ToLower(r.Vendor) || !vendorRe.MatchString(r.Vendor) || len(r.Vendor) > MaxVendorNameLen) {
			add(rp+".vendor", "%q is not a vendor name (lowercase, e.g. stripe)", r.Vendor)
		}
		if r.Operation != "" {
			if _, err := path.Match(r.Operation, ""); err != nil || !globRe.MatchString(r.Operation) {
				add(rp+".operation", "%q is not a valid glob over lowercase operations (e.g. stripe.refunds.*)", r.Operation)
			}
		}
		if t := r.ApprovalThresholdMicros; t != nil && *t < 0 {
			add(rp+".approval_threshold_micros", "must be >= 0, got %d", *t)
		}
		checkApprovers(r, rp, add)
		switch {
		case r.ConfirmWith != "" && r.ConfirmWith != "user":
			add(rp+".confirm_with", "%q is not who confirms; the one there is: user", r.ConfirmWith)
		case r.ConfirmWith != "" && r.Mode == ModeObserve:
			add(rp+".confirm_with", "an observed rule asks no one, so it asks no user either")
		case r.ConfirmThresholdMicros != nil && r.ConfirmWith == "":
			add(rp+".confirm_threshold_micros", "applies confirm_with: user, which this rule does not set")
		case r.ConfirmThresholdMicros != nil && *r.ConfirmThresholdMicros < 0:
			add(rp+".confirm_threshold_micros", "must be >= 0, got %d", *r.ConfirmThresholdMicros)
		}
		if r.MaxLeaseSeconds < 0 {
			add(rp+".max_lease_seconds", "must be >= 0, got %d", r.MaxLeaseSeconds)
		}
		if r.MaxUnreported < 0 {
			add(rp+".max_unreported", "must be >= 0, got %d", r.MaxUnreported)
		}
		if r.Mode != "" && r.Mode != ModeEnforce && r.Mode != ModeObserve {
			add(rp+".mode", "%q must be enforce or observe", r.Mode)
		}
		for j, d := range r.RequireDimensions {
			if !dimNameRe.MatchString(d) {
				add(fmt.Sprintf("%s.require_dimensions[%d]", rp, j), "%q is not a dimension name (lowercase letters, digits, _)", d)
			}
		}
		for j, c := range r.Ceilings {
			cp := fmt.Sprintf("%s.ceilings[%d]", rp, j)
			switch {
			case c.Name == "":
				add(cp+".name", "is required")
			case !ceilingName.MatchString(c.Name):
				add(cp+".name", "%q must be 1-63 letters, digits, '.', '_' or '-'", c.Name)
			case names[c.Name] != "":
				add(cp+".name", "%q is already used by %s; ceiling names must be unique", c.Name, names[c.Name])
			default:
				names[c.Name] = cp
			}
			switch {
			case c.LimitMicros == nil && c.LimitCount == nil:
				add(cp, "needs limit_micros or limit_count")
			case c.LimitMicros != nil && c.LimitCount != nil:
				add(cp, "has both limit_micros and limit_count; use one")
			case c.LimitMicros != nil && *c.LimitMicros < 0:
				add(cp+".limit_micros", "must be >= 0, got %d", *c.LimitMicros)
			case c.LimitCount != nil && *c.LimitCount < 0:
				add(cp+".limit_count", "must be >= 0, got %d", *c.LimitCount)
			}
			if _, err := parseWindow(c.Window); err != nil {
				add(cp+".window", "%v", err)
			}
			if err := checkPer(c.Per); err != nil {
				add(cp+".per", "%v", err)
			}
			switch {
			case c.OnThreshold != "" && c.OnThreshold != OnThresholdHalt:
				add(cp+".on_threshold", "%q is not an action; the one there is: halt", c.OnThreshold)
			case c.OnThreshold != "" && r.Mode == ModeObserve:
				add(cp+".on_threshold", "an observed rule refuses nothing, so it cannot halt either")
			}
		}
	}
	return errs
}

// parseWindow returns the window length, or zero for "run".
func parseWindow(w string) (time.Duration, error) {
	if w == "run" {
		return 0, nil
	}
	if w == "" {
		return 0, fmt.Errorf("is required (e.g. 24h, 1h or run)")
	}
	d, err := time.ParseDuration(w)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (e.g. 24h, 90m) or \"run\"", w)
	}
	if d < time.Second || d > 366*24*time.Hour {
		return 0, fmt.Errorf("%q must be between 1s and 8784h", w)
	}
	return d, nil
}

func checkPer(p string) error {
	switch p {
	case "global", "agent", "run":
		return nil
	case "":
		return fmt.Errorf("is required: global, agent, run or dimension:<name>")
	}
	if name, ok := strings.CutPrefix(p, "dimension:"); ok {
		if dimNameRe.MatchString(name) {
			return nil
		}
		hint := ""
		if low := strings.ToLower(name); low != name && dimNameRe.MatchString(low) {
			hint = fmt.Sprintf(" (did you mean dimension:%s?)", low)
		}
		return fmt.Errorf("%q: a dimension name is lowercase letters, digits and _ (at most 63), as agents send it%s", p, hint)
	}
	return fmt.Errorf("%q must be global, agent, run or dimension:<name>", p)
}

// ceiling is a validated Ceiling ready for use.
type ceiling struct {
	Ceiling
	window time.Duration // zero for run windows
	limit  int64
	money  bool
	dim    string // dimension name for per dimension:<name>
	// observed: the ceiling's rule is observed; it counts, but never
	// refuses (observe.go).
	observed bool
	match    string // its rule's glob: what on_threshold: halt halts
}

// effectivePolicy is the strictest combination of every rule matching one
// effect type.
type effectivePolicy struct {
	gates             // of the enforced rules
	quorums  []quorum // of the enforced rules (approvers_required)
	ceilings []*ceiling
	maxLease int
	// confirm: an enforced rule asks the user (confirm_with), from
	// confirmFrom on (nil: always).
	confirm     bool
	confirmFrom *int64
	// observe is what the observed rules that match would add; their
	// ceilings are in ceilings, marked observed.
	observe gates
	// rules are the indexes of the matching rules, in file order
	// (Explain).
	rules []int
}

// gates are what the rules of one mode (enforced, or observed: observe.go)
// refuse a begin for besides their ceilings, each the strictest of the
// matching rules'. Begin runs the same checks over both (see gate).
type gates struct {
	deny          string // the match of the first deny rule, "" for none
	threshold     *int64
	requireDims   []string
	maxUnreported int
}

func (g *gates) add(r Rule) {
	if r.Deny && g.deny == "" {
		g.deny = r.Match
	}
	if t := r.ApprovalThresholdMicros; t != nil && (g.threshold == nil || *t < *g.threshold) {
		g.threshold = t
	}
	for _, d := range r.RequireDimensions {
		if !contains(g.requireDims, d) {
			g.requireDims = append(g.requireDims, d)
		}
	}
	g.maxUnreported = minPositive(g.maxUnreported, r.MaxUnreported)
}

// policy is the compiled policy: rules in file order.
type policy struct {
	rules    []Rule
	ceilings [][]*ceiling
}

func compilePolicy(rules []Rule) (*policy, error) {
	if errs := ValidatePolicies(rules); len(errs) > 0 {
		return nil, fmt.Errorf("invalid policy: %w", errs[0])
	}
	p := &policy{rules: rules, ceilings: make([][]*ceiling, len(rules))}
	for i, r := range rules {
		for _, c := range r.Ceilings {
			w, _ := parseWindow(c.Window)
			cc := &ceiling{Ceiling: c, window: w, observed: r.Mode == ModeObserve, match: r.Match}
			if c.LimitMicros != nil {
				cc.money, cc.limit = true, *c.LimitMicros
			} else {
				cc.limit = *c.LimitCount
			}
			if name, ok := strings.CutPrefix(c.Per, "dimension:"); ok {
				cc.dim = name
			}
			p.ceilings[i] = append(p.ceilings[i], cc)
		}
	}
	return p, nil
}

// Matches reports whether the rule applies to a begin of effectType by
// vendor with operation (see Rule).
func (r Rule) Matches(effectType, vendor, operation string) bool {
	if r.Vendor != "" && r.Vendor != vendor {
		return false
	}
	if r.Operation != "" {
		if ok, _ := path.Match(r.Operation, operation); !ok || operation == "" {
			return false
		}
	}
	if ok, _ := path.Match(r.Match, effectType); ok {
		return true
	}
	ok, _ := path.Match(r.Match, operation)
	return ok && operation != ""
}

// forEffect combines every rule that matches a begin of effectType by
// vendor with operation; the strictest wins.
func (p *policy) forEffect(effectType, vendor, operation string) effectivePolicy {
	var ep effectivePolicy
	for i, r := range p.rules {
		if !r.Matches(effectType, vendor, operation) {
			continue
		}
		ep.rules = append(ep.rules, i)
		if r.Mode == ModeObserve {
			ep.observe.add(r)
			ep.ceilings = append(ep.ceilings, p.ceilings[i]...)
			continue
		}
		ep.gates.add(r)
		if r.ConfirmWith == "user" {
			t := r.ConfirmThresholdMicros
			switch {
			case !ep.confirm:
				ep.confirm, ep.confirmFrom = true, t
			case ep.confirmFrom != nil && (t == nil || *t < *ep.confirmFrom):
				ep.confirmFrom = t
			}
		}
		if r.ApproversRequired > 1 {
			ep.quorums = append(ep.quorums, quorum{n: r.ApproversRequired, from: r.ApproversThresholdMicros})
		}
		ep.ceilings = append(ep.ceilings, p.ceilings[i]...)
		ep.maxLease = minPositive(ep.maxLease, r.MaxLeaseSeconds)
	}
	return ep
}

// asksUser reports whether a begin declaring cost must be confirmed by
// the agent's user (confirm_with): a begin without a cost is, where a
// threshold applies, since its cost could be any.
func (ep *effectivePolicy) asksUser(cost *int64) bool {
	return ep.confirm && (ep.confirmFrom == nil || cost == nil || *cost >= *ep.confirmFrom)
}

// minPositive returns the smaller of a and b, treating zero as "unset".
func minPositive(a, b int) int {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// ceiling finds a ceiling by its (unique) name.
func (p *policy) ceiling(name string) (*ceiling, bool) {
	for _, cs := range p.ceilings {
		for _, c := range cs {
			if c.Name == name {
				return c, true
			}
		}
	}
	return nil, false
}

// MaxApprovers bounds approvers_required.
const MaxApprovers = 10

// quorum is one rule's approvers_required, from a cost on (nil: any).
type quorum struct {
	n    int
	from *int64
}

// approvers is how many people must approve a begin declaring cost: the
// most any matching rule asks at that cost (the strictest wins), at least
// one.
func (ep *effectivePolicy) approvers(cost int64) int {
	n := 1
	for _, q := range ep.quorums {
		if q.from == nil || cost >= *q.from {
			n = max(n, q.n)
		}
	}
	return n
}

// checkApprovers validates a rule's approvers_required and
// approvers_threshold_micros. A quorum belongs with the threshold that asks
// for approval, in the same rule, so that reading one rule says who is
// asked; an observed rule asks no one.
func checkApprovers(r Rule, rp string, add func(p, format string, args ...any)) {
	n, from := r.ApproversRequired, r.ApproversThresholdMicros
	switch {
	case n < 0 || n > MaxApprovers:
		add(rp+".approvers_required", "must be 1 to %d, got %d", MaxApprovers, n)
	case n > 1 && r.ApprovalThresholdMicros == nil:
		add(rp+".approvers_required", "needs approval_threshold_micros in the same rule: only what a threshold sends to a human has approvers")
	case n > 1 && r.Mode == ModeObserve:
		add(rp+".approvers_required", "an observed rule asks no one, so it has no approvers")
	}
	if from == nil {
		return
	}
	switch {
	case n < 2:
		add(rp+".approvers_threshold_micros", "applies approvers_required (2 or more), which this rule does not set")
	case r.ApprovalThresholdMicros != nil && *from < *r.ApprovalThresholdMicros:
		add(rp+".approvers_threshold_micros", "must be at or above approval_threshold_micros (%d), got %d: below that no one is asked", *r.ApprovalThresholdMicros, *from)
	}
}
