package badgerstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// putCounter writes, in one synced update, the record r\0<i> and the
// counter c\0n set to i: a batch whose two keys must move together.
func putCounter(t *testing.T, s *Store, i int) {
	t.Helper()
	if err := s.Update(context.Background(), counterBatch(i)); err != nil {
		t.Fatal(err)
	}
}

// counterBatch is putCounter's batch.
func counterBatch(i int) func(ledger.Txn) error {
	return func(tx ledger.Txn) error {
		if err := tx.Set(fmt.Appendf(nil, "r\x00%04d", i), []byte("record marker-plaintext")); err != nil {
			return err
		}
		if i > 0 {
			if err := tx.Delete(fmt.Appendf(nil, "d\x00%04d", i-1)); err != nil {
				return err
			}
		}
		if err := tx.Set(fmt.Appendf(nil, "d\x00%04d", i), nil); err != nil {
			return err
		}
		return tx.Set([]byte("c\x00n"), fmt.Appendf(nil, "%d", i))
	}
}

// contents is every key the store's Scan shows, with its value.
func contents(t *testing.T, s *Store) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := s.View(context.Background(), func(r ledger.Reader) error {
		return r.Scan(nil, nil, func(k, v []byte) (bool, error) { got[string(k)] = string(v); return true, nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// wantCounters is contents after putCounter 0..n-1.
func wantCounters(n int) map[string]string {
	want := map[string]string{}
	for i := range n {
		want[fmt.Sprintf("r\x00%04d", i)] = "record marker-plaintext"
	}
	if n > 0 {
		want[fmt.Sprintf("d\x00%04d", n-1)] = ""
		want["c\x00n"] = fmt.Sprint(n - 1)
	}
	return want
}

func copyDir(t *testing.T, from, to string, match func(name string) bool) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || !match(e.Name()) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func isWAL(name string) bool { return name == walNames[0] || name == walNames[1] }

// badgerBehind returns a directory holding Badger as it was after `before`
// batches (a copy taken at a checkpoint) and the log as it is after
// `before+after`, the store's files once a power cut took Badger's unsynced
// pages: the log alone holds the later batches.
func badgerBehind(t *testing.T, opts *Options, before, after int) string {
	t.Helper()
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		putCounter(t, s, i)
	}
	if err := s.syncBadger(); err != nil { // a checkpoint
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) })
	for i := range after {
		putCounter(t, s, before+i)
	}
	copyDir(t, dir, snap, isWAL)
	crash(s) // no Close: no checkpoint
	return snap
}

func TestOpenRebuildsFromACheckpointAndTheLog(t *testing.T) {
	snap := badgerBehind(t, &Options{MinFreeBytes: -1}, 5, 20)
	s, err := Open(snap, &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCounters(25), contents(t, s)); diff != "" {
		t.Fatalf("after replay (-want +got):\n%s", diff)
	}
	putCounter(t, s, 25)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openWant(t, snap, &Options{MinFreeBytes: -1}, 26, "after a write and a reopen")
}

// records lists the offsets of the current segment's records.
func records(t *testing.T, dir string) (string, []int64) {
	t.Helper()
	var best string
	var gen uint64
	for _, n := range walNames {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			continue
		}
		if h, ok := decodeWALHeader(b); ok && h.gen >= gen {
			best, gen = n, h.gen
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, best))
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(walHeaderSize); off+walRecHeader < int64(len(b)); {
		n := binary.LittleEndian.Uint32(b[off:])
		if n == 0 || binary.LittleEndian.Uint64(b[off+8:]) != gen {
			break
		}
		offs = append(offs, off)
		off += walRecHeader + int64(n)
	}
	return filepath.Join(dir, best), offs
}

func TestOpenStopsAtATornOrCorruptRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   func(offs []int64) int64 // a byte to damage
		keep int                      // batches after the 5 in Badger that survive
	}{
		{"torn tail", func(offs []int64) int64 { return offs[len(offs)-1] + walRecHeader + 3 }, 19},
		{"middle", func(offs []int64) int64 { return offs[10] + walRecHeader + 1 }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := badgerBehind(t, &Options{MinFreeBytes: -1}, 5, 20)
			name, offs := records(t, snap)
			if len(offs) != 20 {
				t.Fatalf("%d records in the log, want 20", len(offs))
			}
			f, err := os.OpenFile(name, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte{0xee}, tc.at(offs)); err != nil {
				t.Fatal(err)
			}
			f.Close()
			s, err := Open(snap, &Options{MinFreeBytes: -1})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(wantCounters(5+tc.keep), contents(t, s)); diff != "" {
				t.Fatalf("after replay (-want +got):\n%s", diff)
			}
			putCounter(t, s, 5+tc.keep)
			crash(s) // again: the new write is in the log alone
			openWant(t, snap, &Options{MinFreeBytes: -1}, 5+tc.keep+1, "after a later write and a reopen")
		})
	}
}

// TestARecycledSegmentsOlderRecordsAreNotReplayed: small segments, so the
// two files are reused many times, each holding the older generation's
// records behind the newer ones.
func TestARecycledSegmentsOlderRecordsAreNotReplayed(t *testing.T) {
	opts := &Options{MinFreeBytes: -1, segmentSize: walHeaderSize + 600}
	dir := t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		putCounter(t, s, i)
	}
	if s.wal.hdr.gen < 6 {
		t.Fatalf("generation %d after 60 batches: the segments were not recycled", s.wal.hdr.gen)
	}
	// Badger as at the last checkpoint, then two batches in the log only;
	// the segment holds an older generation's records after them.
	snap := t.TempDir()
	if err := s.syncBadger(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) })
	putCounter(t, s, 60)
	putCounter(t, s, 61)
	copyDir(t, dir, snap, isWAL)
	crash(s)
	name, offs := records(t, snap)
	b, _ := os.ReadFile(name)
	if len(offs) != 2 || bytes.Count(b, []byte("marker-plaintext")) <= 2 {
		t.Fatalf("%d records of this generation, %d in all: no older records behind them", len(offs), bytes.Count(b, []byte("marker-plaintext")))
	}
	openWant(t, snap, opts, 62, "after replay")
}

// TestBadgerAheadOfTheCheckpointIsReplayedOver: Badger's unsynced pages
// since the checkpoint reached the disk (all of them, or only the newer
// memtable's: see the revwal test of a new memtable). Every batch they hold
// is in the log, which was synced before each commit, so replaying the
// whole log over them gives the log's end state.
func TestBadgerAheadOfTheCheckpointIsReplayedOver(t *testing.T) {
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		putCounter(t, s, i)
	}
	if err := s.logs.sync(); err != nil { // Badger's pages on disk
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(string) bool { return true })
	crash(s)
	s = openWant(t, snap, &Options{MinFreeBytes: -1}, 10, "after open")
	putCounter(t, s, 10)
	if diff := cmp.Diff(wantCounters(11), contents(t, s)); diff != "" {
		t.Fatalf("after a later write (-want +got):\n%s", diff)
	}
}

// TestABatchInTheLogThatBadgerNeverCommittedIsReplayed: the power cut
// came after the record's fdatasync and before Badger's commit; the
// batch was never answered, and open applies it whole.
func TestABatchInTheLogThatBadgerNeverCommittedIsReplayed(t *testing.T) {
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		putCounter(t, s, i)
	}
	s.wal.datasync = func(f *os.File) error {
		if err := datasync(f); err != nil {
			return err
		}
		copyDir(t, dir, snap, func(string) bool { return true }) // the power cut
		return nil
	}
	putCounter(t, s, 3)
	crash(s)
	openWant(t, snap, &Options{MinFreeBytes: -1}, 4, "after open")
}

func TestTheLogIsSealedWithTheKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	opts := &Options{MinFreeBytes: -1, EncryptionKey: key}
	snap := badgerBehind(t, opts, 2, 10)
	for _, n := range walNames {
		b, err := os.ReadFile(filepath.Join(snap, n))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("marker-plaintext")) {
			t.Fatalf("%s holds a record's plaintext", n)
		}
	}
	if _, offs := records(t, snap); len(offs) != 10 {
		t.Fatalf("%d records in the log, want 10", len(offs))
	}
	openWant(t, snap, opts, 12, "after replay")
}

// TestWithoutAKeyTheLogHoldsPlaintext is the control for the test above.
func TestWithoutAKeyTheLogHoldsPlaintext(t *testing.T) {
	snap := badgerBehind(t, &Options{MinFreeBytes: -1}, 2, 10)
	name, _ := records(t, snap)
	b, err := os.ReadFile(name)
	if err != nil || !bytes.Contains(b, []byte("marker-plaintext")) {
		t.Fatalf("no plaintext marker in %s (%v): the check above could not see one", name, err)
	}
}

func TestAFailedLogSyncRefusesWritesUntilReopened(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	putCounter(t, s, 0)
	boom := errors.New("EIO")
	s.wal.datasync = func(*os.File) error { return boom }
	err = s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("c\x00n"), []byte("x")) })
	if !errors.Is(err, boom) {
		t.Fatalf("update with a failing sync: %v, want %v", err, boom)
	}
	s.wal.datasync = datasync // the disk is back: the store still refuses
	err = s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("c\x00n"), []byte("y")) })
	if !errors.Is(err, errLogFailed) {
		t.Fatalf("update after a failed sync: %v, want %v", err, errLogFailed)
	}
	if err := s.Restore(bytes.NewReader(nil)); !errors.Is(err, errLogFailed) {
		t.Fatalf("restore after a failed sync: %v", err)
	}
	s.Close()
	s, err = Open(dir, &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := contents(t, s)
	if got["r\x00"+"0000"] == "" {
		t.Fatalf("the answered batch is gone: %q", got)
	}
	putCounter(t, s, 1)
	if diff := cmp.Diff(wantCounters(2), contents(t, s)); diff != "" {
		t.Fatalf("after reopening (-want +got):\n%s", diff)
	}
}

// TestTheAppliedSequenceNumberIsNotALedgerKey: a scan of everything, and
// Empty, do not see the store's own key.
func TestTheAppliedSequenceNumberIsNotALedgerKey(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Update(context.Background(), func(tx ledger.Txn) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if empty, err := s.Empty(); err != nil || !empty {
		t.Fatalf("Empty after an update writing nothing: %v %v", empty, err)
	}
	putCounter(t, s, 0)
	if diff := cmp.Diff(wantCounters(1), contents(t, s)); diff != "" {
		t.Fatalf("scan of everything (-want +got):\n%s", diff)
	}
}

// crash closes s as a crash would: no Sync, no checkpoint.
func crash(s *Store) {
	s.wal.close()
	s.comp.close()
	s.db.Close()
}

// openWant opens dir and checks that it holds putCounter's first n batches.
func openWant(t *testing.T, dir string, opts *Options, n int, when string) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if diff := cmp.Diff(wantCounters(n), contents(t, s)); diff != "" {
		t.Fatalf("%s (-want +got):\n%s", when, diff)
	}
	return s
}

// TestARefusedOpenSaysWhy: a log of another ledger, and a log whose replay
// would go over writes made without it (an older binary after a crash),
// are refused with errors naming the cause and the way out.
func TestARefusedOpenSaysWhy(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	foreign := badgerBehind(t, opts, 1, 1)
	own := badgerBehind(t, opts, 1, 1)
	for _, n := range walNames {
		os.Remove(filepath.Join(own, n))
	}
	copyDir(t, foreign, own, isWAL)
	_, err := Open(own, opts)
	if err == nil || !strings.Contains(err.Error(), "holds the log of ledger") || !strings.Contains(err.Error(), "another data directory") {
		t.Errorf("open with another ledger's log: %v, want a refusal naming the ledgers", err)
	}

	behind := badgerBehind(t, opts, 2, 3)
	old, err := Open(behind, &Options{MinFreeBytes: -1, NoSync: true}) // as an older binary
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("c\x00n"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	old.Close()
	_, err = Open(behind, opts)
	if err == nil || !strings.Contains(err.Error(), "writes made without the log") {
		t.Errorf("open after an older binary wrote: %v, want a refusal saying so", err)
	}
}

// TestBackupLeavesOutTheStoresOwnKeys: a backup restored into another
// ledger keeps that ledger's id and applied sequence number.
func TestBackupLeavesOutTheStoresOwnKeys(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	src, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	for i := range 3 {
		putCounter(t, src, i)
	}
	var b bytes.Buffer
	if err := src.Backup(&b); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b.Bytes(), appliedKey) || bytes.Contains(b.Bytes(), idKey) {
		t.Fatal("the backup stream holds the store's own keys")
	}
	dstDir := t.TempDir()
	dst, err := Open(dstDir, opts)
	if err != nil {
		t.Fatal(err)
	}
	before, _, _ := readID(dst.db)
	if err := dst.Restore(&b); err != nil {
		t.Fatal(err)
	}
	after, _, _ := readID(dst.db)
	if before != after || before != dst.wal.id {
		t.Fatalf("ledger id %x before the restore, %x after", before, after)
	}
	putCounter(t, dst, 3)
	crash(dst)
	openWant(t, dstDir, opts, 4, "after a restore, a write and a crash")
}

// Each batch's log record holds its own writes only, though the store
// reuses one record's buffer from batch to batch: after a batch larger
// than the buffer it keeps, and after a batch whose fn failed midway (its
// writes in the buffer, never logged), the log replayed over Badger as it
// was before them gives exactly what was committed.
func TestEachBatchsLogRecordHoldsOnlyItsOwnWrites(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	putCounter(t, s, 0)
	if err := s.syncBadger(); err != nil { // a checkpoint: Badger as it is now
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) })
	big := bytes.Repeat([]byte("b"), keptRecord+keptRecord/4)
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("big"), big) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Delete([]byte("big")) }); err != nil {
		t.Fatal(err)
	}
	putCounter(t, s, 1)
	failed := errors.New("the op failed")
	err = s.Update(context.Background(), func(tx ledger.Txn) error {
		if err := tx.Set([]byte("c\x00n"), []byte("never committed")); err != nil {
			return err
		}
		if err := tx.Set([]byte("x\x00lost"), []byte("never committed")); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) {
		t.Fatalf("the failing batch's Update = %v, want its fn's error", err)
	}
	putCounter(t, s, 2)
	copyDir(t, dir, snap, isWAL)
	crash(s)
	openWant(t, snap, opts, 3, "after replaying the log over Badger at the checkpoint")
}

// A batch's entries come from chunks of entryChunk: batches of many
// sets, of one key set again and again, and then of a few, each keep
// every key's last value, committed and replayed alike.
func TestEveryBatchKeepsEachKeysLastValueWhateverItsSize(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.syncBadger(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) })
	want := map[string]string{}
	for b, n := range []int{3000, 10, 5000, 1, 40} {
		err := s.Update(context.Background(), func(tx ledger.Txn) error {
			for i := range n {
				k, v := fmt.Sprintf("k\x00%05d", i%700), fmt.Sprintf("batch %d set %d", b, i)
				if err := tx.Set([]byte(k), []byte(v)); err != nil {
					return err
				}
				want[k] = v
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, contents(t, s)); diff != "" {
			t.Fatalf("after batch %d of %d sets (-want +got):\n%s", b, n, diff)
		}
	}
	copyDir(t, dir, snap, isWAL)
	crash(s)
	r, err := Open(snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if diff := cmp.Diff(want, contents(t, r)); diff != "" {
		t.Fatalf("replayed (-want +got):\n%s", diff)
	}
}

// appendEmptyRecord writes what binaries before 607eae9 wrote for a batch
// that wrote nothing: a record with an empty payload (the log has no key),
// and the batch's applied key in Badger.
func appendEmptyRecord(t *testing.T, s *Store) {
	t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	seq := s.seq + 1
	if err := s.wal.append(seq, s.seq, s.nextRecord()); err != nil {
		t.Fatal(err)
	}
	s.seq = seq
	s.dropNext()
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(appliedKey, appliedValue(seq)) }); err != nil {
		t.Fatal(err)
	}
}

// A log an earlier binary left may hold a record with an empty payload, for
// a batch that wrote nothing of the ledger's (the engine commits some: a
// lease mark unchanged, a report of nothing). Reading the log stopped at
// such a record, as at the zeros after the last one, so after a power cut
// every batch answered after it was lost; until Badger kept no memtable
// logs, a kill did not show it (Badger replayed its own).
func TestABatchThatWritesNothingDoesNotEndTheLog(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	putCounter(t, s, 0)
	if err := s.syncBadger(); err != nil { // a checkpoint
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) })
	appendEmptyRecord(t, s)
	putCounter(t, s, 1)
	copyDir(t, dir, snap, isWAL)
	crash(s)
	openWant(t, snap, opts, 2, "after a power cut with a batch that wrote nothing in the log")
}

// A batch that writes nothing leaves no record at all: a binary before
// 6423ff9 stops reading the log at an empty payload (as records does, the
// older reading rule), so after a power cut and a rollback to it every
// batch answered after one would be lost. Neither does it take a sequence
// number: the next batch's record follows the last one written.
func TestABatchThatWritesNothingLeavesNoRecord(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	dir := t.TempDir()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	putCounter(t, s, 0)
	_, before := records(t, dir)
	seq := s.seq
	for range 3 {
		if err := s.Update(context.Background(), func(ledger.Txn) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	_, after := records(t, dir)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("records after three batches that wrote nothing (-before +after):\n%s", diff)
	}
	if s.seq != seq {
		t.Fatalf("batches that wrote nothing took sequence numbers %d..%d", seq+1, s.seq)
	}
	putCounter(t, s, 1)
	if _, offs := records(t, dir); len(offs) != len(before)+1 {
		t.Fatalf("an older binary's reading finds %d records after the next write, want %d", len(offs), len(before)+1)
	}
}
