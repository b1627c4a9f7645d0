package ledger

import "slices"

// recCache holds decoded effect records for the writer, so a report does
// not decode the record its begin has just written. It is touched only by
// the writer goroutine, only when the store says the engine is its sole
// writer (see Exclusive), and it mirrors the store exactly: an op's records
// enter it only once the op has succeeded, and a failed commit empties it.
// Two generations make it roughly least-recently-used with O(1) upkeep.
type recCache struct {
	cur, prev map[string]*effectRec
	max       int
}

func newRecCache(max int) *recCache {
	return &recCache{cur: map[string]*effectRec{}, prev: map[string]*effectRec{}, max: max}
}

// get returns a copy the caller may change, or nil.
func (c *recCache) get(id string) *effectRec {
	r, ok := c.cur[id]
	if !ok {
		if r, ok = c.prev[id]; !ok {
			return nil
		}
		c.put(id, r)
	}
	return r.clone()
}

// put stores r (nil removes the entry); r must not be changed afterwards.
func (c *recCache) put(id string, r *effectRec) {
	if c == nil {
		return
	}
	if r == nil {
		delete(c.cur, id)
		delete(c.prev, id)
		return
	}
	if len(c.cur) >= c.max/2 {
		c.prev, c.cur = c.cur, make(map[string]*effectRec, c.max/2)
	}
	c.cur[id] = r
}

func (c *recCache) clear() {
	c.cur, c.prev = map[string]*effectRec{}, map[string]*effectRec{}
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
