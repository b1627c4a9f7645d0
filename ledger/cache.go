package ledger

import "slices"

// genCache is a writer-side cache of what the store holds. It is touched
// only by the writer goroutine, only when the store says the engine is its
// sole writer (see Exclusive), and it mirrors the store exactly: what an op
// writes enters it only once the op has succeeded, and a failed commit
// empties it. Two generations make it roughly least-recently-used with
// O(1) upkeep.
type genCache[V any] struct {
	cur, prev map[string]V
	max       int
}

func newGenCache[V any](max int) *genCache[V] {
	return &genCache[V]{cur: map[string]V{}, prev: map[string]V{}, max: max}
}

func (c *genCache[V]) get(k string) (V, bool) {
	v, ok := c.cur[k]
	if !ok {
		if v, ok = c.prev[k]; ok {
			c.put(k, v)
		}
	}
	return v, ok
}

// getBytes is get by a key's bytes: m[string(k)] does not copy k, where
// get(string(k)) made a string of it on every lookup (the writer looks up
// a begin's counters, halts and keys by their bytes).
func (c *genCache[V]) getBytes(k []byte) (V, bool) {
	if v, ok := c.cur[string(k)]; ok {
		return v, true
	}
	v, ok := c.prev[string(k)]
	if ok {
		c.put(string(k), v)
	}
	return v, ok
}

// put stores v, which must not be changed afterwards.
func (c *genCache[V]) put(k string, v V) {
	if len(c.cur) >= c.max/2 {
		c.prev, c.cur = c.cur, make(map[string]V, c.max/2)
	}
	c.cur[k] = v
}

func (c *genCache[V]) remove(k string) {
	delete(c.cur, k)
	delete(c.prev, k)
}

func (c *genCache[V]) clear() {
	c.cur, c.prev = map[string]V{}, map[string]V{}
}

// writerCaches are the writer's two caches: decoded effect records, so a
// report does not decode the record its begin has just written, and the
// raw values of the small keys every begin reads (ceiling counters, an
// agent's unreported expirations, idempotency keys, groups), including
// that a key is absent (a nil value), so the hot ones are not looked up in
// the store's trees on every begin.
type writerCaches struct {
	recs *genCache[*effectRec]
	vals *genCache[[]byte]
	// counts and head are the state counts and the audit chain's head as
	// the writer last wrote them (nil until first read from the store).
	// The writer writes both at the end of every batch and nothing else
	// writes them, so a batch need not read and decode them again.
	counts map[State]int64
	head   *auditHead
}

// valueCached says which keys the value cache holds: not effect records
// (the record cache has them decoded) and not the meta keys the writer
// writes around the ops (state counts); the halts, which every begin reads.
func valueCached(k []byte) bool {
	return len(k) > 0 && (k[0] == 'c' || k[0] == 'u' || k[0] == 'k' || k[0] == 'g') || string(k) == string(haltsKey)
}

func (w *writerCaches) clear() {
	w.recs.clear()
	w.vals.clear()
	w.counts, w.head = nil, nil
}

// clone copies what ops change in place (reservations, the approval); the
// rest is only ever replaced, never mutated, so it can be shared.
func (r *effectRec) clone() *effectRec {
	c := *r
	c.Reservations = append([]reservation(nil), r.Reservations...)
	c.PriorApprovals = slices.Clip(r.PriorApprovals) // an append copies
	if r.Approval != nil {
		a := *r.Approval
		c.Approval = &a
	}
	return &c
}
