package ledger

import (
	"context"
	"errors"
	"iter"
)

// Store is the narrow seam between the engine and durable storage: an
// ordered key-value space with transactions. The engine serialises every
// mutation through one writer goroutine and hands a Store a whole batch of
// decisions at once, so a Store needs no conflict detection of its own; it
// must only make each Update atomic and durable before returning.
//
// Keys and values passed to a Store must not be retained by it after the
// call returns, and slices it hands back belong to the caller.
type Store interface {
	// Update runs fn in one read-write transaction and commits it durably
	// (fsync or equivalent) before returning. If fn returns an error nothing
	// is written. When ctx ends, a store that waits on a server gives up
	// and returns an error that wraps ctx's (what was committed stays).
	Update(ctx context.Context, fn func(Txn) error) error
	// View runs fn against a consistent snapshot of committed data. When ctx
	// ends, reads still to come fail with an error that wraps ctx's.
	View(ctx context.Context, fn func(Reader) error) error
	// Close releases the store.
	Close() error
}

// Reader reads keys.
type Reader interface {
	// Get returns the value of key, or ErrNotFound.
	Get(key []byte) ([]byte, error)
	// Scan calls fn for every key with the given prefix in ascending order,
	// starting at start (inclusive) when start is not nil, until fn returns
	// false or an error. In a Txn, Scan sees the transaction's own writes.
	Scan(prefix, start []byte, fn func(key, val []byte) (bool, error)) error
}

// Txn is a read-write transaction. Set and Delete may keep key and val
// until the transaction ends, and must not modify either: the engine hands
// them bytes it shares with its write buffer (opTxn.flush).
type Txn interface {
	Reader
	Set(key, val []byte) error
	Delete(key []byte) error
}

// Exclusive is implemented by stores that only this engine writes to (an
// embedded database); the engine then caches what it wrote. A store shared
// by several processes must not claim it.
type Exclusive interface {
	Exclusive() bool
}

// Compactor is implemented by stores that reclaim space in the background
// after deletions (Badger's value log); Purge calls it after purging.
type Compactor interface {
	Compact() error
}

// Preparer is implemented by stores that can make the next Update's
// transaction ready ahead of it (badgerstore: its read timestamp, which
// waits for Badger's last commit to be acknowledged). The engine calls
// PrepareUpdate after an Update returns and before it answers that batch's
// callers, when ops are already waiting for the next batch: answered first,
// the callers would take the cores that acknowledgement waits for. With no
// op waiting it does not call it, so a lone caller's answer is not delayed.
type Preparer interface {
	PrepareUpdate()
}

// Prefetcher is implemented by transactions whose reads are round trips to
// a server. Before running a batch, the engine names the keys its ops will
// read, and Prefetch fetches them together, so that later Gets of those
// keys in the same transaction are answered from memory. It returns the
// values in the order of keys, nil for a key that is absent.
type Prefetcher interface {
	Prefetch(keys [][]byte) ([][]byte, error)
}

// ErrStoreFailed is wrapped by a Store's Update error when the store could
// not make a batch durable and cannot tell whether it will hold it after a
// restart (badgerstore: its log was written but not synced, or synced but
// Badger's commit failed), and refuses writes until it is reopened. The
// engine then stops taking writes until it is restarted.
var ErrStoreFailed = errors.New("the store failed and refuses writes until it is reopened")

// WriteBuffer holds writes not yet applied: the last value written to each
// key, with the keys in the order they were first written. A nil value is
// a delete. The engine buffers each op's writes in one, so that an op that
// fails leaves nothing behind; a Store may buffer a transaction's writes in
// one to send them together. The zero value is empty.
type WriteBuffer struct {
	vals  map[string][]byte
	order []string
}

// Put buffers a write of v to k; nil deletes k.
func (b *WriteBuffer) Put(k string, v []byte) {
	if b.vals == nil {
		// An engine op writes a handful of keys: room for 8 at once
		// spares the slice and the map their first growths.
		b.vals, b.order = make(map[string][]byte, 8), make([]string, 0, 8)
	}
	if _, ok := b.vals[k]; !ok {
		b.order = append(b.order, k)
	}
	b.vals[k] = v
}

// Lookup returns the buffered write to k, if there is one (nil: a delete).
func (b *WriteBuffer) Lookup(k string) ([]byte, bool) {
	v, ok := b.vals[k]
	return v, ok
}

// All yields each written key with its last value (nil: a delete), in the
// order the keys were first written.
func (b *WriteBuffer) All() iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, k := range b.order {
			if !yield(k, b.vals[k]) {
				return
			}
		}
	}
}

// Reset empties b, keeping its room for the next writes.
func (b *WriteBuffer) Reset() {
	clear(b.vals)
	b.order = b.order[:0]
}

// Len is the number of keys written.
func (b *WriteBuffer) Len() int { return len(b.order) }
