package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// State counts. How many effects are in each state is written with every
// transition, so that reading it costs a key or a few. An engine on an
// exclusive store keeps one record, m\0states. On a shared store each
// engine keeps its own, s\0<replica id>, of the moves its batches made, so
// that replicas never write the same counts (a key every batch of every
// replica wrote would make their batches conflict). One replica's counts
// can be negative (an effect begun through one replica and reported
// through another); only their sum means anything, and StateCounts adds
// them up. A replica that stops leaves its record behind, a few dozen bytes
// per start, still part of the sum (the keys: exclusiveCountsKey and
// kindReplicaCounts).

// moveStateCount records that one effect moved between states. The deltas
// of an op are kept with its writes and applied once per batch.
func moveStateCount(t *opTxn, from, to State) error {
	if t.states == nil {
		t.states = map[State]int64{}
	}
	if from != "" {
		t.states[from]--
	}
	if to != "" {
		t.states[to]++
	}
	return nil
}

// applyStateCounts adds a batch's deltas to this engine's counts
// (countsKey). On an exclusive store the counts come from the writer's
// cache once read: the map is changed in place, and a batch that is then
// not written empties the cache (see fail).
func (e *Engine) applyStateCounts(tx Txn, delta map[State]int64) error {
	var counts map[State]int64
	if e.cache != nil {
		counts = e.cache.counts
	}
	if counts == nil {
		counts = map[State]int64{}
		if err := getJSON(tx, e.countsKey, &counts); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	for st, d := range delta {
		counts[st] += d
	}
	if e.cache != nil {
		e.cache.counts = counts
	}
	return tx.Set(e.countsKey, appendStateCounts(make([]byte, 0, 24*len(counts)+2), counts))
}

// appendStateCounts appends counts as encoding/json's Marshal spells them
// (keys sorted); a state name needing escapes, which no state has, goes
// through it (TestStateCountsEncodingIsMarshals).
func appendStateCounts(b []byte, counts map[State]int64) []byte {
	names := make([]string, 0, len(counts))
	for st := range counts {
		if !plainJSONString(string(st)) {
			j, _ := json.Marshal(counts) // a map of strings to integers always encodes
			return append(b, j...)
		}
		names = append(names, string(st))
	}
	slices.Sort(names)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
		b = strconv.AppendInt(b, counts[State(name)], 10)
	}
	return append(b, '}')
}

// StateCounts returns how many stored effects are in each state. A pending
// effect whose lease has run out counts as pending until the reaper (or a
// begin) records its expiry, within a reap interval.
func (e *Engine) StateCounts(ctx context.Context) (map[State]int64, error) {
	counts := map[State]int64{}
	add := func(b []byte) error {
		var c map[State]int64
		if err := json.Unmarshal(b, &c); err != nil {
			return fmt.Errorf("ledger: corrupt state counts: %w", err)
		}
		for st, n := range c {
			counts[st] += n
		}
		return nil
	}
	err := e.view(ctx, func(r Reader) error {
		b, err := r.Get(exclusiveCountsKey)
		if err == nil {
			err = add(b)
		}
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return r.Scan(prefix(kindReplicaCounts), nil, func(_, v []byte) (bool, error) {
			return true, add(v)
		})
	})
	for st, n := range counts {
		counts[st] = max(0, n)
	}
	return counts, err
}
