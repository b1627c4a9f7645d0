package ledger

// TEMPORARY instrumentation (p99 brief): not to be committed.

import (
	"context"
	"sync/atomic"
	"time"
)

type traceCtxKey struct{}

// OpTrace is filled by enqueue for an op whose ctx carries it.
type OpTrace struct {
	Enq, Sent, Recv time.Time
	Batch           int64
	Answered        time.Time
	Pos             int
}

// WithOpTrace returns ctx carrying tr.
func WithOpTrace(ctx context.Context, tr *OpTrace) context.Context {
	return context.WithValue(ctx, traceCtxKey{}, tr)
}

// BatchTrace is one commit's timeline.
type BatchTrace struct {
	Start, DecideStart, DecideEnd, UpdateEnd, AnswerEnd time.Time
	Ops, Taken0                                         int
	Store                                               StoreTiming
}

// StoreTiming is what a store says of its Update (temporary).
type StoreTiming struct {
	Write, Sync, Commit, Checkpoint, ZeroFill time.Duration
	CPUpdate, CPLogSync, CPDir                time.Duration
}

// LastStoreTiming is set by badgerstore's Update (temporary).
var LastStoreTiming StoreTiming

var (
	Batches []BatchTrace
	batchN  atomic.Int64
	TraceOn bool
)

func BatchCount() int64 { return batchN.Load() }
