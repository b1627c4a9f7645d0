package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// applyStateCounts adds a batch's deltas to the counts stored at k.
func applyStateCounts(tx Txn, k []byte, delta map[State]int64) error {
	counts := map[State]int64{}
	if err := getJSON(tx, k, &counts); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	for st, d := range delta {
		counts[st] += d
	}
	b, err := json.Marshal(counts)
	if err != nil {
		return err
	}
	return tx.Set(k, b)
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
