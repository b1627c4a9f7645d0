package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The outbox's bound and its wake-ups (issue 32).
//
// A sink that is down keeps its entries waiting (the delivery worker's
// breaker pauses it instead of spending their attempts), so without a
// bound a sink that never comes back would let the outbox grow for good.
// BoundSinkOutbox keeps each sink within maxWaiting waiting entries and
// maxDead dead letters: past maxWaiting the oldest waiting entries become
// dead letters ("outbox bound"), and past maxDead the oldest dead letters
// are deleted, counted, and reported in one outbox.dropped event (audited,
// and routed to sinks like any other). No decision ever waits on it or is
// refused: the journal writes every entry, and the bound is applied after,
// by the worker, so between two checks a sink may hold what was written
// since the last one on top of the bound.

// outboxWake is a broadcast: wait returns a channel closed at the next
// signal after the call.
type outboxWake struct {
	mu sync.Mutex
	ch chan struct{}
}

func (w *outboxWake) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *outboxWake) signal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// OutboxWake returns a channel closed once a batch that queued outbox
// entries after the call is durable (this engine's writes only: a fleet's
// other replicas wake their own workers). A delivery worker sleeps on it
// instead of polling.
func (e *Engine) OutboxWake() <-chan struct{} { return e.wake.wait() }

// NextSinkEvent reports when sink's next entry becomes due (its NextAt, or
// the end of a live claim), the earliest over all its entries that are not
// dead; ok is false when it has none. An entry due already reports a time
// not after now.
func (e *Engine) NextSinkEvent(ctx context.Context, sink string) (next time.Time, ok bool, err error) {
	err = e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindOutbox, sink), nil, func(_, v []byte) (bool, error) {
			var en OutboxEntry
			if err := decodeJSON(v, &en); err != nil {
				return false, err
			}
			if en.Dead {
				return true, nil
			}
			at := en.NextAt
			if en.ClaimedBy != "" && en.ClaimedUntil.After(at) {
				at = en.ClaimedUntil
			}
			if !ok || at.Before(next) {
				next, ok = at, true
			}
			return true, nil
		})
	})
	return next, ok, err
}

// OutboxBound is what BoundSinkOutbox did to one sink's entries.
type OutboxBound struct {
	// Waiting and Dead are the sink's entries after it.
	Waiting, Dead int
	// Expired is how many waiting entries became dead letters (past
	// maxWaiting), Dropped how many dead letters were deleted (past
	// maxDead).
	Expired, Dropped int
}

// BoundSinkOutbox keeps sink's outbox within maxWaiting waiting entries
// and maxDead dead letters, oldest first (see the top of this file); a
// bound of zero or less is not applied. When it drops dead letters it
// records an outbox.dropped event with the sink and the count.
func (e *Engine) BoundSinkOutbox(ctx context.Context, sink string, maxWaiting, maxDead int) (OutboxBound, error) {
	var waiting, dead [][]byte // keys, oldest first (event ids sort by time)
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindOutbox, sink), nil, func(k, v []byte) (bool, error) {
			var en OutboxEntry
			if err := decodeJSON(v, &en); err != nil {
				return false, err
			}
			if en.Dead {
				dead = append(dead, k)
			} else {
				waiting = append(waiting, k)
			}
			return true, nil
		})
	})
	if err != nil {
		return OutboxBound{}, err
	}
	var expire, drop [][]byte
	if maxWaiting > 0 && len(waiting) > maxWaiting {
		expire = waiting[:len(waiting)-maxWaiting]
	}
	if maxDead > 0 {
		// The newly dead are younger than every dead letter: drop from the
		// old dead letters first, then from the oldest newly dead.
		all := append(append([][]byte(nil), dead...), expire...)
		if len(all) > maxDead {
			drop = all[:len(all)-maxDead]
		}
	}
	out := OutboxBound{Waiting: len(waiting), Dead: len(dead)}
	if len(expire) == 0 && len(drop) == 0 {
		return out, nil
	}
	res, err := submit(ctx, e, func(t *opTxn, now time.Time) (OutboxBound, error) {
		res := OutboxBound{}
		dropped := map[string]bool{}
		for _, k := range drop {
			var en OutboxEntry
			if err := getJSON(t, k, &en); errors.Is(err, ErrNotFound) {
				continue // delivered meanwhile
			} else if err != nil {
				return res, err
			}
			if err := t.Delete(k); err != nil {
				return res, err
			}
			dropped[string(k)] = true
			res.Dropped++
		}
		for _, k := range expire {
			if dropped[string(k)] {
				res.Expired++
				continue
			}
			var en OutboxEntry
			if err := getJSON(t, k, &en); errors.Is(err, ErrNotFound) {
				continue
			} else if err != nil {
				return res, err
			}
			if en.Dead {
				continue
			}
			en.Dead, en.ClaimedBy, en.ClaimedUntil = true, "", time.Time{}
			en.LastError = fmt.Sprintf("outbox bound: more than %d entries were waiting for this sink; the oldest became dead letters", maxWaiting)
			if err := setJSON(t, k, &en); err != nil {
				return res, err
			}
			res.Expired++
		}
		if res.Dropped > 0 {
			t.emit(Event{Type: EventOutboxDropped, Sink: sink, Count: res.Dropped, Actor: "outbox",
				Reason: fmt.Sprintf("the oldest %d dead letters of sink %s were dropped to keep it within %d", res.Dropped, sink, maxDead)})
		}
		return res, nil
	})
	if err != nil {
		return out, err
	}
	res.Waiting = len(waiting) - res.Expired
	res.Dead = len(dead) + res.Expired - res.Dropped
	return res, nil
}
