package badgerstore

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestALogOlderThanBadgerIsNotReplayedOverIt (revwal2 01): the current
// segment is a stale copy of this ledger's own log (a file-level copy of a
// running ledger that took the log before Badger's files, or an old log put
// back), ending at batch 4 while Badger holds batches up to 9. Every batch
// is synced in the log before Badger commits it, so Badger's applied key
// past the log's last record proves the log is not the one Badger was
// written with; replaying it puts batch 4's values over batch 9's. Open must
// refuse, or leave the ledger as Badger holds it.
func TestALogOlderThanBadgerIsNotReplayedOverIt(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	dir, stale := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		putCounter(t, s, i)
	}
	if err := s.syncBadger(); err != nil { // a checkpoint: the segment starts at batch 3
		t.Fatal(err)
	}
	putCounter(t, s, 3)
	putCounter(t, s, 4)
	copyDir(t, dir, stale, isWAL) // the log holds batches 3 and 4
	for i := 5; i < 10; i++ {
		putCounter(t, s, i)
	}
	crash(s) // Badger's Close flushes: Badger holds batches 0..9
	copyDir(t, stale, dir, isWAL)

	s, err = Open(dir, opts)
	if err != nil {
		t.Logf("refused (as wanted): %v", err)
		return
	}
	defer s.Close()
	if diff := cmp.Diff(wantCounters(10), contents(t, s)); diff != "" {
		t.Fatalf("a log ending at batch 4 was replayed over Badger holding batch 9 (-want +got):\n%s", diff)
	}
}

// TestABatchLargerThanASegmentSurvivesAPowerCut (revwal2 02): append
// writes a record larger than the segment (it checkpoints first, then
// writes past the segment's size), fdatasyncs it and commits it, so the
// batch is answered; read then stops at it (n > segmentSize), and after a
// power cut that takes Badger's unsynced pages the answered batch is gone.
// Unreachable with the 64 MiB segment while Badger caps a transaction at
// 15% of its 16 MiB memtable, but read's bound is not append's.
func TestABatchLargerThanASegmentSurvivesAPowerCut(t *testing.T) {
	opts := &Options{MinFreeBytes: -1, segmentSize: 64 << 10}
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	putCounter(t, s, 0)
	if err := s.syncBadger(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) }) // Badger as the power cut leaves it
	big := bytes.Repeat([]byte("v"), 100<<10)
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("big"), big) }); err != nil {
		t.Fatal(err) // answered: the caller is told it is durable
	}
	copyDir(t, dir, snap, isWAL)
	crash(s)

	s, err = Open(snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := wantCounters(1)
	want["big"] = string(big)
	got := contents(t, s)
	if _, ok := got["big"]; !ok {
		t.Fatalf("the answered batch of %d bytes (segment %d) is missing after the power cut; store holds %d keys", len(big), opts.segmentSize, len(got))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}
