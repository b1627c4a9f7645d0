package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Deferred lease entries (exclusive store only).
//
// The reaper finds pending effects through their lease entries
// (kindLease). Written at every begin and deleted at every report, the
// entry was two of the keys a pair writes, and its tombstones were what the
// reaper's sweep decompressed blocks to skip. On a store only this engine
// writes, a begin that mints a new effect does not write it: the writer
// keeps the effect in memory (its lease end, by effect id), and a report of
// such an effect deletes nothing. Which effects are deferred is the
// writer's alone, so nothing is lost while the process runs; what a crash
// loses is recovered from the ledger by the rule below.
//
// The rule: every pending effect whose id sorts before the lease mark
// (leaseMarkKey) has its entry. A checkpoint (checkpointLeases), an op
// through the writer, writes the entry of every deferred effect still
// pending and then the mark, a fresh id: every effect minted before it
// either has its entry, is no longer pending, or was never deferred (and
// then has its entry). Opening the ledger (recoverLeases) walks the effect
// records from the mark (ids sort by the time they were made, and effect
// records by id), writes the entry of every pending one that lacks it,
// seeds the id generator past the last id it saw (a clock stepped back
// across a restart must not mint ids before the mark) and writes a new
// mark. The reaper runs a checkpoint at most leaseMarkEvery after an
// effect is deferred (the writer wakes it through dueAt, for the earlier
// of that and the lease's end), so the mark trails the newest effects by
// about a second and an open walks about a second of effects; Close runs
// one too, so a clean restart walks none. A stray entry (written for an
// effect reported in the same batch, say) is harmless: the sweep drops an
// entry whose effect no longer owns it.
//
// A failed commit changes nothing: what a batch defers or undefers is
// kept aside (leaseDeferral.batch) and joins the set only once the batch
// is durable, as the batch's other writes do. A deferred record a
// checkpoint cannot read stays in the set and the op writes no mark (the
// others get their entries); reap goes on to its sweep all the same.
//
// Rolling back: a Ratchet without lease marks reaps only through entries.
// A clean Close leaves every pending effect with its entry; a crash does
// not (the last second's deferred leases), so after a crash this version
// (or a later one) must open the ledger and close it before an older one
// opens it: the open indexes what the crash left, and says so in its log.
//
// Not deferred, and why: a new attempt of an existing effect (its id sorts
// before the mark, so no walk from the mark would find it), a begin while
// maxDeferred effects are deferred (memory, and a checkpoint's size), and
// every begin on a shared store (PostgreSQL): the set would be one
// replica's, and a replica that stops would leave its deferred leases
// unreaped by the others, which find pending effects only through entries.
const (
	leaseMarkEvery = time.Second
	maxDeferred    = 4096
	// recoverBatch is how many entries one op of recoverLeases writes.
	recoverBatch = 4096
	// staleMarkSpan: a lease mark further than this behind the newest
	// effect at open was not left by a kill alone (logRecovery).
	staleMarkSpan = time.Minute
)

// leaseMarkKey holds the lease mark: an id made by the engine's generator
// (see above).
var leaseMarkKey = key(kindMeta, "lease-mark")

// leaseDeferral is the writer's set of effects minted without a lease
// entry. Writer only.
type leaseDeferral struct {
	set map[string]time.Time // durable batches': effect id -> lease end
	// batch is what the batch being decided changed: a lease end, or the
	// zero time for an effect no longer deferred. It joins set once the
	// batch is durable (settle) and is dropped when it is not (discard).
	batch map[string]time.Time
}

func newLeaseDeferral() *leaseDeferral {
	return &leaseDeferral{set: map[string]time.Time{}, batch: map[string]time.Time{}}
}

// settle applies a durable batch's changes.
func (d *leaseDeferral) settle() {
	for id, at := range d.batch {
		if at.IsZero() {
			delete(d.set, id)
		} else {
			d.set[id] = at
		}
	}
	clear(d.batch)
}

// discard drops the changes of a batch that was not written.
func (d *leaseDeferral) discard() { clear(d.batch) }

// leaseChange is one op's change to the deferred set (a zero at: dropped).
type leaseChange struct {
	id string
	at time.Time
}

// deferredLease returns the lease end of a deferred effect, as this op and
// the batch so far left it.
func (t *opTxn) deferredLease(id string) (time.Time, bool) {
	if t.lease == nil {
		return time.Time{}, false
	}
	for i := len(t.leases) - 1; i >= 0; i-- {
		if t.leases[i].id == id {
			return t.leases[i].at, !t.leases[i].at.IsZero()
		}
	}
	if at, ok := t.lease.batch[id]; ok {
		return at, !at.IsZero()
	}
	at, ok := t.lease.set[id]
	return at, ok
}

// canDefer says whether a lease handed out by this op may go without its
// entry.
func (t *opTxn) canDefer() bool {
	return t.lease != nil && !t.dry && len(t.lease.set)+len(t.lease.batch)+len(t.leases) < maxDeferred
}

// indexLease records that rec holds a lease until at: its entry, or, for
// an effect this op minted on an exclusive store, a deferral.
func (e *Engine) indexLease(t *opTxn, rec *effectRec, at time.Time, minted bool, now time.Time) error {
	if minted && t.canDefer() {
		t.leases = append(t.leases, leaseChange{rec.EffectID, at})
		if !e.leaseStale.Load() {
			e.leaseStale.Store(true)
		}
		due := now.Add(leaseMarkEvery)
		if at.Before(due) {
			due = at
		}
		e.dueAt(due)
		return nil
	}
	if err := t.Set(timeKey(kindLease, at, rec.EffectID), nil); err != nil {
		return err
	}
	e.dueAt(at)
	return nil
}

// dropLease removes rec's lease entry as it leaves pending, or its
// deferral (which deletes nothing).
func (e *Engine) dropLease(t *opTxn, rec *effectRec) error {
	at := *rec.LeaseExpiresAt
	if d, ok := t.deferredLease(rec.EffectID); ok && d.Equal(at) {
		t.leases = append(t.leases, leaseChange{id: rec.EffectID})
		return nil
	}
	return t.Delete(timeKey(kindLease, at, rec.EffectID))
}

// checkpointLeases writes the entry of every deferred effect still
// pending, then a new lease mark (see above). Writer only.
//
// A record it cannot read (a damaged block, an I/O error) keeps its effect
// in the set, and the op then writes no mark, since that effect may be
// pending without its entry; the entries of the others are written all the
// same, so one bad record holds back neither their entries nor the sweep
// (reap goes on after a checkpoint error). unread says why no mark was
// written; the stale flag stays set, so the next reap tries again, and the
// reaper is woken at the unread lease's end if that is still to come
// (after it, at its interval: a record that stays unreadable must not make
// it spin). err is an error that abandons the op (a write the transaction
// refused).
func (e *Engine) checkpointLeases(t *opTxn, now time.Time) (unread, err error) {
	if t.lease == nil {
		return nil, nil
	}
	// The set as this op sees it: the durable batches', then this
	// batch's changes, then this op's.
	view := make(map[string]time.Time, len(t.lease.set)+len(t.lease.batch))
	for _, m := range []map[string]time.Time{t.lease.set, t.lease.batch} {
		for id, at := range m {
			view[id] = at
		}
	}
	for _, c := range t.leases {
		view[c.id] = c.at
	}
	failed := 0
	for id, at := range view {
		if at.IsZero() {
			t.leases = append(t.leases, leaseChange{id: id}) // no longer pending
			continue
		}
		rec, err := e.effectByID(t, "", id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			if failed++; unread == nil {
				unread = fmt.Errorf("reading deferred effect %s: %w", id, err)
			}
			if at.After(now) { // try again by the lease's end; once past, at the reaper's interval (no spin)
				e.dueAt(at)
			}
			continue // kept in the set
		}
		t.leases = append(t.leases, leaseChange{id: id}) // indexed now, or no longer pending
		if err == nil && rec.State == StatePending && rec.LeaseExpiresAt != nil && rec.LeaseExpiresAt.Equal(at) {
			if err := t.Set(timeKey(kindLease, at, id), nil); err != nil {
				return nil, err
			}
			e.dueAt(at)
		}
	}
	if unread != nil {
		return fmt.Errorf("%d of %d deferred leases left without their entries, no lease mark written: %w", failed, len(view), unread), nil
	}
	if err := e.writeLeaseMark(t, now); err != nil {
		return nil, err
	}
	e.leaseStale.Store(false) // set again by a later deferral, or by fail
	return nil, nil
}

// writeLeaseMark writes a new lease mark: a fresh id, after every effect
// minted so far.
func (e *Engine) writeLeaseMark(t *opTxn, now time.Time) error {
	return t.Set(leaseMarkKey, []byte(e.ids.next("eff_", now)))
}

// checkpoint runs checkpointLeases through the writer when an effect was
// deferred since the last one. Its error is the op's, or what kept the
// checkpoint from writing its mark (unread records), whose readable
// entries are written all the same.
func (e *Engine) checkpoint(ctx context.Context) error {
	if e.deferral == nil || !e.leaseStale.Load() {
		return nil
	}
	unread, err := submit(ctx, e, func(t *opTxn, now time.Time) (error, error) {
		return e.checkpointLeases(t, now)
	})
	if err == nil {
		err = unread
	}
	return err
}

// recoverLeases, at open on an exclusive store, writes the entry of every
// pending effect from the lease mark on that lacks one (those a crash left
// deferred), seeds the id generator past every id it saw, and writes a new
// mark. It reads in a View, and writes only when there is something to
// write: a clean reopen (Close checkpointed) writes nothing. A ledger
// without a mark (new, or written before marks) has every entry: it only
// gets its first mark.
func (e *Engine) recoverLeases(ctx context.Context) error {
	var mark []byte
	var last string
	var missing [][]byte
	walked, started := 0, time.Now()
	err := e.view(ctx, func(r Reader) error {
		v, err := r.Get(leaseMarkKey)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		mark = v
		return r.Scan(prefix(kindEffect), key(kindEffect, string(mark)), func(k, v []byte) (bool, error) {
			last = lastPart(k)
			walked++
			var rec effectRec
			if err := decodeEffect(v, &rec); err != nil {
				return false, err
			}
			if rec.State != StatePending || rec.LeaseExpiresAt == nil {
				return true, nil
			}
			lk := timeKey(kindLease, *rec.LeaseExpiresAt, rec.EffectID)
			if _, err := r.Get(lk); errors.Is(err, ErrNotFound) {
				missing = append(missing, lk)
			} else if err != nil {
				return false, err
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	e.ids.seed(string(mark))
	e.ids.seed(last)
	if mark != nil && last == "" {
		return nil // nothing made since the mark
	}
	e.logRecovery(string(mark), last, walked, len(missing), time.Since(started))
	for {
		part := missing[:min(len(missing), recoverBatch)]
		missing = missing[len(part):]
		if _, err := submit(ctx, e, func(t *opTxn, now time.Time) (any, error) {
			for _, k := range part {
				if err := t.Set(k, nil); err != nil {
					return nil, err
				}
			}
			if len(missing) > 0 {
				return nil, nil
			}
			return nil, e.writeLeaseMark(t, now)
		}); err != nil || len(missing) == 0 {
			return err
		}
	}
}

// logRecovery says what an open's walk from the lease mark read, and why
// (see the package doc's rule): after a kill the mark trails the newest
// effects by about leaseMarkEvery; much more means checkpoints failed, or
// a Ratchet without lease marks ran the ledger since (it writes every
// entry and moves no mark), and the walk, which New waits for, reads all
// it made. A walk that found entries missing states the rollback rule,
// since a version without marks would never have reaped those leases.
func (e *Engine) logRecovery(mark, last string, walked, missing int, took time.Duration) {
	if walked == 0 {
		return
	}
	args := []any{"effects", walked, "took", took.Round(time.Millisecond)}
	if from, ok := idTime(mark); ok {
		if to, ok := idTime(last); ok {
			args = append(args, "since_mark", to.Sub(from).Round(time.Millisecond))
			if to.Sub(from) > staleMarkSpan {
				args = append(args, "why", "the lease mark is far behind the newest effect: "+
					"checkpoints failed, or a Ratchet without lease marks ran this ledger since")
			}
		}
	}
	if missing == 0 {
		e.log.Info("walked the effects made after the lease mark; none lacked its lease entry", args...)
		return
	}
	args = append(args, "indexed", missing, "rule",
		"after a crash, start this version (or a later one) on the ledger and stop it cleanly "+
			"before a Ratchet without lease marks opens it: that one reaps only through lease entries, "+
			"and a crash leaves the last second's leases without theirs")
	e.log.Info("walked the effects made after the lease mark and indexed the leases a crash left without their entries", args...)
}

// finalCheckpoint runs a checkpoint as the writer stops (Close), so that
// the next open has no effects to walk.
func (e *Engine) finalCheckpoint() {
	if e.deferral == nil || !e.leaseStale.Load() || e.syncErr.Load() != nil {
		return
	}
	o := &op{done: make(chan opResult, 1), fn: func(t *opTxn, now time.Time) (any, error) {
		return e.checkpointLeases(t, now)
	}}
	for batch := []*op{o}; len(batch) > 0; {
		batch = e.commit(batch)
	}
	r := <-o.done
	if unread, _ := r.val.(error); r.err == nil && unread != nil {
		r.err = unread
	}
	if r.err != nil {
		e.log.Warn("writing the deferred leases' entries at close", "err", r.err)
	}
}
