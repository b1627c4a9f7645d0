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

// The worker's defaults.
const (
	DefaultMaxAttempts = 10
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultPoll        = 200 * time.Millisecond
	DefaultTimeout     = 10 * time.Second
	defaultBatch       = 32
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
	// Poll is how often the outbox is looked at when it had nothing due;
	// zero means DefaultPoll.
	Poll time.Duration
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
func (w *Worker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for sink := range w.Sinks {
		wg.Go(func() {
			w.loop(ctx, w.poll(), func(ctx context.Context) (int, error) { return w.runSink(ctx, sink) })
		})
	}
	wg.Go(func() { w.loop(ctx, w.poll()*orphanSweepPolls, w.sweepOrphans) })
	wg.Wait()
}

// orphanSweepPolls is how many polls apart the entries of sinks that are
// not configured are looked for.
const orphanSweepPolls = 10

// loop runs once until ctx ends, again at once while it finds work and
// after idle when it found none or failed.
func (w *Worker) loop(ctx context.Context, idle time.Duration, once func(context.Context) (int, error)) {
	for {
		n, err := once(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && !errors.Is(err, ledger.ErrClosed) {
			w.logger().Warn("claiming outbox entries", "err", err)
		}
		if n > 0 && err == nil {
			continue // there may be more due
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(idle):
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
