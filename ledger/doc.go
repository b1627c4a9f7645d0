// Package ledger is Ratchet's engine: the effect state machine, policies,
// spend ceilings, approvals and saga groups, on durable storage. Every
// adapter (MCP tools, the outbound proxy, the admin API) calls the one
// Engine API; nothing else touches storage.
//
// # Write path
//
// Every mutation (begin, report, resolve, unwind, approve, reaper and
// retention sweeps) is a closure queued to a single writer goroutine. The
// writer takes everything queued (up to Options.MaxBatch), runs each op in
// order against one storage transaction, each op seeing the writes of the
// ops before it, commits once, and answers every caller only once the
// commit is durable. This is group commit: concurrency raises batch size
// instead of causing conflicts, hot budget counters are never raced, and an
// execute is never answered before it is on disk. An op that fails leaves
// nothing behind (its writes are buffered per op); a commit that fails
// answers every op of the batch with CodeUnavailable and records none of
// them. Reads (Get, List, Budgets, ListApprovals) use snapshots of
// committed data and never wait for the writer.
//
// A store's Update returns once the batch is durable: badgerstore writes
// and fdatasyncs a batch's record in its own log before committing it to
// Badger (see its package doc), and pgstore commits synchronously. An
// Update failing with ErrStoreFailed (the batch may or may not be
// recorded) stops the engine taking writes until it is restarted (see
// failStop).
//
// The reaper finds pending effects through lease entries. On a store only
// this engine writes, a begin that makes a new effect leaves its entry to
// the writer's memory, and a checkpoint writes it a second later if the
// effect is still pending; a lease mark on disk lets an open after a crash
// find the effects made since (leasemark.go has the rule). A shared
// store's begins write the entry at once, as another replica may have to
// reap it.
//
// Performance: the write path's limits as measured, what was tried and
// why it was kept or reverted, are in docs/design.md; BENCHMARKS.md has the
// latest figures.
//
// Storage is reached only through the narrow Store interface (ordered keys,
// transactions), so a second backend can follow; badgerstore is the
// embedded default.
//
// # Decisions the spec left open
//
//   - A begin denied for a key never seen before (policy, budget, group,
//     unreported effects) records nothing and has no effect_id: nothing
//     happened, and the next begin is evaluated afresh. A denial of a new
//     attempt of a known key leaves that effect as it was.
//   - Compensations skip the group check, approval thresholds (and so
//     cost_required) and ceilings, as the spec says, but not deny rules or
//     required dimensions: an operator who denies an effect type outright
//     means it. What a compensation declares is still counted. Only a
//     compensation an unwind handed out qualifies (checkHandedOut): its
//     target is a step of a group being unwound that declared a
//     compensation, and the begin is that compensation (type, vendor,
//     payload, the undo key, a cost no higher than declared). Anything else
//     is invalid_argument naming the field, so that calling an action an
//     undo never unlocks spending. And because the agent declares the
//     compensation itself, it skips those checks only when it declares a
//     cost no higher than its step's estimate when the step was checked
//     (never a later reported actual cost): one worth more, or declaring
//     none, is checked like any begin (but for the group). A compensation
//     that declares no dimensions targets its step's, and it is a member
//     of its step's group. Undo keys are derived with the server secret
//     from the step's effect id (undoKey), so no one can take one first; a
//     compensation begun under the legacy "undo:<key>" keeps it. An undo
//     key first used by an ordinary begin, or the reverse, is still an
//     idempotency_key_conflict.
//   - A group belongs to the agent of its first step. A begin whose agent
//     is its caller's principal (not AgentClaimed) adds only to its own
//     groups (checkJoin), and begins only its own steps' compensations;
//     its report of a compensation is its attempt's agent's like any
//     report. A caller whose credentials fix no agent acts for its
//     namespace.
//   - An effect can be compensated only once, only when succeeded, and never
//     by itself; a compensation cannot itself be compensated.
//   - A compensated effect answers a begin of its original key with
//     duplicate (state compensated): the action happened, then was undone;
//     doing it again needs a new key.
//   - Approval expiry (defaults.approval_ttl) applies both to a pending
//     request and to a grant the agent has not used: either way the next
//     begin asks again with a new approval_id. A grant is for one execute,
//     of a begin that declares a cost up to the approved estimate: a larger
//     estimate asks again, a begin that declares none is cost_required (it
//     would count nothing), and after a definite failure the next attempt
//     asks again (Approval.UsedAt). Approved effects are checked against
//     ceilings again when they execute: ceilings are hard.
//   - Approval requests reserve nothing; only execute reserves.
//   - A report, and an agent's resolve, names its attempt (required once an
//     effect has had more than one: invalid_argument without it); one for
//     another attempt is refused (invalid_state_transition), so a retried
//     call about an old attempt never settles a newer one, which may be
//     under way. Operators' resolves may omit it.
//   - A caller whose credentials fix an agent_id reports and resolves only
//     the attempts that agent began (unauthorized otherwise); callers that
//     fix none (the proxy, an operator, an unauthenticated loopback agent)
//     are not limited.
//   - max_unreported counts an agent's effects whose leases expired without
//     a report until an operator resolves them (SPEC section 4). An agent's
//     late report or its own resolve settles the effect but leaves the
//     mark; an operator's resolve clears it, and one that agrees with how
//     the effect was settled only clears it. An effect still marked is kept
//     from retention. The mark counts against the agent whose attempt's
//     lease ran out, and a report or resolve of a lease that ran out before
//     the reaper got to it marks it all the same. An operator may overturn
//     an agent's late failed (the vendor shows the action happened): the
//     effect succeeds and its spend is counted again, past a ceiling's
//     limit if need be (overturnLateFailure); a timely failed is the
//     agent's word and stands.
//   - The group an effect joined at its first begin decides whether a
//     retry is denied as group_unwinding, whatever group_key the retry
//     sends.
//   - Identifiers (keys, ids, dimension values) refuse Unicode format
//     characters (zero-width, bidirectional controls), which make keys
//     that look the same differ.
//   - A per-dimension ceiling applies only when the begin declares that
//     dimension ("declaring can only tighten"); require_dimensions makes one
//     mandatory. A missing agent_id or run_id is the empty scope, shared by
//     all begins that omit it, so omitting an id never escapes a ceiling.
//   - A "run" window never slides; its counter is per run id.
//   - Sliding windows move in steps of 1/60 of their length (see budget.go):
//     Ratchet may refuse slightly early, never late.
//   - Ceiling names are unique across the policy; a counter is identified
//     by namespace, ceiling name and scope.
//   - retry_after_seconds is the whole seconds left on the lease, at least 1.
//   - Retention purges finished effects (succeeded, failed, rejected,
//     compensated) and approval requests or unused grants once they have
//     expired, each the retention after it finished or expired; pending
//     and indeterminate ones stay until someone acts, however old. A purged
//     key is forgotten. (Approval effects written before this rule existed
//     have no retention time until next changed.)
//   - Effect and approval ids are ULIDs (eff_/apr_ + 26 characters):
//     unguessable, sorted by creation, monotonic within one engine.
//   - The vendor idempotency key is derived from the bytes of HMAC(secret,
//     namespace, key, attempt, vendor) and shaped by package vendors.
//   - A ledger is bound to its secret: the first open records a keyed hash
//     of a constant, and New refuses another secret (ErrSecretMismatch)
//     instead of silently treating every retry as a new action. On a shared
//     ledger the check runs through the writer, so replicas started with
//     different keys cannot both win.
//
// # The audit log
//
// Every decision and operator action is an Event (events.go), and with
// Options.Audit each is appended to a hash chain in the same transaction as
// the change it records: a record carries its chain, its sequence number,
// the hash of the record before it and its own hash (SHA-256 of the
// previous hash and the record's JSON). A crash loses no record of a
// change that was committed and records none that was not.
//
// Chains. On an exclusive store (Badger) the engine keeps one chain,
// "local", continued across restarts. On a shared store (PostgreSQL) the
// replicas of a fleet commit side by side, and one chain for all would make
// every batch of every replica wait on its head; instead each replica keeps
// a chain of its own, named by its replica id. A replica's id is new each
// time its process starts, so each run of a replica is a chain, whose first
// record is audit.chain_started naming it: an export shows every chain that
// ever started, and a chain that vanished whole is seen by its absence
// next to the heads an operator kept. An export (Audit) lists chain after
// chain, each in sequence order; to read the fleet's history in time order,
// merge the chains by the events' times (each replica's own clock).
// VerifyAudit checks each chain on its own: hashes, links, and its end
// against its head (AuditHeads). Audit retention (at least the effects')
// removes a chain's oldest records; the oldest kept record's link is then
// taken as given.
//
// Every op that changes an effect, an approval, a grant or a group emits
// its event (grep emit): vendor settlement (settle.go) and grants included.
//
// # Where the build departs from the spec's wording
//
//   - The spec (section 8) asks for Badger with SyncWrites on. Badger runs
//     with SyncWrites off and the store fdatasyncs Badger's log files itself
//     (package badgerstore), which keeps the promise behind SyncWrites (an
//     answer is given only after its write is durable, proven by tests that
//     ask the kernel for unwritten pages), lets the writer go on while a
//     batch is synced, and sees a failed sync, which SyncWrites only logs.
//
// # Privacy
//
// Payloads are reduced to a fingerprint (HMAC-SHA256 under the server
// secret of the canonical JSON of effect_type, vendor and payload) before
// the writer sees them; dimension values to HMAC(secret, name, value).
// Neither raw form is stored or logged. Results and compensations are
// stored as given (agents are told so); Badger's encryption at rest covers
// them when turned on.
package ledger
