package ledger

import (
	"cmp"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// Defaults are the engine-wide settings of the config file's defaults block.
type Defaults struct {
	// LeaseSeconds is the lease when a begin names none (default 60).
	LeaseSeconds int
	// MaxLeaseSeconds caps lease_seconds (default 3600).
	MaxLeaseSeconds int
	// Retention is how long finished effects are kept (default 720h).
	Retention time.Duration
	// ApprovalTTL is how long an approval request, or a granted approval,
	// stays valid (default 24h).
	ApprovalTTL time.Duration
	// ApprovalRetryAfter is the retry_after_seconds of an
	// approval_required answer: how often an agent waiting for a human
	// should begin again (default 30s).
	ApprovalRetryAfter time.Duration
}

// The defaults of Defaults: the one home of these values (the config file's
// defaults block starts from them).
const (
	DefaultLeaseSeconds    = 60
	DefaultMaxLeaseSeconds = 3600
	DefaultRetention       = 720 * time.Hour
	DefaultApprovalTTL     = 24 * time.Hour
	DefaultAuditRetention  = 2160 * time.Hour // 90 days
	// DefaultApprovalRetryAfter: a human takes minutes, and an agent that
	// asks twice a minute hears of a decision soon enough.
	DefaultApprovalRetryAfter = 30 * time.Second
)

func (d Defaults) withZeroesFilled() Defaults {
	if d.LeaseSeconds == 0 {
		d.LeaseSeconds = DefaultLeaseSeconds
	}
	if d.MaxLeaseSeconds == 0 {
		d.MaxLeaseSeconds = DefaultMaxLeaseSeconds
	}
	if d.Retention == 0 {
		d.Retention = DefaultRetention
	}
	if d.ApprovalTTL == 0 {
		d.ApprovalTTL = DefaultApprovalTTL
	}
	if d.ApprovalRetryAfter == 0 {
		d.ApprovalRetryAfter = DefaultApprovalRetryAfter
	}
	return d
}

// Options configures New. Store and Secret are required.
type Options struct {
	// Store is where the ledger lives. The engine owns it and closes it.
	Store Store
	// Secret keys every fingerprint, dimension hash and vendor key; at least
	// 32 bytes (see LoadOrCreateSecret).
	Secret []byte
	// Policies are the rules of the config file, validated by New.
	Policies []Rule
	// Defaults fill in what a begin or the policy leaves open; zero fields
	// take the documented defaults.
	Defaults Defaults
	// Clock is the time source; nil means the system clock.
	Clock Clock
	// Logger gets one line per decision and the background loops' errors;
	// nil discards. Payloads and dimension values are never logged.
	Logger *slog.Logger
	// ReapInterval is the longest the background reaper sleeps between
	// sweeps; it also sweeps as each lease and approval request it knows
	// of ends. Zero means a minute on a store only this engine writes and a
	// second on a shared one (exclusiveReapSleep, sharedReapSleep); negative turns the
	// background reaper off (call Reap instead).
	ReapInterval time.Duration
	// PurgeInterval is how often finished effects older than the retention
	// are purged; zero means one hour, negative turns it off (call Purge).
	PurgeInterval time.Duration
	// MaxBatch caps how many decisions share one commit; zero means 256.
	MaxBatch int
	// Observer is told of decisions, reports and expiries (metrics); nil
	// means nobody.
	Observer Observer
	// Audit keeps the audit log: every event in a hash chain, written with
	// the change it records (see events.go).
	Audit bool
	// AuditRetention is how long audit records are kept; zero means
	// DefaultAuditRetention. It is never shorter than the effects'.
	AuditRetention time.Duration
	// Route names the sinks a notification event is queued for in the
	// outbox (see NotifyTypes); nil queues nothing. It must be a pure
	// function of the event.
	Route func(Event) []string
	// BudgetThresholds are the fractions of a ceiling's limit whose
	// crossing emits a budget.threshold event, once per ceiling, scope and
	// window (thresholds.go); none: no alerts.
	BudgetThresholds []float64
	// Vendors shape the vendor keys handed out with execute decisions:
	// the built-in vendors and those the config declares; nil means the
	// built-in ones.
	Vendors *vendors.Registry
}

// Observer is told what the engine decided, after it is durable, and when
// the ledger could not record a batch.
type Observer interface {
	Begin(effectType string, d Decision, elapsed time.Duration)
	Report(o Outcome, elapsed time.Duration)
	Expired(n int)
	// WriteFailed says ops were answered unavailable because their commit
	// failed (stage "commit": nothing recorded), their sync failed
	// ("sync": perhaps recorded), or the engine refuses writes since a
	// sync failed ("stopped").
	WriteFailed(stage string, ops int)
}

// DimensionWarningObserver is an Observer also told of each begin whose
// answer carries a dimension_warning, with the number of ceilings not
// applied (metrics: ratchet_dimension_warnings_total).
type DimensionWarningObserver interface {
	DimensionWarning(effectType string, ceilings int)
}

type nopObserver struct{}

func (nopObserver) Begin(string, Decision, time.Duration) {}
func (nopObserver) Report(Outcome, time.Duration)         {}
func (nopObserver) Expired(int)                           {}
func (nopObserver) WriteFailed(string, int)               {}

// Engine is the Ratchet ledger: every adapter (MCP tools, proxy, admin API)
// calls its methods, and only it touches storage. All methods are safe for
// concurrent use.
type Engine struct {
	store    Store
	secret   []byte
	macs     *macs // HMAC-SHA256 under secret
	vendors  *vendors.Registry
	policy   *policy
	defaults Defaults
	clock    Clock
	log      *slog.Logger
	maxBatch int
	ids      idGen
	obs      Observer
	cache    *writerCaches         // nil unless the store is exclusive; writer only
	prep     Preparer              // the store, when it prepares Updates ahead (nil otherwise)
	opTxn    opTxn                 // the writer's, each op's in turn (decideBatch)
	batchBuf batchBufs             // the writer's, each batch's in turn (decideBatch)
	run      batchRun              // the batch commit hands the store (runBatch); writer only
	runFn    func(Txn) error       // e.runBatch, made once: a closure per commit cost 3 allocations
	wake     outboxWake            // tells delivery workers of new outbox entries (outbox_bound.go)
	queued   bool                  // the batch being committed wrote outbox entries; writer only
	syncErr  atomic.Pointer[Error] // set once the store failed (failStop): no more writes
	reruns   atomic.Int64          // batches a store decided again (see Reruns)
	// replica names this engine among those sharing a store ("" on an
	// exclusive store): its state counts and ceiling shares are its own.
	replica   string
	countsKey []byte // the state counts this engine moves (see exclusiveCountsKey)
	// legacyUndoKeys, set only by tests, hands out and checks undo keys as
	// ledgers written before undoKey did (the upgrade test writes one).
	legacyUndoKeys bool

	audit          bool          // keep the audit log (events.go)
	auditRetention time.Duration // how long audit records stay
	auditRecLen    int           // the last audit block's bytes a record; writer only (appendAudit)
	route          func(Event) []string
	thresholds     []float64          // budget alert fractions, ascending (thresholds.go)
	fired          firedMemory        // thresholds seen fired (thresholds.go); writer only
	storeCtx       context.Context    // the writer's store calls (see New)
	stopStore      context.CancelFunc // ends storeCtx: Close

	// reapAt is when the background reaper next sweeps (UnixNano by the
	// engine's clock); the writer lowers it through reapWake (dueAt).
	reapAt   atomic.Int64
	reapWake chan struct{} // nil when the background reaper is off
	// deferral holds the leases minted without an entry (leasemark.go):
	// nil unless the store is exclusive; writer only. leaseStale: an
	// effect was deferred since the last checkpoint, so the reaper runs one.
	deferral   *leaseDeferral
	leaseStale atomic.Bool

	ops     chan *op
	stop    chan struct{}
	wg      sync.WaitGroup
	closeMu sync.RWMutex
	closed  bool
}

// op is one mutation queued for the writer.
type op struct {
	fn func(t *opTxn, now time.Time) (any, error)
	// reads, when set, names keys fn will read (see Prefetcher); nil for
	// ops that are rare or read what cannot be known before they run.
	reads func(known knownFunc) [][]byte
	done  chan opResult
}

// knownFunc returns the value of a key prefetched in an earlier round (nil
// when the key is absent) and whether it was prefetched at all.
type knownFunc func(k []byte) ([]byte, bool)

// prefetchRounds bounds how many dependent rounds of reads a batch
// prefetches: a begin's idempotency key leads to its effect record.
const prefetchRounds = 2

type opResult struct {
	val any
	err error
}

// New starts an engine on opts.Store.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("ledger: Options.Store is required")
	}
	if len(opts.Secret) < 32 {
		return nil, errors.New("ledger: Options.Secret must be at least 32 bytes")
	}
	pol, err := compilePolicy(opts.Policies)
	if err != nil {
		return nil, err
	}
	if err := ValidateThresholds(opts.BudgetThresholds); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	e := &Engine{
		store:    opts.Store,
		secret:   opts.Secret,
		macs:     newMACs(opts.Secret),
		vendors:  cmp.Or(opts.Vendors, all.Registry()),
		policy:   pol,
		defaults: opts.Defaults.withZeroesFilled(),
		clock:    opts.Clock,
		log:      opts.Logger,
		maxBatch: opts.MaxBatch,
		obs:      opts.Observer,
		audit:    opts.Audit,
		route:    opts.Route,
		ops:      make(chan *op, 1024),
		stop:     make(chan struct{}),
	}
	e.thresholds = normalThresholds(opts.BudgetThresholds)
	e.runFn = e.runBatch
	// The writer's store calls run on a context of the engine's own: a
	// batch carries many callers' decisions, so no one caller's request
	// may cancel it; Close ends it if the store hangs past Close's context.
	e.storeCtx, e.stopStore = context.WithCancel(context.Background())
	e.auditRetention = max(cmp.Or(opts.AuditRetention, DefaultAuditRetention), e.defaults.Retention)
	if e.clock == nil {
		e.clock = systemClock{}
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.maxBatch <= 0 {
		e.maxBatch = 256
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	e.prep, _ = opts.Store.(Preparer)
	if x, ok := opts.Store.(Exclusive); ok && x.Exclusive() {
		// 4096 records hold every effect in flight even at thousands of
		// decisions a second; a report that comes later decodes its record
		// once. A larger cache only gives the collector more live heap to
		// mark: 65536 raised begin p99 at 64 callers by about a third.
		// The value cache holds the hot counters whatever the mix of keys.
		e.cache = &writerCaches{recs: newGenCache[*effectRec](1 << 12), vals: newGenCache[[]byte](1 << 13)}
		e.countsKey = exclusiveCountsKey
		e.deferral = newLeaseDeferral()
	} else {
		e.replica = newReplicaID()
		e.countsKey = key(kindReplicaCounts, e.replica)
	}
	e.wg.Add(1)
	go e.writer()
	if err := e.checkSecret(); err != nil {
		close(e.stop) // the caller still owns and closes the store
		e.wg.Wait()
		return nil, err
	}
	if e.deferral != nil {
		if err := e.recoverLeases(context.Background()); err != nil {
			close(e.stop)
			e.wg.Wait()
			return nil, fmt.Errorf("indexing the leases a restart left: %w", err)
		}
	}
	if opts.ReapInterval >= 0 {
		maxSleep := opts.ReapInterval
		if maxSleep == 0 {
			maxSleep = exclusiveReapSleep
			if e.replica != "" {
				maxSleep = sharedReapSleep
			}
		}
		e.reapWake = make(chan struct{}, 1)
		e.wg.Add(1)
		go e.reaper(maxSleep)
	}
	e.every(opts.PurgeInterval, time.Hour, "purge", e.Purge)
	return e, nil
}

// every runs fn on a ticker until Close; interval < 0 disables it.
func (e *Engine) every(interval, def time.Duration, name string, fn func(context.Context) (int, error)) {
	if interval < 0 {
		return
	}
	if interval == 0 {
		interval = def
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-e.stop:
				return
			case <-t.C:
				if _, err := fn(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
					e.log.Error("background "+name+" failed", "err", err)
				}
			}
		}
	}()
}

// Close stops the background loops, lets queued decisions finish, and closes
// the store. Calls after Close return ErrClosed.
func (e *Engine) Close(ctx context.Context) error {
	e.closeMu.Lock()
	if e.closed {
		e.closeMu.Unlock()
		return nil
	}
	e.closed = true
	close(e.stop)
	e.closeMu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		e.stopStore() // a store waiting on its server gives up the commit
		return fmt.Errorf("closing ledger: %w", ctx.Err())
	}
	e.stopStore()
	if err := e.store.Close(); err != nil {
		return fmt.Errorf("closing ledger store: %w", err)
	}
	return nil
}

// submit queues fn for the writer and waits until its batch is durable,
// and returns what fn returned, typed: the writer's ops carry any, so the
// one assertion is here rather than at each caller. A package function, as
// a method cannot take a type parameter.
func submit[T any](ctx context.Context, e *Engine, fn func(t *opTxn, now time.Time) (T, error)) (T, error) {
	return submitReading(ctx, e, nil, fn)
}

// submitReading is submit for an op that names the keys it will read (see
// op.reads), so a batch prefetches them.
func submitReading[T any](ctx context.Context, e *Engine, reads func(known knownFunc) [][]byte, fn func(t *opTxn, now time.Time) (T, error)) (T, error) {
	v, err := e.enqueue(ctx, &op{fn: func(t *opTxn, now time.Time) (any, error) { return fn(t, now) }, reads: reads})
	res, _ := v.(T) // v is nil when the op never ran (ErrClosed, ctx, a failed commit)
	return res, err
}

// enqueue queues o for the writer and waits until its batch is durable.
func (e *Engine) enqueue(ctx context.Context, o *op) (any, error) {
	o.done = make(chan opResult, 1)
	e.closeMu.RLock()
	if e.closed {
		e.closeMu.RUnlock()
		return nil, ErrClosed
	}
	select {
	case e.ops <- o:
		e.closeMu.RUnlock()
	case <-ctx.Done():
		e.closeMu.RUnlock()
		return nil, ctx.Err()
	}
	// Once queued, the op will be decided and committed even if ctx ends:
	// the answer is waited for so that a caller never abandons a durable
	// execute it was not told about.
	r := <-o.done
	return r.val, r.err
}

// batchBytes caps what one commit carries, under Badger's transaction
// limit (15% of its 16 MiB memtable, 2.4 MiB, counting every value, since
// values stay in the tree; badgerstore.Open); the rest of the batch moves
// to the next commit. The check comes before each op, so one op's writes
// (a few hundred KiB at most) and the batch's audit block may go past it:
// the margin is about 400 KiB, so a smaller memtable needs a smaller cap.
const batchBytes = 2 << 20

// writer is the single goroutine that decides and commits. It takes every
// op queued so far (up to maxBatch), runs them in order against one store
// transaction, each op seeing the writes of those before it, commits once
// (one fsync for the whole batch), then answers them all. Ops queued while a
// commit is in progress form the next batch: this is group commit. After
// Close it still decides and commits what was queued, so no caller whose op
// was queued waits forever.
func (e *Engine) writer() {
	defer e.wg.Done()
	var batch []*op
	for {
		if len(batch) == 0 {
			select {
			case o := <-e.ops:
				batch = append(batch, o)
			case <-e.stop:
				for batch = e.take(nil); len(batch) > 0; batch = e.take(batch) {
					batch = e.commit(batch)
				}
				e.finalCheckpoint()
				return
			}
		}
		batch = e.commit(e.take(batch))
	}
}

// take adds ops already queued to batch, up to maxBatch, without waiting.
func (e *Engine) take(batch []*op) []*op {
	for len(batch) < e.maxBatch {
		select {
		case o := <-e.ops:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

// commit runs and commits as much of batch as fits and returns the ops left
// for the next commit. Update returns once the batch is durable, and the
// committed ops are answered then.
func (e *Engine) commit(batch []*op) []*op {
	if err := e.syncErr.Load(); err != nil {
		e.obs.WriteFailed("stopped", len(batch))
		answerAll(batch, err)
		return nil
	}
	e.run = batchRun{batch: batch}
	err := e.store.Update(e.storeCtx, e.runFn)
	batch, results := e.run.batch, e.run.results
	e.run = batchRun{}
	if err != nil {
		e.fail(batch, err)
		return nil
	}
	if e.deferral != nil {
		e.deferral.settle()
	}
	done := batch[:len(results)]
	if e.prep != nil && (len(results) < len(batch) || len(e.ops) > 0) {
		e.prep.PrepareUpdate() // see ledger.Preparer: before the answers
	}
	answer(done, results)
	if e.queued {
		e.wake.signal()
	}
	return batch[len(results):]
}

// batchRun is the batch of one commit, as the store runs it (runBatch):
// its ops, which a run may add to, their results, and the runs so far.
type batchRun struct {
	batch   []*op
	results []opResult
	runs    int
}

// runBatch is the fn commit hands the store's Update: it decides e.run's
// batch against tx.
func (e *Engine) runBatch(tx Txn) error {
	// A shared store may have made this batch wait for other
	// replicas' (see pgstore): whatever arrived meanwhile joins it.
	// A store may also run fn again; the batch is decided afresh,
	// without what the discarded run put in the caches.
	r := &e.run
	e.queued = false
	if r.runs++; r.runs > 1 {
		e.reruns.Add(1)
		if e.cache != nil {
			e.cache.clear()
		}
		if e.deferral != nil {
			e.deferral.discard()
		}
		e.fired = nil // it may hold what the discarded run wrote
	}
	r.batch = e.take(r.batch)
	var err error
	r.results, err = e.decideBatch(tx, r.batch)
	return err
}

// Reruns is how many times since New a store had the writer decide a
// batch again (a serialization failure on a shared store). Badger never
// does: one writer, no conflicts. make bench reports it per pair.
func (e *Engine) Reruns() int64 { return e.reruns.Load() }

// decideBatch runs the ops of batch in order against tx, each seeing the writes
// of those before it, until the batch's writes pass batchBytes, and returns
// their results. Records the ops write enter the cache at once, so a batch
// that is then not written must drop the cache (see fail). An error means
// the whole batch must be abandoned.
func (e *Engine) decideBatch(tx Txn, batch []*op) ([]opResult, error) {
	now := e.clock.Now()
	if p, ok := tx.(Prefetcher); ok {
		if err := prefetch(p, e.countsKey, batch); err != nil {
			return nil, err
		}
	}
	// The batch's results, state moves and events go in the writer's
	// buffers, kept from batch to batch (emptied, and what they held
	// dropped, once a batch is answered: see batchBufs.reset).
	bb := &e.batchBuf
	bb.reset()
	results, events := bb.results, bb.events
	if bb.states == nil {
		bb.states = map[State]int64{}
	}
	states := bb.states
	size := 0
	// One opTxn serves every op in turn, emptied before each: its buffer,
	// maps and events are copied out or dropped once an op is done.
	t := &e.opTxn
	t.tx, t.cache, t.lease = tx, e.cache, e.deferral
	for _, o := range batch {
		if size > batchBytes {
			break
		}
		t.reset()
		v, err := o.fn(t, now)
		if err == nil {
			n, ferr := t.flush()
			if ferr != nil {
				return nil, ferr
			}
			size += n
			for st, d := range t.states {
				states[st] += d
			}
			events = append(events, t.events...)
			t.cacheWrites()
			for _, c := range t.leases {
				t.lease.batch[c.id] = c.at
			}
		}
		results = append(results, opResult{v, err})
	}
	t.reset()
	t.tx = nil // the batch's, done with once it commits
	if len(states) > 0 {
		if err := e.applyStateCounts(tx, states); err != nil {
			return nil, err
		}
	}
	if err := e.journal(tx, events, now); err != nil {
		return nil, err
	}
	bb.results, bb.events = results, events
	return results, nil
}

// batchBufs are the writer's buffers for one batch, decideBatch's: its
// ops' results (answered, then no longer read), its ops' moves between
// states and their events (journaled, then no longer read).
type batchBufs struct {
	results []opResult
	states  map[State]int64
	events  []Event
}

// reset empties b for the next batch, dropping what the last one's
// results and events pointed to; a batch of rare size leaves no buffer
// that large behind.
func (b *batchBufs) reset() {
	const keep = 1024
	clear(b.results[:cap(b.results)]) // a batch abandoned midway appended past len
	clear(b.events[:cap(b.events)])
	if cap(b.results) > keep {
		b.results = nil
	}
	if cap(b.events) > keep {
		b.events = nil
	}
	b.results, b.events = b.results[:0], b.events[:0]
	clear(b.states)
}

// answer tells each op of a durable batch its result.
func answer(batch []*op, results []opResult) {
	for i, r := range results {
		batch[i].done <- r
	}
}

// fail answers every op of a batch that was not written, including any not
// yet run, with the same error, and drops the cache, which may hold records
// of the batch.
func (e *Engine) fail(batch []*op, err error) {
	if e.cache != nil {
		e.cache.clear()
	}
	if e.deferral != nil {
		e.deferral.discard()
		if len(e.deferral.set) > 0 { // a checkpoint in the batch cleared it: another soon
			e.leaseStale.Store(true)
			e.dueAt(e.clock.Now().Add(leaseMarkEvery))
		}
	}
	e.fired = nil // it may hold what the batch that was not written wrote
	if errors.Is(err, ErrStoreFailed) {
		// It may or may not be recorded: stop taking writes (failStop).
		e.obs.WriteFailed("sync", len(batch))
		answerAll(batch, e.failStop(err))
		return
	}
	e.log.Error("ledger commit failed", "ops", len(batch), "err", err)
	e.obs.WriteFailed("commit", len(batch))
	answerAll(batch, &Error{Code: CodeUnavailable, Message: "the ledger could not durably record this; nothing was recorded, retry later", Err: err})
}

// failStop makes the engine take no more writes after err, a store that
// failed in Update (ErrStoreFailed), and returns what every write is
// answered with from then on. What that batch covered may or may not be on
// disk, so the engine stops (fail-stop, as databases do after a failed
// fsync; a later fsync may succeed without the lost pages) until Ratchet is
// restarted and reads the ledger back from disk. Readiness (Ping) then
// fails too.
func (e *Engine) failStop(err error) *Error {
	e.log.Error("ledger sync failed; refusing writes until restart", "err", err)
	e.syncErr.CompareAndSwap(nil, &Error{Code: CodeUnavailable, Err: err,
		Message: "the ledger could not make its writes durable and takes no more until Ratchet is restarted; this may or may not have been recorded"})
	return e.syncErr.Load()
}

// answerAll answers every op of batch with err.
func answerAll(batch []*op, err *Error) {
	for _, o := range batch {
		o.done <- opResult{nil, err}
	}
}

// prefetch reads, in a few round trips, the keys a batch's ops say they
// will read, so that their reads are answered from memory.
func prefetch(p Prefetcher, counts []byte, batch []*op) error {
	fetched := map[string][]byte{}
	known := func(k []byte) ([]byte, bool) {
		v, ok := fetched[string(k)]
		return v, ok
	}
	want := [][]byte{counts}
	for range prefetchRounds {
		asked := map[string]bool{string(counts): true}
		for _, o := range batch {
			if o.reads == nil {
				continue
			}
			for _, k := range o.reads(known) {
				if _, ok := fetched[string(k)]; !ok && !asked[string(k)] {
					asked[string(k)] = true
					want = append(want, k)
				}
			}
		}
		if len(want) == 0 {
			return nil
		}
		vals, err := p.Prefetch(want)
		if err != nil {
			return err
		}
		for i, k := range want {
			fetched[string(k)] = vals[i]
		}
		want = want[:0]
	}
	return nil
}

// opTxn buffers one op's writes so that an op that fails leaves nothing
// behind, and lets the op read its own writes.
type opTxn struct {
	tx     Txn
	writes WriteBuffer
	states map[State]int64 // effects moved between states, applied per batch
	cache  *writerCaches
	lease  *leaseDeferral        // the writer's (leasemark.go); nil off the writer and on a shared store
	leases []leaseChange         // this op's changes to it
	recs   map[string]*effectRec // records this op wrote, for the cache
	events []Event               // what the op did, journaled if it succeeds (events.go)
	// dry: a dry run (explain.go), whose writes are dropped; it must
	// touch nothing of the writer's own.
	dry bool
	// principal is the OAuth identity of the agent whose op this is
	// (BeginRequest.Principal, …), stamped on each event it emits.
	principal string
}

// reset readies t for the batch's next op: nothing of the op before it
// stays (its events were copied into the batch's, its records into the
// cache, its buffered values handed to the store and the cache, which keep
// them; the buffer's keys are strings, which nothing changes).
func (t *opTxn) reset() {
	t.writes.Reset()
	clear(t.states)
	clear(t.recs)
	t.events = t.events[:0]
	t.leases = t.leases[:0]
	t.principal = ""
}

func (t *opTxn) Get(k []byte) ([]byte, error) {
	if v, ok := t.writes.Lookup(string(k)); ok {
		if v == nil {
			return nil, ErrNotFound
		}
		return v, nil
	}
	if t.cache == nil || !valueCached(k) {
		return t.tx.Get(k)
	}
	v, ok := t.cache.vals.getBytes(k)
	if !ok {
		var err error
		v, err = t.tx.Get(k)
		switch {
		case err == nil && v == nil:
			v = []byte{} // present and empty: nil would mean absent
		case err != nil && !errors.Is(err, ErrNotFound):
			return nil, err
		}
		t.cache.vals.put(string(k), v) // nil when absent
	}
	if v == nil {
		return nil, ErrNotFound
	}
	return v, nil
}

// cacheWrites puts what a successful op wrote into the writer's caches.
func (t *opTxn) cacheWrites() {
	if t.cache == nil {
		return
	}
	for id, r := range t.recs {
		if r == nil {
			t.cache.recs.remove(id)
		} else {
			t.cache.recs.put(id, r)
		}
	}
	for k, v := range t.writes.All() {
		if valueCached([]byte(k)) {
			t.cache.vals.put(k, v)
		}
	}
}

// Scan sees the batch's committed-so-far state but not this op's own
// buffered writes; ops scan before they write.
func (t *opTxn) Scan(prefix, start []byte, fn func(k, v []byte) (bool, error)) error {
	return t.tx.Scan(prefix, start, fn)
}

func (t *opTxn) Set(k, v []byte) error {
	if v == nil {
		v = []byte{} // nil marks a delete
	}
	t.writes.Put(string(k), v)
	return nil
}

func (t *opTxn) Delete(k []byte) error {
	t.writes.Put(string(k), nil)
	return nil
}

// flush hands the op's writes to the batch's transaction. Each key goes as
// the bytes of the buffer's string, not a copy: a Txn changes no key it is
// given, and Badger copies each into its own entries at commit.
func (t *opTxn) flush() (int, error) {
	n := 0
	for k, v := range t.writes.All() {
		kb := unsafe.Slice(unsafe.StringData(k), len(k))
		var err error
		if v == nil {
			err = t.tx.Delete(kb)
		} else {
			err = t.tx.Set(kb, v)
		}
		if err != nil {
			return n, fmt.Errorf("writing ledger key: %w", err)
		}
		n += len(k) + len(v)
	}
	return n, nil
}

// view runs fn against committed data, for as long as ctx lasts.
func (e *Engine) view(ctx context.Context, fn func(r Reader) error) error {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return ErrClosed
	}
	if err := e.store.View(ctx, fn); err != nil {
		var le *Error
		if errors.As(err, &le) {
			return err
		}
		return &Error{Code: CodeUnavailable, Message: "the ledger could not be read; retry later", Err: err}
	}
	return nil
}

// checkSecret records the secret's check value in a new ledger and refuses
// a ledger written with another secret. It runs through the writer, so of
// several replicas opening an empty shared ledger at once with different
// secrets, one records its value and the others are refused.
func (e *Engine) checkSecret() error {
	want := []byte(e.macs.keyedHash("ratchet-ledger-secret-check"))
	_, err := submit(context.Background(), e, func(t *opTxn, _ time.Time) (any, error) {
		got, err := t.Get(secretCheckKey)
		if errors.Is(err, ErrNotFound) {
			return nil, t.Set(secretCheckKey, want)
		}
		if err != nil {
			return nil, err
		}
		if !hmac.Equal(got, want) {
			return nil, fmt.Errorf("%w: mount the secret this ledger was created with (on every replica of a shared ledger the same one), or start a new ledger", ErrSecretMismatch)
		}
		return nil, nil
	})
	if err != nil && !errors.Is(err, ErrSecretMismatch) {
		return fmt.Errorf("checking the ledger's secret: %w", err)
	}
	return err
}

// Ping proves the ledger is open and writable: it makes one durable write
// through the writer (readiness probes call it).
func (e *Engine) Ping(ctx context.Context) error {
	_, err := submit(ctx, e, func(t *opTxn, now time.Time) (any, error) {
		return nil, t.Set(pingKey, []byte(now.UTC().Format(time.RFC3339Nano)))
	})
	return err
}
