package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// sweepBatch bounds how many effects one reap or purge op touches, so
// maintenance never holds the writer for long.
const sweepBatch = 256

// Reap turns every pending effect whose lease has run out into an
// indeterminate one (and counts it against its agent as unreported), so
// counts and warnings are right even when nobody retries. Expiry also
// happens lazily whenever a begin touches such an effect. It returns how
// many effects it expired. The background reaper calls it every
// Options.ReapInterval. It first writes the entries of the leases the
// writer deferred (leasemark.go), and then expires lapsed approval
// requests (ExpireApprovals). A failed checkpoint does not stop the
// sweep: its error is returned with the sweep's, and the count is still
// what the sweep expired.
func (e *Engine) Reap(ctx context.Context) (int, error) {
	n, _, err := e.reap(ctx)
	return n, err
}

// reap is Reap, also returning when the next lease or approval request it
// saw ends (zero when none does): the background reaper sleeps until then.
func (e *Engine) reap(ctx context.Context) (int, time.Time, error) {
	// Deferred leases first get their entries (leasemark.go). A
	// checkpoint that fails does not stop the sweep: the leases already
	// indexed are reaped all the same (one unreadable deferred record must
	// not hold back every other agent's expiries), the stale flag makes the
	// next reap try the checkpoint again, and reap returns its error with
	// the sweep's for the reaper to log.
	cerr := e.checkpoint(ctx)
	if cerr != nil && (errors.Is(cerr, ErrClosed) || ctx.Err() != nil) {
		return 0, time.Time{}, cerr
	}
	if cerr != nil {
		cerr = fmt.Errorf("checkpoint of the deferred leases (the sweep went on): %w", cerr)
	}
	n, next, err := e.sweep(ctx, kindLease, func(now time.Time) time.Time { return now }, func(t *opTxn, rec *effectRec, now time.Time) (bool, error) {
		if rec.State != StatePending || now.Before(*rec.LeaseExpiresAt) {
			return false, nil
		}
		return true, e.expireLease(t, rec)
	}, func(rec *effectRec, at time.Time) bool {
		return rec.State == StatePending && rec.LeaseExpiresAt.Equal(at)
	})
	if n > 0 {
		e.obs.Expired(n)
	}
	if err == nil { // approval requests that lapsed, likewise
		var due time.Time
		_, due, err = e.expireApprovals(ctx)
		if next.IsZero() || !due.IsZero() && due.Before(next) {
			next = due
		}
	}
	return n, next, errors.Join(cerr, err)
}

// Reaper timing. The reaper used to sweep every ReapInterval whether or
// not anything was due: an idle ledger's two scans a second. It now sleeps
// until the first lease or approval request it knows of ends, and the
// writer wakes it when it hands out one that ends sooner, or defers a
// lease's entry (a checkpoint is then due a second later; dueAt), so an
// empty ledger sweeps only every maxReapSleep. That cap stands for what
// the reaper cannot know: a wall clock stepped forward (its timer runs on
// the monotonic clock) and, on a shared store, leases other replicas
// handed out after its last scan (one whose replica stopped is reaped
// only by the others' sweeps), so there it is the old interval, a second.
const (
	exclusiveReapSleep = time.Minute
	sharedReapSleep    = time.Second
	// minReapGap keeps a sweep whose entries stay due by the scan's clock
	// but not yet by the writer's (a clock stepping back) from spinning.
	minReapGap = 10 * time.Millisecond
)

// reapNever is reapAt's value while a sweep runs: any lease handed out
// meanwhile wakes the reaper, since its scan may not have seen it.
const reapNever = int64(math.MaxInt64)

// dueAt tells the background reaper that a lease or an approval request
// ends at at, or that deferred leases need a checkpoint then
// (leasemark.go), waking it when that is before it meant to sweep. It is
// called by the writer as it writes the index entry or defers it; an op
// that then fails costs only an early sweep.
func (e *Engine) dueAt(at time.Time) {
	if e.reapWake == nil {
		return
	}
	n := at.UnixNano()
	for {
		cur := e.reapAt.Load()
		if n >= cur {
			return
		}
		if e.reapAt.CompareAndSwap(cur, n) {
			select {
			case e.reapWake <- struct{}{}:
			default:
			}
			return
		}
	}
}

// reaper runs Reap until Close: at once (leases left from before a
// restart), then whenever the first lease or approval request it knows of
// ends, and at least every maxSleep.
func (e *Engine) reaper(maxSleep time.Duration) {
	defer e.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-e.reapWake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
		now := e.clock.Now()
		if at := e.reapAt.Load(); at <= now.UnixNano() {
			e.reapAt.Store(reapNever)
			_, next, err := e.reap(context.Background())
			if err != nil && !errors.Is(err, ErrClosed) {
				e.log.Error("background reap failed", "err", err)
			}
			now = e.clock.Now()
			limit := now.Add(maxSleep)
			if next.IsZero() || next.After(limit) {
				next = limit
			}
			for n := next.UnixNano(); ; { // leases handed out meanwhile may be sooner
				cur := e.reapAt.Load()
				if cur <= n || e.reapAt.CompareAndSwap(cur, n) {
					break
				}
			}
		}
		wait := max(time.Duration(e.reapAt.Load()-now.UnixNano()), minReapGap)
		timer.Reset(min(wait, maxSleep))
	}
}

// Purge deletes, with their indexes, finished effects (succeeded, failed,
// rejected, compensated) that finished longer than the retention ago, and
// approval requests and unused grants that expired longer than the
// retention ago. Pending and indeterminate effects are never purged: they
// need someone's attention. A purged key is forgotten, so a later begin
// with it is new. It returns how many effects it purged.
func (e *Engine) Purge(ctx context.Context) (int, error) {
	// The retention index (kindRetention) is written no more; what ledgers
	// written before it stopped hold in it is swept as before.
	n, _, err := e.sweep(ctx, kindRetention, func(now time.Time) time.Time { return now.Add(-e.defaults.Retention) }, e.purgeEffect,
		func(rec *effectRec, at time.Time) bool { return rec.RetainedAt.Equal(at) })
	if err == nil {
		var m int
		m, err = e.purgeFinished(ctx)
		n += m
	}
	if err == nil {
		err = e.purgeCounters(ctx)
	}
	if err == nil {
		err = e.purgeJournal(ctx)
	}
	if err == nil {
		err = e.purgeSinkRefs(ctx)
	}
	if err == nil {
		err = e.purgeGrants(ctx)
	}
	if c, ok := e.store.(Compactor); ok && n > 0 && err == nil {
		if cerr := c.Compact(); cerr != nil {
			e.log.Warn("reclaiming space after purge", "err", cerr)
		}
	}
	return n, err
}

// sweep walks a time index up to and including cutoff(now) and applies fn to each effect
// in batches through the writer, counting the effects fn acted on. fn must
// itself remove the index entry when it acts. An entry fn declined is
// dropped if the effect no longer owns it (owns says which), and kept if it
// does: it was due by the scan's clock but not by the writer's (the clock
// stepped back), and the next sweep will see it again. It also returns the
// time of the first entry the last scan left for later (that entry's
// cutoff, not its own time, for a retention sweep; zero when there is
// none): entries kept because the writer's clock had not reached them
// count as due then.
func (e *Engine) sweep(ctx context.Context, kind string, cutoff func(time.Time) time.Time,
	fn func(t *opTxn, rec *effectRec, now time.Time) (bool, error), owns func(rec *effectRec, at time.Time) bool) (int, time.Time, error) {
	total := 0
	for {
		until := cutoff(e.clock.Now())
		var keys [][]byte
		var next time.Time
		err := e.view(ctx, func(r Reader) error {
			return r.Scan(prefix(kind), nil, func(k, _ []byte) (bool, error) {
				at, _, _ := timeKeyParts(k)
				if at.After(until) || len(keys) == sweepBatch {
					next = at
					return false, nil
				}
				keys = append(keys, k)
				return true, nil
			})
		})
		if err != nil || len(keys) == 0 {
			return total, next, err
		}
		kept := 0
		swept, err := submit(ctx, e, func(t *opTxn, now time.Time) (int, error) {
			n := 0
			kept = 0
			for _, k := range keys {
				at, id, ok := timeKeyParts(k)
				if !ok {
					continue
				}
				rec, err := e.effectByID(t, "", id)
				if errors.Is(err, ErrNotFound) {
					if err := t.Delete(k); err != nil {
						return 0, err
					}
					continue
				}
				if err != nil {
					return 0, err
				}
				acted, err := fn(t, rec, now)
				switch {
				case err != nil:
					return 0, err
				case acted:
					n++
				case owns(rec, at):
					kept++
				default:
					if err := t.Delete(k); err != nil {
						return 0, err
					}
				}
			}
			return n, nil
		})
		if err != nil {
			return total, time.Time{}, err
		}
		total += swept
		if kept == len(keys) {
			// Nothing here is due by the writer's clock yet.
			at, _, _ := timeKeyParts(keys[0])
			return total, at, nil
		}
		if len(keys) < sweepBatch {
			return total, next, nil
		}
	}
}

// purgeFinished purges the effects due for it, found by walking effect
// records in id order, which is the order they were made in, up to the
// first made after the cutoff: an effect finishes (or its approval request
// expires) after it is made, so no later one is due. What it walks past
// are effects made before the cutoff that must stay (pending,
// indeterminate, an unreported expiry, one finished late), read at each
// purge. This replaced an index entry written with every effect's finish
// (kindRetention), a key a pair: the purge now reads, once an hour, what
// every report used to write. A clock that stepped back makes ids run
// ahead of it (see idTime), and such effects are purged late, never early.
func (e *Engine) purgeFinished(ctx context.Context) (int, error) {
	total := 0
	var start []byte
	for {
		cutoff := e.clock.Now().Add(-e.defaults.Retention)
		var ids []string
		more := false
		err := e.view(ctx, func(r Reader) error {
			return r.Scan(prefix(kindEffect), start, func(k, v []byte) (bool, error) {
				id := lastPart(k)
				if at, ok := idTime(id); ok && at.After(cutoff) {
					return false, nil
				}
				if len(ids) == sweepBatch {
					more = true
					return false, nil
				}
				start = append(append(start[:0], k...), 0) // just after it
				var rec effectRec
				if err := decodeEffect(v, &rec); err != nil {
					return false, err
				}
				if !rec.RetainedAt.IsZero() && !rec.RetainedAt.After(cutoff) {
					ids = append(ids, id)
				}
				return true, nil
			})
		})
		if err != nil || len(ids) == 0 && !more {
			return total, err
		}
		n, err := submit(ctx, e, func(t *opTxn, now time.Time) (int, error) {
			n := 0
			for _, id := range ids {
				rec, err := e.effectByID(t, "", id)
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					return 0, err
				}
				acted, err := e.purgeEffect(t, rec, now)
				if err != nil {
					return 0, err
				}
				if acted {
					n++
				}
			}
			return n, nil
		})
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

func (e *Engine) purgeEffect(t *opTxn, rec *effectRec, now time.Time) (bool, error) {
	if rec.RetainedAt.IsZero() || rec.RetainedAt.After(now.Add(-e.defaults.Retention)) {
		return false, nil // not retained, or not yet due
	}
	del := [][]byte{
		key(kindEffect, rec.EffectID),
		key(kindNamespace, rec.Namespace, rec.EffectID),
	}
	if k := timeKey(kindRetention, rec.RetainedAt, rec.EffectID); !rec.RetainedAt.IsZero() {
		if _, err := t.Get(k); err == nil { // an entry written before 2026-12-02
			del = append(del, k)
		}
	}
	if id, err := t.Get(key(kindIdemKey, rec.Namespace, rec.IdempotencyKey)); err == nil && string(id) == rec.EffectID {
		del = append(del, key(kindIdemKey, rec.Namespace, rec.IdempotencyKey))
	}
	if rec.RunID != "" {
		del = append(del, key(kindRun, rec.Namespace, rec.RunID, rec.EffectID))
	}
	del = append(del, e.vendorKeyIndexes(rec)...)
	if _, err := t.Get(key(kindRecoveryClaim, rec.EffectID)); err == nil {
		del = append(del, key(kindRecoveryClaim, rec.EffectID))
	}
	if rec.GroupKey != "" {
		del = append(del, key(kindGroupMember, rec.Namespace, rec.GroupKey, rec.EffectID))
		// The group goes with its last step.
		last := true
		err := t.Scan(prefix(kindGroupMember, rec.Namespace, rec.GroupKey), nil, func(k, _ []byte) (bool, error) {
			if id := lastPart(k); id != rec.EffectID {
				if v, written := t.writes.Lookup(string(k)); !written || v != nil { // not deleted by this op
					last = false
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return false, err
		}
		if last {
			del = append(del, key(kindGroup, rec.Namespace, rec.GroupKey))
		}
	}
	if rec.Approval != nil {
		del = append(del, key(kindApproval, rec.Approval.ApprovalID))
	}
	for _, id := range rec.PriorApprovals {
		del = append(del, key(kindApproval, id))
	}
	for _, k := range del {
		if err := t.Delete(k); err != nil {
			return false, err
		}
	}
	t.remember(rec.EffectID, nil)
	return true, moveStateCount(t, rec.State, "")
}

// purgeCounters deletes ceiling counters that count nothing and hold no
// spend within the retention (a counterparty seen once, an agent gone), so
// that scopes do not accumulate forever. Spend that has left its window is
// kept that long in case the clock that moved it out proves wrong (see
// "Clock jumps" in budget.go): a counter is forgotten no sooner than the
// effects that spent in it. A counter for a run window never empties by
// time and is kept. Each deletion re-checks the counter inside the writer.
// On a shared store, an idle share (of a replica that stopped, most often)
// is deleted, its grant given back to its pool and what it kept of past
// spend merged into the pool's; a pool goes once it has granted nothing
// and holds nothing within the retention.
func (e *Engine) purgeCounters(ctx context.Context) error {
	var dead [][]byte
	err := e.view(ctx, func(r Reader) error {
		now := e.clock.Now()
		return r.Scan(prefix(kindCounter), nil, func(k, v []byte) (bool, error) {
			var c counterRec
			if err := decodeCounter(v, &c); err != nil {
				return false, err
			}
			if e.counterIdle(&c, now) && (c.Replica != "" || e.counterForgettable(&c, now)) {
				dead = append(dead, k)
			}
			return true, nil
		})
	})
	if err != nil || len(dead) == 0 {
		return err
	}
	for len(dead) > 0 {
		chunk := dead[:min(len(dead), sweepBatch)]
		dead = dead[len(chunk):]
		if _, err := submit(ctx, e, func(t *opTxn, now time.Time) (any, error) {
			for _, k := range chunk {
				var c counterRec
				if err := getCounter(t, k, &c); err != nil {
					if errors.Is(err, ErrNotFound) {
						continue
					}
					return nil, err
				}
				if !e.counterIdle(&c, now) || c.Replica == "" && !e.counterForgettable(&c, now) {
					continue
				}
				if err := t.Delete(k); err != nil {
					return nil, err
				}
				if c.Replica == "" { // its thresholds re-arm: it counted nothing for a whole window
					if err := t.Delete(thresholdKey(k)); err != nil {
						return nil, err
					}
				}
				if c.Replica != "" {
					if err := e.returnGrant(t, c.poolKey(k), &c, now); err != nil {
						return nil, err
					}
				}
			}
			return nil, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// returnGrant gives the grant of share, deleted, back to the pool at k,
// with the past spend the share kept, and deletes the pool if it may be
// forgotten then.
func (e *Engine) returnGrant(t *opTxn, k []byte, share *counterRec, now time.Time) error {
	var pool counterRec
	if err := getCounter(t, k, &pool); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	pool.Grant = max(0, pool.Grant-share.Grant)
	pool.Shares = slices.DeleteFunc(pool.Shares, func(r string) bool { return r == share.Replica })
	pool.Buckets = append(pool.Buckets, share.Buckets...)
	pool.compact(pool.ceiling(e.policy), now)
	if e.counterIdle(&pool, now) && e.counterForgettable(&pool, now) {
		if err := t.Delete(thresholdKey(k)); err != nil {
			return err
		}
		return t.Delete(k)
	}
	return t.Set(k, pool.encode())
}

// counterIdle reports whether a counter counts nothing any more (and, a
// pool, has granted nothing).
func (e *Engine) counterIdle(c *counterRec, now time.Time) bool {
	return e.counterEmptySince(c, now, 0)
}

// counterForgettable reports whether a counter holds no spend within the
// retention, counted or past (and, a pool, has granted nothing).
func (e *Engine) counterForgettable(c *counterRec, now time.Time) bool {
	return e.counterEmptySince(c, now, e.defaults.Retention)
}

// counterEmptySince reports whether a counter holds nothing in its window
// ending at now less ago, and, a pool, has granted nothing.
func (e *Engine) counterEmptySince(c *counterRec, now time.Time, ago time.Duration) bool {
	w, err := parseWindow(c.Window)
	if err != nil || w == 0 {
		return false // a run window, or one no longer understood: keep it
	}
	if c.Grant != 0 && c.Replica == "" || len(c.Shares) > 0 {
		return false
	}
	for _, b := range c.Buckets {
		if live(b, w, now.Add(-ago)) && (b.Amount != 0 || b.Count != 0) {
			return false
		}
	}
	return true
}

// deleteKeys deletes keys through the writer, sweepBatch at a time (a key
// already gone is fine), for the sweeps that find what to delete in a scan.
func (e *Engine) deleteKeys(ctx context.Context, keys [][]byte) error {
	for len(keys) > 0 {
		part := keys[:min(len(keys), sweepBatch)]
		keys = keys[len(part):]
		if _, err := submit(ctx, e, func(t *opTxn, _ time.Time) (any, error) {
			for _, k := range part {
				if err := t.Delete(k); err != nil && !errors.Is(err, ErrNotFound) {
					return nil, err
				}
			}
			return nil, nil
		}); err != nil {
			return err
		}
	}
	return nil
}
