package ledger

import (
	"bytes"
	"context"
	"time"
)

// Per-sink claims. A delivery worker runs a loop per sink, each claiming
// only its own sink's entries, so that a sink that hangs or has a backlog
// never fills the claims of the others (ClaimEvents claims in key order,
// sink first).

// ClaimSinkEvents is ClaimEvents for the entries of one sink: it claims up
// to limit of sink's outbox entries due now, oldest first, for worker, for
// lease, and returns them.
func (e *Engine) ClaimSinkEvents(ctx context.Context, sink, worker string, lease time.Duration, limit int) ([]OutboxEntry, error) {
	return e.claimOutbox(ctx, prefix(kindOutbox, sink), worker, lease, limit)
}

// OutboxSinks lists the sinks the outbox holds entries for (due or not,
// dead or not), in order, seeking past each sink's entries rather than
// reading them: a worker finds there the entries of a sink it has no
// loop for (one removed from the config).
func (e *Engine) OutboxSinks(ctx context.Context) ([]string, error) {
	var sinks []string
	base := prefix(kindOutbox)
	var start []byte
	for {
		var next string
		found := false
		err := e.view(ctx, func(r Reader) error {
			return r.Scan(base, start, func(k, _ []byte) (bool, error) {
				rest := k[len(base):]
				if i := bytes.IndexByte(rest, 0); i >= 0 {
					rest = rest[:i]
				}
				next, found = string(rest), true
				return false, nil
			})
		})
		if err != nil {
			return nil, err
		}
		if !found {
			return sinks, nil
		}
		sinks = append(sinks, next)
		start = append(key(kindOutbox, next), 1) // past every key(kindOutbox, next, …)
	}
}
