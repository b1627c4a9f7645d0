package ledger

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// An agent's unreported expiries (the effects whose leases ran out without
// a report while it held them, until an operator clears them) are kept as
// two kinds of key, so that an expiry, a clear and a begin each cost the
// same however many the agent has:
//
//   - u\0<ns>\0<agent>: the agent's summary (agentRec, JSON): how many, and
//     the oldest (effect id and when its lease ran out). A begin reads only
//     this key (max_unreported, the integration warning), which it
//     prefetches, and every write of the set rewrites it, so on a shared
//     store its key lock orders the writes of one agent's set as it does a
//     counter's.
//   - y\0<ns>\0<agent>\0<since, 16 hex digits>\0<effect_id>: one key (empty
//     value) for each of them, ordered by (since, effect id), the order in
//     which the oldest is chosen: when the oldest is cleared, the next is
//     the first key after it.
//
// An expiry writes its index key and the summary; a clear deletes its
// index key and rewrites (or, at zero, deletes) the summary, and only when
// it clears the oldest does it scan for the next one: one key read from
// where the cleared one was. On a shared store that scan takes the ledger
// key exclusively, so the batch holding it runs alone across the fleet.
// Clears come from an operator's resolve and from the expiry of a new
// attempt of an effect still counted (reported late, begun again, left
// unreported again), which an agent can repeat: a known cost (review
// revunrep 02); letting the summary's key lock cover the scan of its own
// agent's index would remove it, and needs the store to know that rule.
//
// Ledgers written before 2026-12-04 hold the whole set in the summary, as
// a JSON map of effect id to time ({"unreported":{…}}), with no index keys.
// It is read as it is (the same count and oldest), and the first write of
// the agent's set converts it: the index keys of every effect in the map
// whose record still counts it against the agent (convertAgent), and the
// summary without the map.

// agentRec is an agent's summary record.
type agentRec struct {
	Count  int       `json:"count,omitempty"`
	Oldest string    `json:"oldest,omitempty"`
	Since  time.Time `json:"since"`
	// Unreported is the whole set, as ledgers before 2026-12-04 kept it;
	// never written now.
	Unreported map[string]time.Time `json:"unreported,omitempty"`
}

// readAgent reads an agent's summary, with the count and oldest of an old
// record's map filled in; found is false when the agent has none.
func readAgent(r Reader, ns, agent string) (a agentRec, found bool, err error) {
	if err := getJSON(r, key(kindUnreported, ns, agent), &a); err != nil {
		if errors.Is(err, ErrNotFound) {
			return agentRec{}, false, nil
		}
		return agentRec{}, false, err
	}
	if a.Unreported != nil {
		a.Count = len(a.Unreported)
		a.Oldest, a.Since = oldestOf(a.Unreported)
	}
	return a, true, nil
}

// oldestOf returns the earliest of an old record's map, by (time, id).
func oldestOf(m map[string]time.Time) (string, time.Time) {
	var id string
	var at time.Time
	for k, t := range m {
		if id == "" || t.Before(at) || (t.Equal(at) && k < id) {
			id, at = k, t
		}
	}
	return id, at
}

// unreportedIndexKey is the index key of one unreported effect.
func unreportedIndexKey(ns, agent string, since time.Time, id string) []byte {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(since.UnixNano()))
	return key(kindUnreportedIndex, ns, agent, hex.EncodeToString(ts[:]), id)
}

// unreportedIndexParts returns the time and effect id of an index key
// under prefix.
func unreportedIndexParts(prefix []byte, k []byte) (time.Time, string, bool) {
	rest := string(k[len(prefix):])
	hx, id, ok := strings.Cut(rest, "\x00")
	if !ok || len(hx) != 16 {
		return time.Time{}, "", false
	}
	var ts [8]byte
	if _, err := hex.Decode(ts[:], []byte(hx)); err != nil {
		return time.Time{}, "", false
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(ts[:]))).UTC(), id, true
}

// convertAgent writes the index keys of an old record's map and drops the
// map from a (the caller writes a), with a's count and oldest set from what
// it kept. It keeps an entry only if its effect's record still counts it
// against this agent at that time (acting, the effect the caller is
// changing, is kept as it is): before 2026-12-04 an expiry did not clear an
// earlier attempt's entry, so an effect expired under one agent, reported
// late and expired again under another was in both maps, and the first
// agent's entry could never be cleared (clears follow the record). One read
// an entry, once an agent (review revunrep 01).
func convertAgent(t *opTxn, ns, agent, acting string, a *agentRec) error {
	kept := make(map[string]time.Time, len(a.Unreported))
	for id, at := range a.Unreported {
		if id != acting {
			rec, err := readEffect(t, ns, id)
			if errors.Is(err, ErrNotFound) {
				continue // purged
			}
			if err != nil {
				return err
			}
			owner := rec.UnreportedAgent
			if owner == "" { // a record written as JSON, before it was kept
				owner = rec.AgentID
			}
			if owner != agent || !rec.UnreportedAt.Equal(at) {
				continue
			}
		}
		kept[id] = at
		if err := t.Set(unreportedIndexKey(ns, agent, at, id), nil); err != nil {
			return err
		}
	}
	a.Unreported = nil
	a.Count = len(kept)
	a.Oldest, a.Since = oldestOf(kept)
	return nil
}

// writeAgent writes an agent's summary, or deletes it at zero.
func writeAgent(t *opTxn, ns, agent string, a *agentRec) error {
	k := key(kindUnreported, ns, agent)
	if a.Count <= 0 {
		return t.Delete(k)
	}
	return setJSON(t, k, a)
}

// addUnreported counts effect id, whose lease ran out at since, against
// agent, and returns the agent's new count.
func addUnreported(t *opTxn, ns, agent, id string, since time.Time) (int, error) {
	a, _, err := readAgent(t, ns, agent)
	if err != nil {
		return 0, err
	}
	if a.Unreported != nil {
		delete(a.Unreported, id) // not counted twice (callers clear first)
		if err := convertAgent(t, ns, agent, "", &a); err != nil {
			return 0, err
		}
	}
	if err := t.Set(unreportedIndexKey(ns, agent, since, id), nil); err != nil {
		return 0, err
	}
	a.Count++
	if a.Oldest == "" || since.Before(a.Since) || (since.Equal(a.Since) && id < a.Oldest) {
		a.Oldest, a.Since = id, since
	}
	return a.Count, writeAgent(t, ns, agent, &a)
}

// removeUnreported stops counting effect id, whose lease ran out at since,
// against agent. An effect not counted is left alone.
func removeUnreported(t *opTxn, ns, agent, id string, since time.Time) error {
	a, found, err := readAgent(t, ns, agent)
	if err != nil || !found {
		return err
	}
	ik := unreportedIndexKey(ns, agent, since, id)
	if a.Unreported != nil {
		at, ok := a.Unreported[id]
		if !ok {
			return nil // not counted: the record stays as it was
		}
		ik = unreportedIndexKey(ns, agent, at, id) // the map's time, whichever the effect holds
		if err := convertAgent(t, ns, agent, id, &a); err != nil {
			return err
		}
	} else if _, err := t.Get(ik); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if err := t.Delete(ik); err != nil {
		return err
	}
	a.Count--
	if a.Count > 0 && a.Oldest == id {
		if a.Oldest, a.Since, err = nextUnreported(t, ns, agent, ik); err != nil {
			return err
		}
	}
	return writeAgent(t, ns, agent, &a)
}

// nextUnreported returns the first index entry of agent after the one at
// from (the oldest, just deleted), seeing this op's own writes too: Scan
// does not (opTxn.Scan), and a conversion in this op wrote index keys only
// its buffer holds.
func nextUnreported(t *opTxn, ns, agent string, from []byte) (string, time.Time, error) {
	p := prefix(kindUnreportedIndex, ns, agent)
	var best string
	err := t.Scan(p, from, func(k, _ []byte) (bool, error) {
		if v, ok := t.writes.Lookup(string(k)); ok && v == nil {
			return true, nil // deleted by this op (the cleared one)
		}
		best = string(k)
		return false, nil
	})
	if err != nil {
		return "", time.Time{}, err
	}
	for k, v := range t.writes.All() {
		if v != nil && strings.HasPrefix(k, string(p)) && k > string(from) && (best == "" || k < best) {
			best = k
		}
	}
	if best == "" {
		return "", time.Time{}, errors.New("ledger: an agent's unreported summary counts effects its index does not hold")
	}
	at, id, ok := unreportedIndexParts(p, []byte(best))
	if !ok {
		return "", time.Time{}, errors.New("ledger: a malformed unreported index key")
	}
	return id, at, nil
}
