package mcp

import (
	"cmp"
	"fmt"
	"maps"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// The descriptions carry every rule of the begin tool's contract, each once:
// when to call, what each decision obliges, deterministic keys, cost and
// dimensions, the two warnings, and the vendor key. Rules that belong to a
// parameter live in that parameter's description, not in the tool's.

var beginSpec = toolSpec{
	name:       "ratchet_begin_effect",
	title:      "Ask permission for a side effect",
	idempotent: true,
	desc: `Ask permission immediately before any action that changes the outside world (charging a card, sending a message, creating a resource), then obey the decision.

- execute: you hold a lease. Act now, then call ratchet_report_effect before lease_expires_at. If vendor_idempotency_key is returned, send its value to the vendor as the vendor's own idempotency key, at the location and name given; when enforced is true the vendor itself refuses a repeat, even from a caller that skipped this gate.
- duplicate: it already happened. Do not act; use result as if you had just done it.
- in_flight: someone else is doing it now. Do not act; wait retry_after_seconds, then ask again with the same key.
- blocked: an earlier attempt may or may not have happened. Do not act; tell the user what is unresolved, or verify at the vendor and call ratchet_resolve_effect.
- approval_required: a human must approve. Do not act; show the user approval_url and expires_at; ask again with the same key after retry_after_seconds.
- denied: policy or budget refused it (see reason). Do not act; tell the user.
- denied, reason halted: an operator stopped these actions. Stop, try no other way, tell the user.

If budget_warning (no cost sent) or dimension_warning (a dimension not declared) is present, a ceiling counted nothing: tell the operator. If integration_warning is present, effects you began expired without a report: report after every action from now on, and tell the operator, because those effects now block.

Errors (isError, text starting with the code) to fix and retry: invalid_argument, idempotency_key_conflict (same key, different action), dimension_required (send the named dimension), cost_required (send estimated_cost_micros), unauthorized.`,
	fields: map[string]field{
		"idempotency_key": {min: 1, max: ledger.MaxKeyLen, desc: `Identifies this one logical action, derived from the work itself so that a retry of the same action gives the same key, e.g. "welcome-email:user_123" or "invoice:2026-08:acct_88123". Never use a random value or the current time.`},
		"effect_type":     {min: 3, max: ledger.MaxEffectTypeLen, desc: `Kind of action, lowercase and dot-separated, e.g. "email.send", "payment.charge", "github.pr.create". Policies are set per type.`},
		"run_id":          {max: ledger.MaxIDLen, desc: "Groups the effects of one task or run."},
		"agent_id":        {max: ledger.MaxIDLen, desc: "Your identifier. If your credentials name an agent, omit it or send that one."},
		"vendor":          {max: ledger.MaxVendorNameLen, desc: `Who performs the action ("stripe", "adyen", …); shapes vendor_idempotency_key to that vendor's rules.`},
		"payload":         {desc: "The action's parameters (any JSON, at most 64 KiB). Only a keyed hash is kept, never the content; reusing the key with different parameters is refused."},
		"group_key":       {max: ledger.MaxIDLen, desc: `Set when this is a step of a workflow that must succeed or fail as a whole, e.g. "booking:trip_8812", so the whole can be rolled back with ratchet_unwind_group. Another agent's group is refused (unauthorized).`},
		"dimensions":      {maxProps: ledger.MaxDimensions, valuesMax: ledger.MaxDimValueLen, desc: `Who or what the action targets, most often the destination: {"counterparty": "acct_1234"}. Send it whenever there is a specific recipient, account or customer: it is what per-destination ceilings count ("at most $200 to any one counterparty a day"). Only a keyed hash of each value is stored. Declaring can only tighten limits, never remove one.`},
		"compensation": {desc: "How to undo this step if its group is rolled back. Declare it now, while you know what undoing means; it is stored as given and shown to approvers. Steps without one are permanent.", props: map[string]field{
			"effect_type":           {min: 3, max: ledger.MaxEffectTypeLen},
			"vendor":                {max: ledger.MaxVendorNameLen},
			"payload":               {desc: "any JSON, at most 64 KiB"},
			"estimated_cost_micros": {minimum: num(0), maximum: num(float64(ledger.MaxCostMicros))},
			"description":           {max: ledger.MaxTextLen},
		}},
		"lease_seconds":         {minimum: num(1), desc: leaseDesc}, // maximum and default: withLeases
		"compensates_effect_id": {max: ledger.MaxIDLen, desc: "Only for an undo that ratchet_unwind_group returned: pass its entry as the arguments, unchanged. Anything else is refused."},
		"description":           {max: ledger.MaxTextLen, desc: "Only as in an undo's entry from ratchet_unwind_group."},
		"estimated_cost_micros": {minimum: num(0), maximum: num(float64(ledger.MaxCostMicros)), desc: "Cost at the third party in micro-USD (1000000 = $1). Send it for every action that costs money: ceilings count only declared costs, so without it a spend limit cannot fire. It also decides whether a human must approve: actions at or above an operator's threshold return approval_required, and where a threshold applies, omitting the cost is refused with cost_required. Ratchet only counts money; it never moves any."},
	},
	output: fields{"decision": nil, "effect_id": nil, "attempt": nil, "message": nil, "lease_expires_at": nil,
		"result": nil, "vendor_reference": nil, "retry_after_seconds": nil, "reason": nil, "approval_id": nil,
		"expires_at": nil, "approval_url": nil, "grant_id": nil, "budget_warning": nil, "dimension_warning": nil, "integration_warning": nil,
		"vendor_idempotency_key": {"value": nil, "location": nil, "name": nil, "enforced": nil}},
}

// effectOutput is the output schema of the tools that return one effect,
// and of each effect listed: the fields an agent acts on.
var effectOutput = fields{"effect_id": nil, "idempotency_key": nil, "state": nil, "attempt": nil,
	"reason": nil, "result": nil, "vendor_reference": nil}

// settledOutput is effectOutput with the note a report or resolve adds when
// it could not keep everything it was sent.
var settledOutput = fields{"effect_id": nil, "idempotency_key": nil, "state": nil, "attempt": nil,
	"reason": nil, "result": nil, "vendor_reference": nil, "result_note": nil}

var reportSpec = toolSpec{
	name:  "ratchet_report_effect",
	title: "Report what happened",
	desc:  `Report the outcome right after acting on an execute decision. succeeded stores result for replay to later duplicates; failed means it certainly did not happen, so the next begin with the key starts a new attempt; unknown means you cannot tell (timeout, crash), which blocks the key until someone resolves it. Repeating a report is harmless; a contradicting one is refused with invalid_state_transition.`,
	fields: map[string]field{
		"effect_id":          {min: 1, max: ledger.MaxIDLen, desc: "The effect_id from ratchet_begin_effect."},
		"outcome":            {enum: []any{"succeeded", "failed", "unknown"}, desc: "succeeded, failed (definitely did not happen) or unknown."},
		"attempt":            {minimum: num(1), desc: "The execute decision's attempt. Always send it (required after the first attempt); a report for another attempt is refused."},
		"result":             {desc: resultDesc},
		"actual_cost_micros": {minimum: num(0), maximum: num(float64(ledger.MaxCostMicros)), desc: "What it really cost in micro-USD; replaces the estimate in every ceiling."},
		"vendor_reference":   {desc: "The vendor's id for what was created, e.g. a PaymentIntent id (not kept over 255 characters)."},
		"error":              {desc: "Short description of a failure (cut at 1024 characters)."},
	},
	output: settledOutput,
}

var resolveSpec = toolSpec{
	name:  "ratchet_resolve_effect",
	title: "Settle an unknown outcome",
	desc:  `Settle a blocked effect after checking at the vendor whether it happened. succeeded makes later begins duplicates; failed frees the key for a new attempt and releases its reserved spend. Only effects whose outcome is unknown can be resolved.`,
	fields: map[string]field{
		"effect_id":        {max: ledger.MaxIDLen, desc: "The effect to settle (or give idempotency_key)."},
		"idempotency_key":  {max: ledger.MaxKeyLen, desc: "The key of the effect to settle, instead of effect_id."},
		"resolution":       {enum: []any{"succeeded", "failed"}, desc: "What the vendor shows: succeeded or failed."},
		"attempt":          {minimum: num(1), desc: "The blocked decision's attempt (required after the first)."},
		"result":           {desc: "The result to replay to later duplicates (any JSON; kept as a summary over 64 KiB)."},
		"vendor_reference": {max: ledger.MaxIDLen, desc: "The vendor's id for what was found."},
		"note":             {max: ledger.MaxTextLen, desc: "How you checked, for the operator."},
	},
	output: settledOutput,
}

var unwindSpec = toolSpec{
	name:  "ratchet_unwind_group",
	title: "Roll back a multi-step workflow",
	desc:  `Start (or continue) rolling back every step begun with a group_key. New steps in the group are denied from now on. Returns, newest first: compensations to perform (pass each entry unchanged as the arguments of ratchet_begin_effect, act, report), permanent steps that cannot be undone (tell the user), and unresolved steps to wait for or resolve first. Call again to see what is left; the group is unwound when every compensation has succeeded.`,
	fields: map[string]field{
		"group_key": {min: 1, max: ledger.MaxIDLen, desc: "The group_key the steps were begun with."},
		"reason":    {max: ledger.MaxTextLen, desc: "Why the workflow is being rolled back."},
	},
	output: fields{"group_key": nil, "state": nil, "message": nil,
		"compensations": {"compensates_effect_id": nil, "idempotency_key": nil, "effect_type": nil, "vendor": nil, "payload": nil, "estimated_cost_micros": nil},
		"permanent":     {"effect_id": nil, "effect_type": nil},
		"unresolved":    {"effect_id": nil, "state": nil}},
}

var getSpec = toolSpec{
	name:     "ratchet_get_effect",
	title:    "Look up an effect",
	readOnly: true,
	desc:     `Read one effect by effect_id or idempotency_key: state, attempt, result, unresolved reason. Changes nothing.`,
	fields: map[string]field{
		"effect_id":       {max: ledger.MaxIDLen, desc: "The effect's id."},
		"idempotency_key": {max: ledger.MaxKeyLen, desc: "The effect's key, instead of effect_id."},
	},
	output: effectOutput,
}

var listSpec = toolSpec{
	name:     "ratchet_list_effects",
	title:    "List effects",
	readOnly: true,
	desc:     `List effects, oldest first, filtered by run, group, agent or state, to tell the user what is done, pending or unresolved. Changes nothing. Pass next_cursor back as cursor for the next page.`,
	fields: map[string]field{
		"run_id":    {max: ledger.MaxIDLen, desc: "Only effects of this run."},
		"group_key": {max: ledger.MaxIDLen, desc: "Only effects of this group."},
		"agent_id":  {max: ledger.MaxIDLen, desc: "Only effects of this agent."},
		"state": {desc: "Only effects in this state.", enum: []any{"pending", "succeeded", "failed", "indeterminate",
			"awaiting_approval", "approved", "rejected", "compensated"}},
		"limit":  {minimum: num(1), maximum: num(500), desc: "Page size (default 50)."},
		"cursor": {max: 1024, desc: "next_cursor from the previous page."},
	},
	output: fields{"effects": effectOutput, "next_cursor": nil},
}

// resultDesc is the result argument of report and resolve, which are never
// refused for the result's size.
const resultDesc = "What the action returned (any JSON), replayed to later duplicates. Over 64 KiB, a summary is kept (size, SHA-256, short top-level fields) and result_note says so; a call over 1 MiB is refused unread: send it without result."

const leaseDesc = "How long the action may take (default %d). Report before it ends or the effect becomes indeterminate and blocks."

// withLeases is spec with the lease bounds of the engine's defaults (the
// config's defaults block), so the schema states what the engine enforces.
func withLeases(spec toolSpec, d ledger.Defaults) toolSpec {
	lease, maxLease := cmp.Or(d.LeaseSeconds, ledger.DefaultLeaseSeconds), cmp.Or(d.MaxLeaseSeconds, ledger.DefaultMaxLeaseSeconds)
	fields := maps.Clone(spec.fields)
	f := fields["lease_seconds"]
	f.maximum, f.desc = num(float64(maxLease)), fmt.Sprintf(f.desc, lease)
	fields["lease_seconds"] = f
	spec.fields = fields
	return spec
}
