package badgerstore

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// A batch of a few keys, as at one caller, takes its Badger entries from
// the chunks the Update before it used: a new chunk of 64 entries for
// every batch was 5.8 KiB of the 14 KiB a one-op batch allocated.
func TestASmallBatchReusesTheEntriesOfTheBatchBefore(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	batch := func(i int) func(ledger.Txn) error {
		return func(tx ledger.Txn) error {
			for k := range 5 {
				if err := tx.Set(fmt.Appendf(nil, "k\x00%d\x00%d", i, k), []byte("value")); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for i := range 10 { // warm up: the first chunk, Badger's pools
		if err := s.Update(context.Background(), batch(i)); err != nil {
			t.Fatal(err)
		}
	}
	const n = 200
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		if err := s.Update(context.Background(), batch(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	perBatch := (after.TotalAlloc - before.TotalAlloc) / n
	t.Logf("%d bytes allocated a batch", perBatch)
	if chunk := uint64(entryChunk * 90); perBatch >= chunk {
		t.Fatalf("a batch of 5 sets allocated %d bytes, a chunk of entries (%d) or more", perBatch, chunk)
	}
}
