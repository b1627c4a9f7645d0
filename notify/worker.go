package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Sink delivers one event to one destination.
type Sink interface {
	// Deliver sends the entry's event. A nil error is a delivery; an error
	// wrapping ErrPermanent gives up at once (a dead letter); any other
	// error is tried again later.
	Deliver(ctx context.Context, en ledger.OutboxEntry) error
}

// ErrPermanent marks a delivery error that no retry can fix.
var ErrPermanent = errors.New("permanent delivery failure")

// Outbox is what the worker needs from the engine.
type Outbox interface {
	// ClaimSinkEvents claims up to limit of one sink's due entries,
	// oldest first.
	ClaimSinkEvents(ctx context.Context, sink, worker string, lease time.Duration, limit int) ([]ledger.OutboxEntry, error)
	// OutboxSinks lists the sinks the outbox holds entries for.
	OutboxSinks(ctx context.Context) ([]string, error)
	EventDelivered(ctx context.Context, sink, eventID string) error
	EventFailed(ctx context.Context, sink, eventID, reason string, next time.Time, dead bool) error
}

// Observer is told how each delivery attempt went (metrics): result is
// "delivered", "failed" (to be tried again) or "dead".
type Observer interface {
	Delivery(sink, eventType, result string)
}

// DropObserver is an optional interface of an Observer: it is told when
// the outbox's bound dropped a sink's oldest dead letters.
type DropObserver interface {
	Dropped(sink string, n int)
}

// Waker is an optional interface of an Outbox (the engine has it): with it
// a sink's loop sleeps until its next entry is due, its breaker's probe,
// or a signal that new entries were written, instead of polling.
type Waker interface {
	// OutboxWake returns a channel closed once entries written after the
	// call are durable.
	OutboxWake() <-chan struct{}
	// NextSinkEvent reports when sink's next entry that is not dead is
	// due (ok false: it has none).
	NextSinkEvent(ctx context.Context, sink string) (next time.Time, ok bool, err error)
}

// Bounder is an optional interface of an Outbox (the engine has it): it
// keeps a sink's entries within the worker's MaxWaiting and MaxDead (see
// ledger.Engine.BoundSinkOutbox).
type Bounder interface {
	BoundSinkOutbox(ctx context.Context, sink string, maxWaiting, maxDead int) (ledger.OutboxBound, error)
}

// The worker's defaults.
const (
	DefaultMaxAttempts = 10
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultPoll        = 200 * time.Millisecond
	DefaultIdleCheck   = 30 * time.Second
	DefaultTimeout     = 10 * time.Second
	DefaultMaxWaiting  = 10000
	DefaultMaxDead     = 1000
	DefaultBoundEvery  = 10 * time.Second
	defaultBatch       = 32
	minSleep           = 50 * time.Millisecond
)

// Worker delivers outbox entries to sinks until its context ends.
type Worker struct {
	// Outbox is the engine. Required.
	Outbox Outbox
	// Sinks are the sinks by name. An entry for a sink not listed (one
	// removed from the config) is retried until it is dead.
	Sinks map[string]Sink
	// Name identifies this worker's claims (a replica of a fleet); empty
	// means "worker".
	Name string
	// MaxAttempts is the tries before an entry is dead; zero means
	// DefaultMaxAttempts.
	MaxAttempts int
	// Backoff is the wait after the first failure, doubling after each
	// one up to MaxBackoff; zero means DefaultBackoff and DefaultMaxBackoff.
	Backoff, MaxBackoff time.Duration
	// Poll is the longest a sink's loop sleeps when it had nothing due:
	// zero means DefaultIdleCheck on an Outbox that is a Waker (it sleeps
	// until its next entry is due or new ones are written, and looks
	// again after this for a fleet's other replicas' entries), DefaultPoll
	// on one that is not.
	Poll time.Duration
	// MaxWaiting and MaxDead bound each sink's entries on an Outbox that
	// is a Bounder: past MaxWaiting the oldest waiting entries become dead
	// letters, past MaxDead the oldest dead letters are dropped (counted,
	// see DropObserver, and an outbox.dropped event). Zero means
	// DefaultMaxWaiting and DefaultMaxDead, negative no bound.
	MaxWaiting, MaxDead int
	// BoundEvery is how often a sink's loop applies the bound, at most;
	// zero means DefaultBoundEvery.
	BoundEvery time.Duration
	// Timeout bounds one delivery; zero means DefaultTimeout.
	Timeout time.Duration
	// Observer is told of each attempt; nil means nobody.
	Observer Observer
	// Logger gets a line per failure; nil discards.
	Logger *slog.Logger

	mu       sync.Mutex
	breakers map[string]*breaker // per configured sink, in memory
}

// A sink's breaker. A sink that fails breakerTrips deliveries in a row is
// taken as down (a dead host, an expired token): its deliveries pause for
// a cool-down, Backoff doubling after each failed probe up to
// min(MaxBackoff, breakerMaxCool), and then one entry is claimed to probe
// it; a delivery closes the breaker. It lives in memory, so a dead sink
// costs the ledger two writes (a claim, a failure) per probe instead of
// two per entry per retry, and no dead letters pile up from a sink that
// is merely down (each entry's own attempts count only the tries it was
// given). A failure that wraps ErrPermanent is the event's, not the
// sink's, and does not count. The breaker is per process: each replica of
// a fleet probes for itself.
type breaker struct {
	fails     int           // deliveries failed in a row
	cool      time.Duration // the last cool-down
	openUntil time.Time
}

// breakerTrips is how many failures in a row take a sink as down, and
// breakerMaxCool the longest pause between probes: an approval request
// reaches the approver at most that long after the sink is back.
const (
	breakerTrips   = 3
	breakerMaxCool = time.Minute
)

// Run delivers until ctx ends, then returns once deliveries in progress
// have finished. Each sink has a loop of its own, claiming only its own
// entries: a sink that hangs, is slow or has a backlog delays no other
// sink's deliveries. Entries for a sink not in Sinks are swept now and then
// by one more loop, which fails them until they are dead.
//
// Idle, the loops sleep (issue 31 counts an idle sidecar's wake-ups): a
// sink's loop until its next entry is due, its breaker's next probe or a
// signal that entries were written (Waker), at most Poll; the sweep every
// Poll. An Outbox that is not a Waker is polled every Poll (default
// DefaultPoll), and swept every orphanSweepPolls of it.
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for sink := range w.Sinks {
		wg.Go(func() { w.sinkLoop(ctx, sink) })
	}
	sweep := w.idle() * orphanSweepPolls
	if _, ok := w.Outbox.(Waker); ok {
		sweep = w.idle()
	}
	wg.Go(func() {
		for {
			n, err := w.sweepOrphans(ctx)
			if !w.pause(ctx, n, err, nil, sweep) {
				return
			}
		}
	})
	wg.Wait()
}

// orphanSweepPolls is how many polls apart the entries of sinks that are
// not configured are looked for, on an Outbox that does not signal.
const orphanSweepPolls = 10

// sinkLoop delivers sink's entries until ctx ends, applying the bound now
// and then.
func (w *Worker) sinkLoop(ctx context.Context, sink string) {
	waker, _ := w.Outbox.(Waker)
	var bounded time.Time
	for {
		var wake <-chan struct{}
		if waker != nil {
			wake = waker.OutboxWake() // before the claim: a write during it wakes the next sleep
		}
		n, err := w.runSink(ctx, sink)
		if ctx.Err() == nil && time.Since(bounded) >= w.boundEvery() {
			w.bound(ctx, sink)
			bounded = time.Now()
		}
		sleep := w.idle()
		if waker != nil && err == nil && n == 0 {
			sleep = w.untilDue(ctx, waker, sink)
		}
		if !w.pause(ctx, n, err, wake, sleep) {
			return
		}
	}
}

// pause logs a failed run and waits before the next: not at all after a
// run that found work (there may be more due), else for sleep or until
// wake. It reports false once ctx has ended.
func (w *Worker) pause(ctx context.Context, n int, err error, wake <-chan struct{}, sleep time.Duration) bool {
	if ctx.Err() != nil {
		return false
	}
	if err != nil && !errors.Is(err, ledger.ErrClosed) {
		w.logger().Warn("claiming outbox entries", "err", err)
	}
	if n > 0 && err == nil {
		return true
	}
	t := time.NewTimer(sleep)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-t.C:
	}
	return true
}

// untilDue is how long sink's loop may sleep: until its next entry is due
// or, while its breaker is open, its next probe; at most the idle check,
// at least minSleep.
func (w *Worker) untilDue(ctx context.Context, waker Waker, sink string) time.Duration {
	d := w.idle()
	next, ok, err := waker.NextSinkEvent(ctx, sink)
	if err != nil {
		return min(d, w.poll())
	}
	if ok {
		d = min(d, time.Until(next))
	}
	b := w.breaker(sink)
	w.mu.Lock()
	open := b.openUntil
	w.mu.Unlock()
	if ok && time.Until(open) > d {
		d = min(w.idle(), time.Until(open))
	}
	return max(d, minSleep)
}

// bound applies MaxWaiting and MaxDead to sink's entries.
func (w *Worker) bound(ctx context.Context, sink string) {
	b, ok := w.Outbox.(Bounder)
	if !ok {
		return
	}
	res, err := b.BoundSinkOutbox(ctx, sink, w.maxWaiting(), w.maxDead())
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ledger.ErrClosed) {
			w.logger().Warn("bounding the outbox", "sink", sink, "err", err)
		}
		return
	}
	if res.Expired > 0 {
		w.logger().Warn("outbox bound: the oldest waiting notifications became dead letters", "sink", sink,
			"count", res.Expired, "max_waiting", w.maxWaiting())
	}
	if res.Dropped > 0 {
		w.logger().Warn("outbox bound: the oldest dead letters were dropped", "sink", sink,
			"count", res.Dropped, "max_dead", w.maxDead())
		if o, ok := w.Observer.(DropObserver); ok {
			o.Dropped(sink, res.Dropped)
		}
	}
}

// RunOnce claims what is due, delivers it and records each result; it
// returns how many entries it handled. Sinks are served in parallel, each
// claiming a batch of its own entries, and each sink's entries one after
// another in the order they were recorded (event ids sort by time), so
// that a sink hears of a request before its decision. Entries for sinks
// not in Sinks are failed.
func (w *Worker) RunOnce(ctx context.Context) (int, error) {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		errs  []error
	)
	add := func(n int, err error) {
		mu.Lock()
		defer mu.Unlock()
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	for sink := range w.Sinks {
		wg.Go(func() { add(w.runSink(ctx, sink)) })
	}
	wg.Go(func() { add(w.sweepOrphans(ctx)) })
	wg.Wait()
	return total, errors.Join(errs...)
}

// runSink claims a batch of sink's due entries and delivers them in order:
// none while its breaker is open, one (a probe) while it is failing.
func (w *Worker) runSink(ctx context.Context, sink string) (int, error) {
	lease := w.timeout()*2 + 5*time.Second
	claimed := time.Now()
	limit := defaultBatch
	if _, configured := w.Sinks[sink]; configured {
		b := w.breaker(sink)
		w.mu.Lock()
		open, failing := claimed.Before(b.openUntil), b.fails > 0
		w.mu.Unlock()
		if open {
			return 0, nil
		}
		if failing {
			limit = 1
		}
	}
	list, err := w.Outbox.ClaimSinkEvents(ctx, sink, w.name(), lease, limit)
	if err != nil || len(list) == 0 {
		return 0, err
	}
	slices.SortFunc(list, func(a, b ledger.OutboxEntry) int { return strings.Compare(a.Event.ID, b.Event.ID) })
	for _, en := range list {
		if ctx.Err() != nil {
			// Stopping: the rest are claimed again when the claim runs
			// out (at once by the next run of a process of its own).
			break
		}
		if time.Since(claimed) > lease-w.timeout() {
			// A slow sink: the rest would outlive the claim and be sent
			// twice; they are claimed again once it ends.
			break
		}
		if !w.deliver(en) {
			// The sink is down: the rest of the batch waits for its claim
			// to run out (no write), then for the breaker.
			break
		}
	}
	return len(list), nil
}

// breaker returns sink's breaker.
func (w *Worker) breaker(sink string) *breaker {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.breakers == nil {
		w.breakers = map[string]*breaker{}
	}
	b := w.breakers[sink]
	if b == nil {
		b = &breaker{}
		w.breakers[sink] = b
	}
	return b
}

// trip records a delivery to a configured sink: err nil closes its
// breaker, a failure of the sink counts towards opening it. It reports
// whether the sink is to be given the next entry now (false once open).
func (w *Worker) trip(sink string, err error) bool {
	if _, configured := w.Sinks[sink]; !configured || errors.Is(err, ErrPermanent) {
		return true
	}
	b := w.breaker(sink)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		if b.fails >= breakerTrips {
			w.logger().Info("notification sink answers again: deliveries resume", "sink", sink)
		}
		*b = breaker{}
		return true
	}
	b.fails++
	if b.fails < breakerTrips {
		return true // one entry's failure; the next may go through
	}
	if b.fails == breakerTrips {
		b.cool = w.base()
	} else {
		b.cool = min(b.cool*2, min(w.ceil(), breakerMaxCool))
	}
	b.openUntil = time.Now().Add(b.cool)
	w.logger().Warn("notification sink is failing: deliveries paused", "sink", sink, "failures_in_a_row", b.fails,
		"next_probe_in", b.cool.String(), "err", err)
	return false
}

// sweepOrphans fails the due entries of sinks that are not configured (a
// sink removed from the config), until they are dead.
func (w *Worker) sweepOrphans(ctx context.Context) (int, error) {
	sinks, err := w.Outbox.OutboxSinks(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, sink := range sinks {
		if _, ok := w.Sinks[sink]; ok {
			continue
		}
		for ctx.Err() == nil {
			n, err := w.runSink(ctx, sink)
			total += n
			if err != nil {
				return total, err
			}
			if n == 0 {
				break
			}
		}
	}
	return total, nil
}

// deliver sends one entry and records the outcome; it reports whether the
// sink is to be given the next entry now (see trip). It runs on a context
// of its own, so that a shutdown lets a send in progress finish and record.
func (w *Worker) deliver(en ledger.OutboxEntry) bool {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout())
	defer cancel()
	var err error
	if s, ok := w.Sinks[en.Sink]; ok {
		err = s.Deliver(ctx, en)
	} else {
		err = fmt.Errorf("no sink %q is configured", en.Sink)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	if err == nil {
		if rerr := w.Outbox.EventDelivered(rctx, en.Sink, en.Event.ID); rerr != nil {
			w.logger().Warn("recording a delivery", "sink", en.Sink, "event_id", en.Event.ID, "err", rerr)
		}
		w.observe(en, "delivered")
		return w.trip(en.Sink, nil)
	}
	attempts := en.Attempts + 1
	dead := errors.Is(err, ErrPermanent) || attempts >= w.maxAttempts()
	next := time.Now().Add(w.backoff(attempts))
	result := "failed"
	if dead {
		result = "dead"
	}
	w.logger().Warn("notification not delivered", "sink", en.Sink, "event_id", en.Event.ID, "type", en.Event.Type,
		"attempt", attempts, "dead", dead, "err", err)
	if rerr := w.Outbox.EventFailed(rctx, en.Sink, en.Event.ID, err.Error(), next, dead); rerr != nil {
		w.logger().Warn("recording a failed delivery", "sink", en.Sink, "event_id", en.Event.ID, "err", rerr)
	}
	w.observe(en, result)
	return w.trip(en.Sink, err)
}

// backoff is the wait after the attempts-th failure: Backoff doubled for
// each failure before it, at most MaxBackoff, less up to a tenth at random
// so that a fleet's retries spread out.
func (w *Worker) backoff(attempts int) time.Duration {
	ceil := w.ceil()
	d := w.base()
	for i := 1; i < attempts && d < ceil; i++ {
		d *= 2
	}
	d = min(d, ceil)
	return d - time.Duration(rand.Int64N(int64(d)/10+1))
}

func (w *Worker) base() time.Duration {
	if w.Backoff <= 0 {
		return DefaultBackoff
	}
	return w.Backoff
}

func (w *Worker) ceil() time.Duration {
	if w.MaxBackoff <= 0 {
		return DefaultMaxBackoff
	}
	return w.MaxBackoff
}

func (w *Worker) observe(en ledger.OutboxEntry, result string) {
	if w.Observer != nil {
		w.Observer.Delivery(en.Sink, en.Event.Type, result)
	}
}

func (w *Worker) name() string {
	if w.Name == "" {
		return "worker"
	}
	return w.Name
}

func (w *Worker) maxAttempts() int {
	if w.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return w.MaxAttempts
}

func (w *Worker) poll() time.Duration {
	if w.Poll <= 0 {
		return DefaultPoll
	}
	return w.Poll
}

// idle is the longest a loop sleeps (see Poll).
func (w *Worker) idle() time.Duration {
	if w.Poll > 0 {
		return w.Poll
	}
	if _, ok := w.Outbox.(Waker); ok {
		return DefaultIdleCheck
	}
	return DefaultPoll
}

func (w *Worker) boundEvery() time.Duration {
	if w.BoundEvery <= 0 {
		return DefaultBoundEvery
	}
	return w.BoundEvery
}

func (w *Worker) maxWaiting() int {
	if w.MaxWaiting == 0 {
		return DefaultMaxWaiting
	}
	return w.MaxWaiting // negative: BoundSinkOutbox applies none
}

func (w *Worker) maxDead() int {
	if w.MaxDead == 0 {
		return DefaultMaxDead
	}
	return w.MaxDead
}

func (w *Worker) timeout() time.Duration {
	if w.Timeout <= 0 {
		return DefaultTimeout
	}
	return w.Timeout
}

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger
}
