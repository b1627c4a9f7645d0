package ledger

import (
	"context"
	"errors"
	"time"
)

// Sink references. A sink that must find again what it delivered (the
// Slack message of an approval request, updated in place when the request
// is decided) records where it put it here, in the ledger, so that any
// replica's delivery worker finds it after a restart. A reference holds
// only what the sink sends back to its own service (a channel and a
// message timestamp), never an event's payload; it is purged with the
// effects' retention.

// sinkRef is what is stored at key(kindSinkRef, sink, ref).
type sinkRef struct {
	Value []byte    `json:"v"`
	At    time.Time `json:"at"`
}

// MaxSinkRefBytes bounds a sink reference's value.
const MaxSinkRefBytes = 4 << 10

// PutSinkRef records value under (sink, ref), replacing what was there.
func (e *Engine) PutSinkRef(ctx context.Context, sink, ref string, value []byte) error {
	if err := checkText("sink", sink, MaxIDLen, true); err != nil {
		return err
	}
	if err := checkText("ref", ref, MaxIDLen, true); err != nil {
		return err
	}
	if len(value) > MaxSinkRefBytes {
		return invalidArg("value", "is %d bytes; the limit is %d", len(value), MaxSinkRefBytes)
	}
	_, err := submit(ctx, e, func(t *opTxn, now time.Time) (any, error) {
		return nil, setJSON(t, key(kindSinkRef, sink, ref), &sinkRef{Value: value, At: now})
	})
	return err
}

// SinkRef returns what PutSinkRef recorded under (sink, ref), or
// ErrNotFound.
func (e *Engine) SinkRef(ctx context.Context, sink, ref string) ([]byte, error) {
	var r sinkRef
	err := e.view(ctx, func(rd Reader) error { return getJSON(rd, key(kindSinkRef, sink, ref), &r) })
	if err != nil {
		return nil, err
	}
	return r.Value, nil
}

// purgeSinkRefs deletes references older than the effects' retention.
func (e *Engine) purgeSinkRefs(ctx context.Context) error {
	cutoff := e.clock.Now().Add(-e.defaults.Retention)
	var old [][]byte
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindSinkRef), nil, func(k, v []byte) (bool, error) {
			var s sinkRef
			if err := decodeJSON(v, &s); err != nil {
				return false, err
			}
			if s.At.Before(cutoff) {
				old = append(old, k)
			}
			return true, nil
		})
	})
	if err != nil {
		return err
	}
	return e.deleteKeys(ctx, old)
}

// ReleaseOutboxClaims ends every claim on the outbox's entries, so that
// what a process killed in the middle of a delivery had claimed is sent
// again at once rather than when its claim runs out. It does nothing on a
// shared store, where the claims are other replicas' and live. Call it
// before the delivery worker starts. It returns how many it released.
func (e *Engine) ReleaseOutboxClaims(ctx context.Context) (int, error) {
	if e.replica != "" {
		return 0, nil
	}
	var claimed [][]byte
	err := e.view(ctx, func(r Reader) error {
		return r.Scan(prefix(kindOutbox), nil, func(k, v []byte) (bool, error) {
			var en OutboxEntry
			if err := decodeJSON(v, &en); err != nil {
				return false, err
			}
			if en.ClaimedBy != "" {
				claimed = append(claimed, k)
			}
			return true, nil
		})
	})
	n := 0
	for len(claimed) > 0 && err == nil {
		part := claimed[:min(len(claimed), sweepBatch)]
		claimed = claimed[len(part):]
		_, err = submit(ctx, e, func(t *opTxn, _ time.Time) (any, error) {
			for _, k := range part {
				var en OutboxEntry
				if err := getJSON(t, k, &en); errors.Is(err, ErrNotFound) {
					continue
				} else if err != nil {
					return nil, err
				}
				en.ClaimedBy, en.ClaimedUntil = "", time.Time{}
				if err := setJSON(t, k, &en); err != nil {
					return nil, err
				}
				n++
			}
			return nil, nil
		})
	}
	return n, err
}
