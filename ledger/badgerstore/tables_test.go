package badgerstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// writeRecords writes n records shaped like Ratchet's, from the first'th
// on: a prefixed key and a few hundred bytes of JSON, some of it repeated
// from record to record, 500 to a transaction.
func writeRecords(t *testing.T, s *Store, first, n int) {
	t.Helper()
	for done := 0; done < n; done += 500 {
		err := s.Update(context.Background(), func(tx ledger.Txn) error {
			for i := first + done; i < first+min(done+500, n); i++ {
				if err := tx.Set(recordKey(i), recordValue(i)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func recordKey(i int) []byte { return fmt.Appendf(nil, "e\x00%020d", i*7919%1000003) }

func recordValue(i int) []byte {
	return fmt.Appendf(nil, `{"effect_id":"%020d","idempotency_key":"bench:%d","effect_type":"bench.charge","state":"succeeded","estimated_cost_micros":%d,"agent_id":"agent-%d","namespace":"default","created_at":"2026-12-02T17:%02d:%02d.%06dZ"}`,
		i*7919, i, i%9973, i%17, i%60, i%59, i*31%1000000)
}

// TestTableIndexesAreSmallBesideTheirData: a table's index (a key and an
// offset per block) is read at open and stays mapped, and so resident,
// for the table's life, so a million-effect ledger holds every table's
// index in memory. Blocks of 16 KiB keep it a quarter of what Badger's
// 4 KiB blocks make of it (see Open).
func TestTableIndexesAreSmallBesideTheirData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeRecords(t, s, 0, 10000)
	// Close writes the memtable out as a table.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, &Options{MinFreeBytes: -1}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var data, offsets int64
	for _, ti := range s.db.Tables() {
		data += int64(ti.UncompressedSize)
		offsets += int64(ti.IndexSz) - int64(ti.BloomFilterSize)
	}
	if data < 1<<20 {
		t.Fatalf("tables hold %d bytes, want at least 1 MiB to measure", data)
	}
	// Measured: 15 KiB of block offsets per MiB of these records with
	// 4 KiB blocks, under 4 KiB with 16 KiB ones.
	if perMiB := offsets * (1 << 20) / data; perMiB > 6<<10 {
		t.Errorf("block offsets take %d bytes of index per MiB of data (%d in %d), want at most 6 KiB: blocks are too small", perMiB, offsets, data)
	}
}

// TestLedgerWithSmallerBlocksStaysReadable: a ledger whose tables were
// written with Badger's 4 KiB blocks (every ledger before 16 KiB) opens
// with today's options, its records are read, and they are read beside
// new ones in a table of 16 KiB blocks after a reopen.
func TestLedgerWithSmallerBlocksStaysReadable(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1, blockSize: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	writeRecords(t, s, 0, 5000)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		if s, err = Open(dir, &Options{MinFreeBytes: -1}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5000+round*5000; i += 97 {
			wantValue(t, s, string(recordKey(i)), recordValue(i))
		}
		if round == 0 {
			// A table of 16 KiB blocks beside the old one (at Close).
			writeRecords(t, s, 5000, 5000)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
