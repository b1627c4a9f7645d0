package ledger

import (
	"cmp"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"time"
)

// Ceiling counters.
//
// A counter is one ceiling in one scope (global, an agent, a run, or one
// dimension value's keyed hash) in one namespace. It holds the spend and the
// count granted in time buckets, each 1/60 of the window (at least a second),
// stamped with the time the attempt was granted. "Counted" is the sum of the
// buckets that overlap the window ending now. The oldest bucket can be only
// partly inside the window and is counted whole, so a window slides in steps
// of 1/60 of its length and Ratchet may refuse slightly early, never late:
// the true sliding sum is always ≤ counted ≤ limit. A "run" window has one
// bucket that never expires, per run id.
//
// Every check and reservation happens inside the single writer, in the same
// transaction as the decision, so no two begins can both take the last of a
// budget.
//
// Clock jumps. A bucket that leaves the window is not dropped: it is merged
// into a bin of past spend, one per window it began in, at most pastBins
// (the oldest two merged when there are more), and a bin counts whole like
// a bucket while any of it overlaps the window. So a clock that jumps ahead
// by a window or more, and is then corrected, finds every unit counted
// before the jump still counted (and what was begun on the wrong reading,
// stamped ahead, counted until real time passes it): a reading that later
// proves wrong may let spend go on that reading, never forget it. Merging
// never lowers what is counted at any reading; after a correction a bin may
// count some spend a little longer than the window (early refusal, never
// late). Retention forgets a counter's past spend only once it is older
// than the effects' retention (purgeCounters): a jump past that forgets
// effects as well.
//
// Shares (a shared store, several engines). A counter every begin of every
// replica wrote would make all their batches wait for one another (see
// pgstore). So on a shared store a ceiling is held in escrow: the counter
// at its key is the pool, and each replica counts its own begins in a
// share of its own (the counter's key and the replica's id) which holds a
// grant, the part of the limit the replica may count without asking the
// others. The pool records what it has granted in all (and to whom), and
// may hold buckets of its own, counted as before (a ledger written before
// shares). A begin that fits its replica's grant touches only its share.
// One that does not takes more from the pool: what it needs and a
// sixteenth of the limit (or what is left). When the pool has not enough,
// the replica reclaims: it shrinks every other share's grant to what that
// share counts now (the grants of replicas that are gone come back) and
// decides on the exact sum of every share and the pool's buckets, as a
// single writer would: counted + this begin ≤ limit. The pool's grants
// never exceed the limit less what the pool counts itself, and a share
// grants only within its grant, so the sum of all shares never passes the
// limit. As buckets leave the window a share counts less and its grant
// covers new begins again, without the pool. A report adjusts the share
// its reservation names, whichever replica took it.
//
// A share's grant is a promise only while what it counts stays within it.
// A settlement above the estimate (or of a begin that reserved nothing)
// makes it count more: cover then grows the share's grant and the pool's,
// and reclaims the others' unused grants if the pool is then over its
// limit, in the settlement's transaction, so that the next begin on any
// replica that cannot stay within its grant decides on the exact sum. While
// the pool has granted more than its limit leaves (such spend took the
// ceiling past it), no grant promises room: a share whose own spend left
// the window must not spend that grant again while the others' still
// counts, so every begin asks the pool (overGranted). A
// clock set back can make a share count more than its grant too (past
// spend back in the window): so when a begin asks the pool, it counts
// every other share at its grant or what it counts, whichever is more
// (othersHold), and a share whose newest bucket is ahead of the clock
// (its grant may have been taken on a reading that proved wrong) asks the
// pool even within its grant.
//
// Clock readings across a fleet. Time passing frees a share's grant
// without the pool: so a replica whose clock jumps ahead would spend its
// grant again on that reading unseen, and the others, their clocks right,
// would go on spending theirs past the ceiling. So the first begin of the
// fleet in each bucket asks the pool and marks it there (markSeen, an
// empty bucket in the pool); a begin within its grant in the bucket the
// pool saw last takes the fast path, and one whose reading is behind the
// pool's (another replica's clock is ahead, or was) asks the pool and is
// decided on every share's grant or count at its own reading, which counts
// what was stamped ahead. A fleet's ordinary skew of a few milliseconds
// sends a few begins per bucket that way; a replica whose clock runs ahead
// by a window keeps the others on the pool until real time passes its
// readings. A replica ahead itself still decides on its own reading:
// spend the others made within its lead looks older to it.

// What a begin's answer counts on a shared store is its replica's share,
// the pool's buckets and every other share's whole grant (the most the
// others can have counted): counted is an upper bound and remaining a
// lower bound. Budgets (the operator's listing) adds up every share.

const bucketsPerWindow = 60

// pastBins is how many bins of spend that has left the window a counter
// keeps (see "Clock jumps").
const pastBins = 4

// shareChunk is the part of a limit a share takes from the pool beyond
// what it needs: a replica asks the pool once per sixteenth of the limit
// it spends.
const shareChunk = 16

type counterRec struct {
	Namespace string   `json:"ns"`
	Ceiling   string   `json:"ceiling"`
	Per       string   `json:"per"`
	Scope     string   `json:"scope,omitempty"`
	RunID     string   `json:"run,omitempty"`
	Unit      string   `json:"unit"`
	Limit     int64    `json:"limit"`
	Window    string   `json:"window"`
	Buckets   []bucket `json:"buckets"`
	// Shares (see above). A share names its replica and holds its grant;
	// the pool holds what it granted in all and to which replicas.
	Replica string   `json:"replica,omitempty"`
	Grant   int64    `json:"grant,omitempty"`
	Shares  []string `json:"shares,omitempty"`
}

type bucket struct {
	Start  int64 `json:"s"` // unix nanos
	End    int64 `json:"e"` // unix nanos, exclusive
	Amount int64 `json:"a"`
	Count  int64 `json:"c"`
}

func (c *ceiling) unit() string {
	if c.money {
		return "micros"
	}
	return "count"
}

// bucketFor returns the bucket that an attempt granted at now falls in.
func (c *ceiling) bucketFor(now time.Time) (start, end int64) {
	if c.window == 0 {
		return 0, math.MaxInt64
	}
	w := max(int64(c.window/bucketsPerWindow), int64(time.Second))
	start = now.UnixNano() / w * w
	return start, start + w
}

// live reports whether b still overlaps a window of length window ending at
// now; run windows (zero) never expire.
func live(b bucket, window time.Duration, now time.Time) bool {
	return window == 0 || b.End > now.Add(-window).UnixNano()
}

// counted sums the live buckets.
func (r *counterRec) counted(c *ceiling, now time.Time) int64 {
	var sum int64
	for _, b := range r.Buckets {
		if live(b, c.window, now) {
			if c.money {
				sum = satAdd(sum, b.Amount)
			} else {
				sum = satAdd(sum, b.Count)
			}
		}
	}
	return sum
}

// add puts amount and count into the bucket starting at start (creating it),
// or into the bin of past spend that holds it (a clock set back), then
// compacts what has left the window (see "Clock jumps").
func (r *counterRec) add(c *ceiling, now time.Time, start, end, amount, count int64) {
	found := false
	for i := range r.Buckets {
		if b := &r.Buckets[i]; b.Start <= start && end <= b.End {
			b.Amount, b.Count, found = satAdd(b.Amount, amount), b.Count+count, true
			break
		}
	}
	if !found {
		r.Buckets = append(r.Buckets, bucket{Start: start, End: end, Amount: amount, Count: count})
	}
	r.compact(c, now)
}

// compact merges the buckets that have left the window ending now into
// bins of past spend, one per window they began in, at most pastBins (the
// oldest two merged into one when there are more), and drops those that
// hold nothing. A bin spans the buckets merged into it and, like a bucket,
// counts whole while any of it overlaps the window: merging never changes
// what is counted now, and counts more, never less, at any other reading.
func (r *counterRec) compact(c *ceiling, now time.Time) {
	if c.window == 0 {
		return
	}
	w, cut := int64(c.window), now.Add(-c.window).UnixNano()
	kept := r.Buckets[:0]
	var past []bucket
	for _, b := range r.Buckets {
		switch {
		case b.End > cut:
			kept = append(kept, b)
		case b.Amount == 0 && b.Count == 0:
		default:
			i := slices.IndexFunc(past, func(p bucket) bool { return floorDiv(p.Start, w) == floorDiv(b.Start, w) })
			if i < 0 {
				past = append(past, b)
			} else {
				past[i] = merge(past[i], b)
			}
		}
	}
	if len(past) > pastBins {
		slices.SortFunc(past, func(a, b bucket) int { return cmp.Compare(a.End, b.End) })
		for len(past) > pastBins {
			past = append([]bucket{merge(past[0], past[1])}, past[2:]...)
		}
	}
	r.Buckets = append(kept, past...)
}

// merge is one bucket holding both a and b.
func merge(a, b bucket) bucket {
	return bucket{Start: min(a.Start, b.Start), End: max(a.End, b.End), Amount: satAdd(a.Amount, b.Amount), Count: satAdd(a.Count, b.Count)}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// adjust changes the bucket starting at start, or the bin of past spend it
// was merged into, if it is still kept. Amounts never go below zero.
func (r *counterRec) adjust(start, amount, count int64) {
	i := slices.IndexFunc(r.Buckets, func(b bucket) bool { return b.Start == start })
	if i < 0 {
		i = slices.IndexFunc(r.Buckets, func(b bucket) bool { return b.Start <= start && start < b.End })
	}
	if i >= 0 {
		r.Buckets[i].Amount = max(0, satAdd(r.Buckets[i].Amount, amount))
		r.Buckets[i].Count = max(0, r.Buckets[i].Count+count)
	}
}

// behind reports whether now is before the newest bucket r counts in: the
// clock has been set back since, and what was decided on the later
// reading (a share's grant) may rest on a reading that proved wrong.
func (r *counterRec) behind(now time.Time) bool {
	for _, b := range r.Buckets {
		if b.Start > now.UnixNano() {
			return true
		}
	}
	return false
}

func satAdd(a, b int64) int64 {
	s := a + b
	if a > 0 && b > 0 && s < 0 {
		return math.MaxInt64
	}
	if a < 0 && b < 0 && s >= 0 {
		return math.MinInt64
	}
	return s
}

// ceilingUse is one ceiling as it applies to one begin.
type ceilingUse struct {
	c       *ceiling
	key     []byte      // the counter the begin counts in: its share, if shared
	rec     *counterRec // what is stored at key
	pool    *counterRec // nil unless shared: the counter's pool
	poolKey []byte
	counted int64 // what rec counts now, or, shared, the exact sum once admit denies
	amount  int64 // what this begin would add
	exact   bool  // shared: counted is the exact sum (admit denied)
}

func (u *ceilingUse) budget(now time.Time) BudgetUse {
	counted := u.rec.counted(u.c, now)
	if u.exact {
		counted = u.counted
	} else if u.pool != nil { // see "What a begin's answer counts"
		counted = satAdd(satAdd(counted, u.pool.counted(u.c, now)), max(0, u.pool.Grant-u.rec.Grant))
	}
	return BudgetUse{
		Name: u.c.Name, Per: u.c.Per, Unit: u.c.unit(), Limit: u.c.limit,
		Counted: counted, Remaining: max(0, u.c.limit-counted), Window: u.c.Window,
	}
}

// scopeOf returns the scope value of c for a begin, and false when the
// ceiling does not apply because the begin did not declare its dimension.
// Declaring can only tighten: a missing dimension removes no other limit,
// and require_dimensions is how an operator makes one mandatory. A missing
// agent or run id is the empty scope, shared by every begin that omits it.
func scopeOf(c *ceiling, in *beginInput) (string, bool) {
	switch {
	case c.dim != "":
		h, ok := in.dims[c.dim]
		return h, ok
	case c.Per == "agent":
		return in.req.AgentID, true
	case c.Per == "run":
		return in.req.RunID, true
	}
	return "", true
}

// counterKey returns the key of c's counter for a begin, its scope and run,
// and false when c does not apply (see scopeOf).
func counterKey(c *ceiling, in *beginInput) (k []byte, scope, run string, ok bool) {
	if scope, ok = scopeOf(c, in); !ok {
		return nil, "", "", false
	}
	if c.window == 0 {
		run = in.req.RunID
	}
	return key(kindCounter, in.req.Namespace, c.Name, scope, run), scope, run, true
}

// shareKey is the key of replica's share of the counter at k.
func shareKey(k []byte, replica string) []byte {
	return append(append(append([]byte(nil), k...), 0), replica...)
}

// poolKey is the key of the pool of c, stored at k: k itself unless c is
// a share (shareKey undone).
func (c *counterRec) poolKey(k []byte) []byte {
	if c.Replica == "" {
		return k
	}
	return k[:len(k)-len(c.Replica)-1]
}

// ceilingsFor loads every counter that applies to a begin: on a shared
// store, its replica's share and the pool.
func ceilingsFor(t *opTxn, in *beginInput, now time.Time) ([]*ceilingUse, error) {
	var uses []*ceilingUse
	for _, c := range in.pol.ceilings {
		k, scope, run, ok := counterKey(c, in)
		if !ok {
			continue
		}
		u := &ceilingUse{c: c, key: k}
		load := func(k []byte, replica string) (*counterRec, error) {
			r := &counterRec{}
			if b, err := t.Get(k); err == nil {
				if err := decodeCounterLabelled(b, r, false); err != nil {
					return nil, err
				}
			} else if !errors.Is(err, ErrNotFound) {
				return nil, err
			}
			r.Namespace, r.Ceiling, r.Per, r.Scope, r.RunID = in.req.Namespace, c.Name, c.Per, scope, run
			r.Unit, r.Limit, r.Window, r.Replica = c.unit(), c.limit, c.Window, replica
			return r, nil
		}
		var err error
		if in.replica != "" {
			u.poolKey, u.key = k, shareKey(k, in.replica)
			if u.pool, err = load(u.poolKey, ""); err != nil {
				return nil, err
			}
		}
		if u.rec, err = load(u.key, in.replica); err != nil {
			return nil, err
		}
		u.counted = u.rec.counted(c, now)
		u.amount = 1
		if c.money {
			u.amount = 0
			if in.req.EstimatedCostMicros != nil {
				u.amount = *in.req.EstimatedCostMicros
			}
		}
		if uses == nil { // room for every ceiling: append grew it at each
			uses = make([]*ceilingUse, 0, len(in.pol.ceilings))
		}
		uses = append(uses, u)
	}
	return uses, nil
}

// admit reports whether the begin fits the ceiling. On a shared store it
// may take more of the limit for its replica's share from the pool, or
// reclaim the other shares' unused grants first (see "Shares"); what it
// changes is written with the begin's other writes. When it does not fit,
// u.counted is what the ceiling counts in all.
func (u *ceilingUse) admit(t *opTxn, now time.Time) (bool, error) {
	if u.pool == nil {
		return satAdd(u.counted, u.amount) <= u.c.limit, nil
	}
	need := satAdd(u.counted, u.amount) - u.rec.Grant
	start, end := u.c.bucketFor(now)
	seen := u.c.window == 0 || u.pool.newest() == start
	if need <= 0 && seen && !u.rec.behind(now) && !u.pool.overGranted(u.c, now) {
		return true, nil
	}
	if !seen && start > u.pool.newest() {
		u.pool.markSeen(start, end)
	}
	held, err := u.othersHold(t, now)
	if err != nil {
		return false, err
	}
	free := u.c.limit - satAdd(satAdd(u.pool.counted(u.c, now), held), u.rec.Grant)
	if free < need {
		total, err := u.reclaim(t, now)
		if err != nil {
			return false, err
		}
		if free = u.c.limit - satAdd(u.pool.counted(u.c, now), u.pool.Grant); free < need {
			u.counted, u.exact = total, true
			return false, nil
		}
	} else {
		u.pool.Grant = satAdd(held, u.rec.Grant)
	}
	if need <= 0 {
		return true, t.Set(u.poolKey, u.pool.encode())
	}
	take := min(free, satAdd(need, u.c.limit/shareChunk))
	u.rec.Grant += take
	u.pool.Grant += take
	if !slices.Contains(u.pool.Shares, u.rec.Replica) {
		u.pool.Shares = append(u.pool.Shares, u.rec.Replica)
	}
	if err := t.Set(u.poolKey, u.pool.encode()); err != nil {
		return false, err
	}
	return true, t.Set(u.key, u.rec.encode())
}

// newest is the start of the newest bucket the pool holds: on a shared
// store the empty one markSeen keeps at the newest reading any replica
// asked the pool at (math.MinInt64 if none).
func (r *counterRec) newest() int64 {
	n := int64(math.MinInt64)
	for _, b := range r.Buckets {
		n = max(n, b.Start)
	}
	return n
}

// markSeen records in the pool that a replica decided in the bucket
// [start, end), newer than any the pool saw: one empty bucket, replacing
// the previous mark (see "Clock readings across a fleet"). An empty bucket
// counts nothing and is dropped once it leaves the window, as any other.
func (r *counterRec) markSeen(start, end int64) {
	r.Buckets = slices.DeleteFunc(r.Buckets, func(b bucket) bool { return b.Amount == 0 && b.Count == 0 })
	r.Buckets = append(r.Buckets, bucket{Start: start, End: end})
}

// overGranted reports whether the pool p has granted more than its limit
// leaves beside what it counts itself: a settlement above an estimate, or
// an operator's record of spend, took the ceiling past its limit (cover,
// admitSpent). A share's grant then no longer promises room: its own
// spend leaving the window frees nothing while the others' still counts,
// so every begin asks the pool and is decided on the exact sum.
func (p *counterRec) overGranted(c *ceiling, now time.Time) bool {
	return satAdd(p.counted(c, now), p.Grant) > c.limit
}

// othersHold returns the most the pool's other shares can count: each
// share's grant, or what it counts if that is more (its clock was set back
// after its grant shrank, see "Clock jumps", or a settlement not yet
// covered).
func (u *ceilingUse) othersHold(t *opTxn, now time.Time) (int64, error) {
	var held int64
	for _, r := range u.pool.Shares {
		if r == u.rec.Replica {
			continue
		}
		var sh counterRec
		if err := getCounter(t, shareKey(u.poolKey, r), &sh); errors.Is(err, ErrNotFound) {
			continue
		} else if err != nil {
			return 0, err
		}
		held = satAdd(held, max(sh.Grant, sh.counted(u.c, now)))
	}
	return held, nil
}

// admitSpent makes room in the ceiling for money already spent (an
// operator recording that an action happened): like admit, but past the
// limit if need be. On a shared store the share's grant grows by what it
// needs, whatever the pool has free, so that every share still counts no
// more than its grant and the pool's grants cover every share: the pool
// is then over its limit and every replica refuses until the window frees
// it. On an exclusive store the counter simply counts past the limit.
func (u *ceilingUse) admitSpent(t *opTxn, now time.Time) error {
	if ok, err := u.admit(t, now); err != nil || ok || u.pool == nil {
		return err
	}
	// What this share itself counts (a refused admit left u.counted the
	// sum over every share).
	need := satAdd(u.rec.counted(u.c, now), u.amount) - u.rec.Grant
	if need <= 0 {
		return nil
	}
	u.rec.Grant += need
	u.pool.Grant += need
	if !slices.Contains(u.pool.Shares, u.rec.Replica) {
		u.pool.Shares = append(u.pool.Shares, u.rec.Replica)
	}
	if err := t.Set(u.poolKey, u.pool.encode()); err != nil {
		return err
	}
	return t.Set(u.key, u.rec.encode())
}

// reclaim shrinks the grant of every other share of the pool to what it
// counts now, forgets shares that are gone, and returns what the ceiling
// counts in all: the pool's buckets and every share.
func (u *ceilingUse) reclaim(t *opTxn, now time.Time) (int64, error) {
	total := satAdd(u.pool.counted(u.c, now), u.counted)
	granted := u.rec.Grant
	var kept []string
	for _, r := range u.pool.Shares {
		if r == u.rec.Replica {
			kept = append(kept, r)
			continue
		}
		k := shareKey(u.poolKey, r)
		var sh counterRec
		if err := getCounter(t, k, &sh); errors.Is(err, ErrNotFound) {
			continue
		} else if err != nil {
			return 0, err
		}
		kept = append(kept, r)
		counted := sh.counted(u.c, now)
		total = satAdd(total, counted)
		if sh.Grant != counted {
			sh.Grant = counted
			if err := t.Set(k, sh.encode()); err != nil {
				return 0, err
			}
		}
		granted = satAdd(granted, sh.Grant)
	}
	u.pool.Shares, u.pool.Grant = kept, granted
	return total, t.Set(u.poolKey, u.pool.encode())
}

// reserve counts the begin in every counter and records what it holds.
func reserve(t *opTxn, uses []*ceilingUse, now time.Time) ([]reservation, error) {
	var res []reservation
	for _, u := range uses {
		start, end := u.c.bucketFor(now)
		r := reservation{Counter: string(u.key), Bucket: start, Count: 1}
		if u.c.money {
			r.Amount = u.amount
		}
		u.rec.add(u.c, now, start, end, r.Amount, r.Count)
		if err := t.Set(u.key, u.rec.encode()); err != nil {
			return nil, err
		}
		if res == nil { // room for every counter: append grew it at each
			res = make([]reservation, 0, len(uses))
		}
		res = append(res, r)
	}
	return res, nil
}

// money reports whether the counter counts micro-USD (else a count).
func (r *counterRec) money() bool { return r.Unit == "micros" }

// chargeActual replaces what each money reservation holds with actual
// (report succeeded with actual_cost_micros, or a vendor's record); count
// reservations are unchanged. (Settle is the vendor's record of an effect:
// settle.go.)
func chargeActual(t *opTxn, p *policy, rec *effectRec, actual int64, now time.Time) error {
	return adjustReservations(t, p, rec, now, func(r *reservation, c *counterRec) (int64, int64) {
		if !c.money() {
			return 0, 0
		}
		d := actual - r.Amount
		r.Amount = actual
		return d, 0
	})
}

// release gives back everything the effect holds (failed, resolved failed).
func release(t *opTxn, p *policy, rec *effectRec, now time.Time) error {
	err := adjustReservations(t, p, rec, now, func(r *reservation, _ *counterRec) (int64, int64) {
		return -r.Amount, -r.Count
	})
	rec.Reservations = nil
	return err
}

func adjustReservations(t *opTxn, p *policy, rec *effectRec, now time.Time, f func(*reservation, *counterRec) (int64, int64)) error {
	for i := range rec.Reservations {
		r := &rec.Reservations[i]
		k := []byte(r.Counter)
		var c counterRec
		if err := getCounter(t, k, &c); err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return err
		}
		da, dc := f(r, &c)
		if da == 0 && dc == 0 {
			continue
		}
		c.adjust(r.Bucket, da, dc)
		if da > 0 || dc > 0 {
			if err := cover(t, p, k, &c, now); err != nil {
				return err
			}
		}
		if err := t.Set(k, c.encode()); err != nil {
			return err
		}
	}
	return nil
}

// cover keeps the promise of "Shares" once a settlement made the counter c,
// stored at k, count more than it did when its units were granted (an
// effect that cost more than its estimate, or that reserved nothing and was
// settled by the vendor's record): every unit counted anywhere must be
// covered by the pool's grants, or the other replicas would go on granting
// within grants the limit no longer has room for. A share's grant grows to
// what it counts, and the pool's with it; when the pool then grants more
// than its limit leaves, every other share gives back what it does not
// count (reclaim), so that each replica's next begin asks the pool and is
// decided on the exact sum, as one engine decides. An exclusive store's
// counter is exact already. The caller writes c.
func cover(t *opTxn, p *policy, k []byte, c *counterRec, now time.Time) error {
	if c.Replica == "" && c.Grant == 0 && len(c.Shares) == 0 {
		return nil // an exclusive store's counter (or a pool that granted nothing)
	}
	cc := c.ceiling(p)
	u := &ceilingUse{c: cc, key: k, rec: c, pool: c, poolKey: k}
	if c.Replica == "" {
		// A pool counting buckets of its own (a ledger written before
		// shares): no share of its own takes part in reclaim.
		u.rec = &counterRec{}
	} else {
		counted := c.counted(cc, now)
		if counted <= c.Grant {
			return nil
		}
		u.poolKey, u.pool, u.counted = c.poolKey(k), &counterRec{}, counted
		if err := getCounter(t, u.poolKey, u.pool); errors.Is(err, ErrNotFound) {
			// A share whose begins reserved nothing never asked a pool.
			*u.pool = counterRec{Namespace: c.Namespace, Ceiling: c.Ceiling, Per: c.Per, Scope: c.Scope, RunID: c.RunID,
				Unit: c.Unit, Limit: c.Limit, Window: c.Window}
		} else if err != nil {
			return err
		}
		u.pool.Grant = satAdd(u.pool.Grant, counted-c.Grant)
		c.Grant = counted
		if !slices.Contains(u.pool.Shares, c.Replica) {
			u.pool.Shares = append(u.pool.Shares, c.Replica)
		}
	}
	if satAdd(u.pool.counted(cc, now), u.pool.Grant) <= cc.limit {
		return t.Set(u.poolKey, u.pool.encode())
	}
	_, err := u.reclaim(t, now)
	return err
}

// ceiling returns the policy's ceiling the counter counts for, or, one no
// longer in the policy, the ceiling as the counter recorded it.
func (r *counterRec) ceiling(p *policy) *ceiling {
	if c, ok := p.ceiling(r.Ceiling); ok {
		return c
	}
	w, _ := parseWindow(r.Window)
	return &ceiling{Ceiling: Ceiling{Name: r.Ceiling, Per: r.Per, Window: r.Window}, window: w, limit: r.Limit, money: r.money()}
}

// Counters are the hottest records (every begin reads and writes each
// applicable one), so they use a compact binary encoding rather than JSON:
// a version byte, the strings as length-prefixed bytes, then varints.
// Version 2 adds, after the buckets, the replica, the grant and the shares
// (see "Shares"); a counter without them is written as version 1.
const (
	counterVersion       = 1
	counterVersionShares = 2
)

func (r *counterRec) encode() []byte {
	b := make([]byte, 0, 64+len(r.Buckets)*20)
	shared := r.Replica != "" || r.Grant != 0 || len(r.Shares) > 0
	if shared {
		b = append(b, counterVersionShares)
	} else {
		b = append(b, counterVersion)
	}
	for _, s := range []string{r.Namespace, r.Ceiling, r.Per, r.Scope, r.RunID, r.Unit, r.Window} {
		b = appendString(b, s)
	}
	b = binary.AppendVarint(b, r.Limit)
	b = binary.AppendUvarint(b, uint64(len(r.Buckets)))
	for _, k := range r.Buckets {
		b = binary.AppendVarint(b, k.Start)
		b = binary.AppendVarint(b, k.End)
		b = binary.AppendVarint(b, k.Amount)
		b = binary.AppendVarint(b, k.Count)
	}
	if shared {
		b = appendString(b, r.Replica)
		b = binary.AppendVarint(b, r.Grant)
		b = binary.AppendUvarint(b, uint64(len(r.Shares)))
		for _, s := range r.Shares {
			b = appendString(b, s)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errBadCounter = errors.New("ledger: corrupt ceiling counter record")

func decodeCounter(b []byte, r *counterRec) error {
	return decodeCounterLabelled(b, r, true)
}

// decodeCounterLabelled is decodeCounter, which leaves the labels (the
// namespace, ceiling, per, scope, run, unit, window and replica) as they
// are in r unless labels: a begin sets them from its ceiling (ceilingsFor),
// so copying them out of the record would be 7 allocations a counter
// wasted.
func decodeCounterLabelled(b []byte, r *counterRec, labels bool) error {
	if len(b) == 0 || (b[0] != counterVersion && b[0] != counterVersionShares) {
		return errBadCounter
	}
	shared := b[0] == counterVersionShares
	b = b[1:]
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	label := func(p *string) bool {
		if labels {
			s, ok := str()
			*p = s
			return ok
		}
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return false
		}
		b = b[k+int(n):]
		return true
	}
	num := func() (int64, bool) {
		v, k := binary.Varint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	for _, p := range []*string{&r.Namespace, &r.Ceiling, &r.Per, &r.Scope, &r.RunID, &r.Unit, &r.Window} {
		if !label(p) {
			return errBadCounter
		}
	}
	var ok bool
	if r.Limit, ok = num(); !ok {
		return errBadCounter
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return errBadCounter
	}
	b = b[k:]
	r.Buckets = make([]bucket, n)
	for i := range r.Buckets {
		for _, p := range []*int64{&r.Buckets[i].Start, &r.Buckets[i].End, &r.Buckets[i].Amount, &r.Buckets[i].Count} {
			if *p, ok = num(); !ok {
				return errBadCounter
			}
		}
	}
	if labels {
		r.Replica = ""
	}
	r.Grant, r.Shares = 0, nil
	if !shared {
		return nil
	}
	if !label(&r.Replica) {
		return errBadCounter
	}
	if r.Grant, ok = num(); !ok {
		return errBadCounter
	}
	n, k = binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return errBadCounter
	}
	b = b[k:]
	r.Shares = make([]string, n)
	for i := range r.Shares {
		if r.Shares[i], ok = str(); !ok {
			return errBadCounter
		}
	}
	return nil
}

func getCounter(r Reader, k []byte, c *counterRec) error {
	b, err := r.Get(k)
	if err != nil {
		return err
	}
	return decodeCounter(b, c)
}
