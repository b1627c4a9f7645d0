package ledger

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// State is where an effect is in its life (SPEC section 2).
type State string

// Effect states.
const (
	StatePending          State = "pending"
	StateSucceeded        State = "succeeded"
	StateFailed           State = "failed"
	StateIndeterminate    State = "indeterminate"
	StateAwaitingApproval State = "awaiting_approval"
	StateApproved         State = "approved"
	StateRejected         State = "rejected"
	StateCompensated      State = "compensated"
)

// terminal reports whether no further transition is expected without an
// agent starting a new attempt.
func (s State) terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateRejected, StateCompensated:
		return true
	}
	return false
}

// Decision is Ratchet's answer to a begin.
type Decision string

// Decisions.
const (
	DecisionExecute          Decision = "execute"
	DecisionDuplicate        Decision = "duplicate"
	DecisionInFlight         Decision = "in_flight"
	DecisionBlocked          Decision = "blocked"
	DecisionApprovalRequired Decision = "approval_required"
	DecisionDenied           Decision = "denied"
)

// Reasons carried by blocked and denied decisions.
const (
	ReasonLeaseExpired     = "lease_expired"
	ReasonReportedUnknown  = "reported_unknown"
	ReasonBudgetExceeded   = "budget_exceeded"
	ReasonPolicyDenied     = "policy_denied"
	ReasonApprovalRejected = "approval_rejected"
	ReasonGroupUnwinding   = "group_unwinding"
	ReasonUnreported       = "unreported_effects"
	ReasonHalted           = "halted" // an operator halted the scope (halt.go)
)

// Outcome is what an agent reports after acting.
type Outcome string

// Outcomes.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeUnknown   Outcome = "unknown"
)

// Compensation is how to undo one step, declared at begin and stored as given.
type Compensation struct {
	EffectType          string          `json:"effect_type"`
	Vendor              string          `json:"vendor,omitempty"`
	Payload             json.RawMessage `json:"payload,omitempty"`
	EstimatedCostMicros *int64          `json:"estimated_cost_micros,omitempty"`
	Description         string          `json:"description,omitempty"`
}

// BeginRequest asks for a decision before a side effect. Namespace comes from
// the caller's credentials, never from the agent's arguments.
type BeginRequest struct {
	Namespace           string            `json:"-"`
	IdempotencyKey      string            `json:"idempotency_key"`
	EffectType          string            `json:"effect_type"`
	RunID               string            `json:"run_id,omitempty"`
	AgentID             string            `json:"agent_id,omitempty"`
	Vendor              string            `json:"vendor,omitempty"`
	Payload             json.RawMessage   `json:"payload,omitempty"`
	GroupKey            string            `json:"group_key,omitempty"`
	Dimensions          map[string]string `json:"dimensions,omitempty"`
	Compensation        *Compensation     `json:"compensation,omitempty"`
	LeaseSeconds        int               `json:"lease_seconds,omitempty"`
	CompensatesEffectID string            `json:"compensates_effect_id,omitempty"`
	EstimatedCostMicros *int64            `json:"estimated_cost_micros,omitempty"`
	// Description is only for a compensation, begun as an unwind returned
	// it: the description its step declared (or none). An agent passes the
	// unwind's entry back unchanged, so begin accepts it; it must match.
	Description string `json:"description,omitempty"`
	// AgentClaimed, set by an adapter whose caller's credentials fix no
	// agent, says AgentID is only a label the caller chose: such a caller
	// acts for every agent of its namespace, as a report or resolve with no
	// AgentID does (it may add steps to any group and begin any
	// compensation). Otherwise AgentID is the caller's principal (a token's
	// agent, the proxy's configured identity): a group belongs to the agent
	// that began its first step, and only that agent adds steps to it; a
	// compensation is begun only by the agent whose attempt it undoes.
	AgentClaimed bool `json:"-"`
	// Confirmation, set by the MCP adapter, is the agent's user's
	// confirmation of this begin through their MCP client (a rule's
	// confirm_with: user); nil when none was asked for or obtained.
	Confirmation *UserConfirmation `json:"-"`
	// Operation is the vendor's own operation (stripe.payment_intents.create)
	// when an adapter knows it: the proxy sets it for every call it gates,
	// with EffectType the call's type in the taxonomy (package vendors,
	// taxonomy.go). It is kept with the effect, shown with it and audited;
	// rules may narrow by it; and it, not EffectType, is what the
	// fingerprint covers when set, so an effect begun under the name the
	// proxy gave it before the taxonomy is the same effect after it. It is
	// an adapter's, never an MCP agent's argument.
	Operation string `json:"-"`
	// Principal, set by an adapter whose caller's credential was an OAuth
	// token, is its "<issuer name>:<sub>": audited on the events the call
	// causes (Event.Principal), never kept with the effect.
	Principal string `json:"-"`
	// SameAs, set by an adapter that derives keys from content in windows
	// (the proxy's dedupe_window), are the keys the same content has in the
	// neighbouring windows. When IdempotencyKey names no effect and one of
	// these names an effect created less than SameWithin ago, the begin is
	// decided for that effect, in the same write as the look-up, so that
	// two identical requests on either side of a window's turn are one
	// action however their begins interleave.
	SameAs     []string      `json:"-"`
	SameWithin time.Duration `json:"-"`
}

// BudgetUse is one ceiling as it applies to an effect.
type BudgetUse struct {
	Name string `json:"name"`
	// Per is the ceiling's scope: global, agent, run or dimension:<name>.
	Per string `json:"per"`
	// Unit is micros for money ceilings and count for count ceilings.
	Unit  string `json:"unit"`
	Limit int64  `json:"limit"`
	// Counted and Remaining are exact on one engine. In an execute answer
	// from a replica sharing a ledger, Counted also counts what the other
	// replicas may still spend without asking (their shares' grants): an
	// upper bound, and Remaining a lower bound. A refusal and Budgets are
	// exact (see "Shares" in budget.go).
	Counted   int64  `json:"counted"`
	Remaining int64  `json:"remaining"`
	Window    string `json:"window"`
}

// BudgetWarning says a money ceiling applies but no cost was declared, so
// nothing was counted against it.
type BudgetWarning struct {
	Ceilings []string `json:"ceilings"`
	Message  string   `json:"message"`
}

// DimensionWarning says a ceiling per dimension (per: dimension:<name>)
// applies to the effect type but the begin declared none of its dimension,
// so the ceiling was not applied.
type DimensionWarning struct {
	Ceilings   []string `json:"ceilings"`
	Dimensions []string `json:"dimensions"`
	Message    string   `json:"message"`
}

// IntegrationWarning says this agent has effects whose leases expired without
// a report.
type IntegrationWarning struct {
	UnreportedCount int       `json:"unreported_count"`
	OldestEffectID  string    `json:"oldest_effect_id"`
	OldestSince     time.Time `json:"oldest_since"`
	Message         string    `json:"message"`
}

// BeginResult is the decision and what goes with it (SPEC section 3.1).
type BeginResult struct {
	Decision Decision `json:"decision"`
	EffectID string   `json:"effect_id,omitempty"`
	Attempt  int      `json:"attempt,omitempty"`
	State    State    `json:"state,omitempty"`

	// execute
	LeaseExpiresAt       *time.Time   `json:"lease_expires_at,omitempty"`
	VendorIdempotencyKey *vendors.Key `json:"vendor_idempotency_key,omitempty"`
	Budgets              []BudgetUse  `json:"budgets,omitempty"`

	// duplicate
	Result          json.RawMessage `json:"result,omitempty"`
	VendorReference string          `json:"vendor_reference,omitempty"`
	CompletedAt     *time.Time      `json:"completed_at,omitempty"`

	// in_flight
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`

	// blocked and denied
	Reason string     `json:"reason,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
	// Ceiling is the ceiling that refused a budget_exceeded denial.
	Ceiling *BudgetUse `json:"ceiling,omitempty"`

	// approval_required (and retry_after_seconds: how long to wait before
	// beginning again to see whether a human decided)
	ApprovalID          string `json:"approval_id,omitempty"`
	ThresholdMicros     *int64 `json:"threshold_micros,omitempty"`
	EstimatedCostMicros *int64 `json:"estimated_cost_micros,omitempty"`
	// ExpiresAt is when the approval request lapses undecided; a begin
	// after it asks again.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// ApprovalURL is the approval's console page, where an operator
	// decides (set by the MCP adapter when the console's public address,
	// notify.console_url, is configured): the agent shows it to its user.
	ApprovalURL string `json:"approval_url,omitempty"`

	// GrantID, on an execute, is the grant (a scoped approval) that let
	// it through without a request of its own.
	GrantID string `json:"grant_id,omitempty"`

	// HaltID, on a denial with reason halted, is the operator's halt
	// (halt.go); the message carries its note.
	HaltID string `json:"halt_id,omitempty"`

	// Message says in one sentence what the agent must do now.
	Message string `json:"message"`

	BudgetWarning      *BudgetWarning      `json:"budget_warning,omitempty"`
	DimensionWarning   *DimensionWarning   `json:"dimension_warning,omitempty"`
	IntegrationWarning *IntegrationWarning `json:"integration_warning,omitempty"`
}

// UserConfirmation is how the agent's user confirmed a begin: which MCP
// client (its clientInfo, as it names itself) answered, and how soon. It
// trusts that client to have shown the prompt to a person.
type UserConfirmation struct {
	Client   string
	AnswerMS int64
}

// ReportRequest records what happened after an execute.
type ReportRequest struct {
	Namespace string  `json:"-"`
	EffectID  string  `json:"effect_id"`
	Outcome   Outcome `json:"outcome"`
	// Attempt is the attempt the report is for, as the execute decision
	// numbered it. It must be the effect's current attempt, and it is
	// required once the effect has had more than one: a retried report of
	// an earlier attempt must never settle a later one, which may be under
	// way.
	Attempt          int             `json:"attempt,omitempty"`
	Result           json.RawMessage `json:"result,omitempty"`
	ActualCostMicros *int64          `json:"actual_cost_micros,omitempty"`
	VendorReference  string          `json:"vendor_reference,omitempty"`
	Error            string          `json:"error,omitempty"`
	// AgentID, set by an adapter when the caller's credentials fix its
	// agent, limits the report to effects whose current attempt that agent
	// began.
	AgentID string `json:"-"`
	// NotAgents, set by an adapter when the caller's credentials fix no
	// agent, are the agents a credential fixes (an agent token's, the
	// proxy's): the report is refused for an effect whose current attempt
	// one of them began, which only its own credential settles.
	NotAgents []string `json:"-"`
	// Principal, set by an adapter whose caller's credential was an OAuth
	// token, is its "<issuer name>:<sub>": audited on the events the call
	// causes (Event.Principal), never kept with the effect.
	Principal string `json:"-"`
}

// ResolveRequest settles an indeterminate effect after checking at the vendor.
// Namespace empty means any namespace (operators only).
type ResolveRequest struct {
	Namespace      string  `json:"-"`
	EffectID       string  `json:"effect_id,omitempty"`
	IdempotencyKey string  `json:"idempotency_key,omitempty"`
	Resolution     Outcome `json:"resolution"`
	// Attempt is the attempt the caller checked at the vendor. It must be
	// the current attempt; agents must send it once the effect has had more
	// than one, so that a retried resolve of an earlier attempt never
	// settles a later one. Operators may omit it.
	Attempt         int             `json:"attempt,omitempty"`
	Result          json.RawMessage `json:"result,omitempty"`
	VendorReference string          `json:"vendor_reference,omitempty"`
	Note            string          `json:"note,omitempty"`
	// ResolvedBy names who resolved: the agent id or the admin's name.
	ResolvedBy string `json:"-"`
	// AgentID, set by an adapter when the caller's credentials fix its
	// agent, limits the resolve to effects whose current attempt that agent
	// began.
	AgentID string `json:"-"`
	// NotAgents, set by an adapter when the caller's credentials fix no
	// agent, are the agents a credential fixes (an agent token's, the
	// proxy's): the resolve is refused for an effect whose current attempt
	// one of them began, which only its own credential settles.
	NotAgents []string `json:"-"`
	// Principal, set by an adapter whose caller's credential was an OAuth
	// token, is its "<issuer name>:<sub>": audited on the events the call
	// causes (Event.Principal), never kept with the effect.
	Principal string `json:"-"`
}

// Approval is an operator's view of an approval request.
type Approval struct {
	ApprovalID          string     `json:"approval_id"`
	EffectID            string     `json:"effect_id"`
	Namespace           string     `json:"namespace"`
	EffectType          string     `json:"effect_type"`
	AgentID             string     `json:"agent_id,omitempty"`
	RunID               string     `json:"run_id,omitempty"`
	EstimatedCostMicros int64      `json:"estimated_cost_micros"`
	ThresholdMicros     int64      `json:"threshold_micros"`
	RequestedAt         time.Time  `json:"requested_at"`
	ExpiresAt           time.Time  `json:"expires_at"`
	State               string     `json:"state"`
	DecidedBy           string     `json:"decided_by,omitempty"`
	DecidedAt           *time.Time `json:"decided_at,omitempty"`
	Note                string     `json:"note,omitempty"`
	// ApproversRequired is how many distinct people must approve (the
	// rule's approvers_required, fixed when the request was made); zero is
	// one. Until that many have, the request stays pending and ApprovedBy
	// says who has; the last of them is DecidedBy.
	ApproversRequired int        `json:"approvers_required,omitempty"`
	ApprovedBy        []Approver `json:"approved_by,omitempty"`
	// UsedAt is when a granted approval let an attempt execute. An approval
	// is for one execute: once used, a later attempt (after a definite
	// failure) asks again.
	UsedAt *time.Time `json:"used_at,omitempty"`
	// Compensation is the undo the step declared, shown to whoever decides
	// (an undo begun later skips approval and ceilings up to the step's
	// estimate, so approving a step approves its undo too). It is the
	// effect's own declaration, filled in when the approval is read, never
	// stored with the approval.
	Compensation *Compensation `json:"compensation,omitempty"`
}

// Progress is how far an approval that needs several people has come
// ("1 of 2: approved by admin:alice"); "" when one person decides it.
func (a *Approval) Progress() string {
	if a.ApproversRequired < 2 {
		return ""
	}
	by := make([]string, len(a.ApprovedBy))
	for i, p := range a.ApprovedBy {
		by[i] = p.By
	}
	s := fmt.Sprintf("%d of %d", len(by), a.ApproversRequired)
	if len(by) > 0 {
		s += ": approved by " + strings.Join(by, ", ")
	}
	return s
}

// Approver is one person's approval of a request that needs several.
type Approver struct {
	By   string    `json:"by"`
	At   time.Time `json:"at"`
	Note string    `json:"note,omitempty"`
}

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalExpired  = "expired"
)

// Effect is the stored view of one effect, as returned by get and list.
// It never contains the payload or dimension values, which are not stored.
type Effect struct {
	EffectID            string          `json:"effect_id"`
	Namespace           string          `json:"namespace"`
	IdempotencyKey      string          `json:"idempotency_key"`
	EffectType          string          `json:"effect_type"`
	Vendor              string          `json:"vendor,omitempty"`
	Operation           string          `json:"operation,omitempty"`
	RunID               string          `json:"run_id,omitempty"`
	AgentID             string          `json:"agent_id,omitempty"`
	GroupKey            string          `json:"group_key,omitempty"`
	State               State           `json:"state"`
	Attempt             int             `json:"attempt"`
	Fingerprint         string          `json:"fingerprint"`
	DimensionNames      []string        `json:"dimension_names,omitempty"`
	EstimatedCostMicros *int64          `json:"estimated_cost_micros,omitempty"`
	ActualCostMicros    *int64          `json:"actual_cost_micros,omitempty"`
	LeaseExpiresAt      *time.Time      `json:"lease_expires_at,omitempty"`
	Result              json.RawMessage `json:"result,omitempty"`
	VendorReference     string          `json:"vendor_reference,omitempty"`
	Error               string          `json:"error,omitempty"`
	Reason              string          `json:"reason,omitempty"`
	Since               *time.Time      `json:"since,omitempty"`
	Compensation        *Compensation   `json:"compensation,omitempty"`
	CompensatesEffectID string          `json:"compensates_effect_id,omitempty"`
	CompensatedBy       string          `json:"compensated_by,omitempty"`
	Approval            *Approval       `json:"approval,omitempty"`
	ResolvedBy          string          `json:"resolved_by,omitempty"`
	ResolutionNote      string          `json:"resolution_note,omitempty"`
	CreatedAt           time.Time       `json:"created_at"`
	UpdatedAt           time.Time       `json:"updated_at"`
	CompletedAt         *time.Time      `json:"completed_at,omitempty"`
	// ResultNote, only in the answer of the report or resolve that set the
	// result (never stored), says what was kept of a result too large to
	// keep whole (see keepResult).
	ResultNote string `json:"result_note,omitempty"`
}

// Filter selects effects for List. Empty fields match everything; an empty
// Namespace means every namespace (operators only).
type Filter struct {
	Namespace string `json:"-"`
	RunID     string `json:"run_id,omitempty"`
	GroupKey  string `json:"group_key,omitempty"`
	State     State  `json:"state,omitempty"`
	AgentID   string `json:"agent_id,omitempty"`
	// Limit is the page size: default 50, at most 500.
	Limit int `json:"limit,omitempty"`
	// Cursor is the NextCursor of the previous page.
	Cursor string `json:"cursor,omitempty"`
}

// Page is one page of List.
type Page struct {
	Effects    []Effect `json:"effects"`
	NextCursor string   `json:"next_cursor,omitempty"`
}

// UnwindStep is one step in an unwind plan.
type UnwindStep struct {
	EffectID       string    `json:"effect_id"`
	IdempotencyKey string    `json:"idempotency_key"`
	EffectType     string    `json:"effect_type"`
	State          State     `json:"state"`
	CompletedAt    time.Time `json:"completed_at,omitzero"`
}

// CompensationStep is a compensation the agent should perform, with the key
// to begin it under.
type CompensationStep struct {
	CompensatesEffectID string `json:"compensates_effect_id"`
	IdempotencyKey      string `json:"idempotency_key"`
	// Compensation is the undo as it was declared.
	Compensation
}

// UnwindResult is what is still left to undo in a group, newest first.
type UnwindResult struct {
	GroupKey      string             `json:"group_key"`
	State         string             `json:"state"`
	Reason        string             `json:"reason,omitempty"`
	Compensations []CompensationStep `json:"compensations"`
	Permanent     []UnwindStep       `json:"permanent"`
	Unresolved    []UnwindStep       `json:"unresolved"`
	Message       string             `json:"message"`
}

// Group states.
const (
	GroupActive    = "active"
	GroupUnwinding = "unwinding"
	GroupUnwound   = "unwound"
)

// UnwindRequest starts or continues undoing a group.
type UnwindRequest struct {
	Namespace string `json:"-"`
	GroupKey  string `json:"group_key"`
	Reason    string `json:"reason,omitempty"`
	// AgentID, set by an adapter when the caller's credentials fix its
	// agent, limits the unwind to groups whose steps that agent began.
	AgentID string `json:"-"`
	// Principal, set by an adapter whose caller's credential was an OAuth
	// token, is its "<issuer name>:<sub>": audited on the events the call
	// causes (Event.Principal), never kept with the effect.
	Principal string `json:"-"`
}

// Budget is one live ceiling counter for the operator view.
type Budget struct {
	Namespace string `json:"namespace"`
	BudgetUse
	// Scope is the scope value: empty for global, the agent or run id, or the
	// keyed hash of a dimension value (the value itself is never stored).
	Scope string `json:"scope,omitempty"`
	// Observed marks a ceiling of an observed rule: it counts, never
	// refuses, and may count past its limit.
	Observed bool `json:"observed,omitempty"`
}
