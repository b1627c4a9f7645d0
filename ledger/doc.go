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
// On Badger the durable step is split off (Deferred): the writer commits a
// batch to Badger without waiting for the disk and goes on to the next,
// while a second goroutine fdatasyncs Badger's log files once for every
// batch committed meanwhile and then answers them. A batch decided on top
// of one not yet synced is answered only after a sync that covers both.
// Two consequences, chosen deliberately: a read may see a decision about a
// millisecond before it is durable (after a power cut it may be gone, but
// nobody was told to act on it), and a failed sync stops the engine taking
// writes until it is restarted (see syncer). badgerstore documents how its
// sync finds every file Badger wrote, including those Badger rotated away
// from or rewrote during value log GC, which Badger itself leaves unsynced
// when its SyncWrites is off.
//
// What limits it (measured on 2 cores, see BENCHMARKS.md; profile with
// go test -run XXX -bench BeginReport -cpuprofile cpu.prof ./ledger): a
// begin+report pair needs two commit cycles, and the process uses about
// 100 µs of CPU per pair: the writer's own work (policy, counters,
// records, Badger's transaction) a third, Badger's write goroutine
// (skiplist inserts into a 32 MiB memtable, log copies) a fifth, the
// fdatasyncs a sixth (kernel time writing back and write-protecting
// memory-mapped pages), callers' validation and hashing a tenth, garbage
// collection most of the rest. Each sync is one fdatasync of one file
// (every value stays in the tree, see badgerstore; it needs a journal
// commit because Badger's files are sparse), about 0.25 ms, and carries
// the ops the writer decided meanwhile. An execution trace at 64 callers
// (go test -trace, go tool trace, goroutine analysis) shows no stage
// saturated: the writer runs 43% of the time, waits for Badger's write
// goroutine 24% and for ops 31%; the syncer is in fdatasync 64% of the
// time; and the callers a sync answers together then wait their turn for
// a CPU, about 0.4 ms each, before they queue their next op, while the
// process keeps only 1.2-1.4 of 2 cores busy. The 64 ops in flight go
// round a loop of serial stages (writer and Badger, sync, the callers'
// turn), so the rate is 64 over the loop's time, and shortening any stage
// helps only in part. With syncs turned off altogether (not durable) the
// same workload reaches 1.05-1.9x the durable figure at 64 callers,
// depending on the day's disk.
//
// An fdatasync also costs CPU: 90-190 µs of the process's own (kernel)
// time on this machine, measured with a loop appending to a file, about
// as much when the file is written through a memory map as Badger's are.
// At 64 callers it is shared by a batch of ops; with one or two ops per
// sync, as under the MCP and proxy benchmarks, whose 16 clients spend
// most of their time in the protocol, it is a large part of each op's
// CPU: the engine alone uses 550-650 µs of CPU per pair at one caller,
// about 200 µs at 16 and 100 µs at 64 (make bench reports CPU per pair).
//
// Records went from JSON to a binary form because JSON encoding was a
// fifth of the writer's CPU: 10-30% more pairs/s.
// Splitting off the sync (above) gained about a tenth at one caller and a
// few percent at 64. Overlapping the writer with Badger's write goroutine
// (managed mode, reads at the last applied version) gained about 5%: the
// pipeline then waits on the syncs, and on 2 cores on CPU.
//
// What would go further is a log of Ratchet's own. An fdatasync of an
// overwrite inside a file already allocated and written (PostgreSQL's WAL
// segments, pg_test_fsync here: about 55 µs) needs no journal commit, where
// each of Badger's sparse files needs one. An experiment appending each
// batch's writes to such a file and syncing only that (Badger unsynced)
// gave 1.7x the pairs/s at one caller, 1.4x at 16 and 1.2x at 64 over two
// Badger files synced side by side (keeping every value in the tree, one
// file, has since gained 1.2-1.6x over that). Built properly it
// must be written first: a batch goes to the log, is synced, and only then
// is applied to Badger, with later batches reading an overlay of those not
// yet applied (a scan would wait for the overlay to drain). Applying to
// Badger first and logging after is unsafe: Badger's unsynced pages may
// reach the disk before the log's, leaving Badger ahead of the log, and
// replaying the log over it would roll back some keys of the later batches
// (a counter) and not others (their records). Log-first keeps Badger a
// prefix of the durable log, so replaying every record since the last
// checkpoint (a Badger sync in value-log-then-memtable order, then a new
// log generation) restores exactly the state the log ends at, mending any
// value pointer a power cut left dangling. It also needs records with a
// checksum, a generation and a sequence number, its own encryption at rest
// (the log holds results and compensations), a failed apply treated like a
// failed sync (stop until restart, replay then), and a test that rebuilds
// a store from a checkpoint copy plus the log. Not built.
//
// Measured and reverted: Badger in managed mode and Txn.CommitWith with an
// in-memory overlay (more, smaller batches), making batches wait for more
// ops, compressing
// records with S2 (a third smaller, no measurable gain on Badger or on
// PostgreSQL), GOGC 300 (no gain, 100 MB more memory).
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
//     means it. What a compensation declares is still counted.
//   - An effect can be compensated only once, only when succeeded, and never
//     by itself; a compensation cannot itself be compensated.
//   - A compensated effect answers a begin of its original key with
//     duplicate (state compensated): the action happened, then was undone;
//     doing it again needs a new key.
//   - Approval expiry (defaults.approval_ttl) applies both to a pending
//     request and to a grant the agent has not used: either way the next
//     begin asks again with a new approval_id. A grant covers retries after
//     a definite failure while it is valid, for costs up to the approved
//     estimate; a larger estimate asks again. Approved effects are checked
//     against ceilings again when they execute: ceilings are hard.
//   - Approval requests reserve nothing; only execute reserves.
//   - Reports may carry the attempt number; a report for an older attempt is
//     refused (invalid_state_transition) instead of settling the wrong one.
//   - max_unreported counts an agent's effects whose leases expired without
//     any report and that nobody has resolved or late-reported since.
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
//     enter the retention index only when next changed.)
//   - Effect and approval ids are ULIDs (eff_/apr_ + 26 characters):
//     unguessable, sorted by creation, monotonic within one engine.
//   - The vendor idempotency key is derived from HMAC(secret, namespace,
//     key, attempt, vendor) and shaped by package vendors.
//   - A ledger is bound to its secret: the first open records a keyed hash
//     of a constant, and New refuses another secret (ErrSecretMismatch)
//     instead of silently treating every retry as a new action. On a shared
//     ledger the check runs through the writer, so replicas started with
//     different keys cannot both win.
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
