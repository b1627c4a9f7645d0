package badgerstore

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Adversarial tests of the log (issue 31, branch revwal). Each one failed
// on the wal branch as of fb353b6; /work/wt/briefs/revwal-tasks/ says why.

// ssts is the number of Badger's tables in dir.
func ssts(t *testing.T, dir string) int {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// With the store's log on, Badger keeps no memtable logs (Open), so a
// power cut keeps of Badger only the tables it flushed: a prefix of its
// commits ending with some memtable, nothing of the one it was filling.
// Every batch answered since the last checkpoint must come back from the
// log. (Until Badger's memtable logs were turned off, the same test was
// TestSyncedBatchesSurviveANewMemtableReachingTheDiskFirst: the newer
// memtable's log reaching the disk before the older one's.)
func TestAnsweredBatchesSurviveAPowerCutWhateverBadgerFlushed(t *testing.T) {
	dir, snap := t.TempDir(), t.TempDir()
	opts := &Options{MinFreeBytes: -1, segmentSize: 1 << 30} // no checkpoint but Open's
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 512<<10) // under the value threshold: in the tree
	put := func(i int) error {                // answered when it returns
		return s.Update(context.Background(), func(tx ledger.Txn) error {
			return tx.Set(fmt.Appendf(nil, "r\x00%04d", i), val)
		})
	}
	tables := ssts(t, dir)
	k := 0
	for ; ssts(t, dir) == tables; k++ {
		if k > 400 {
			t.Fatal("Badger never flushed a memtable to a table")
		}
		if err := put(k); err != nil {
			t.Fatal(err)
		}
	}
	for range 5 { // and some in the memtable after it
		if err := put(k); err != nil {
			t.Fatal(err)
		}
		k++
	}
	if mems, _ := filepath.Glob(filepath.Join(dir, "*.mem")); len(mems) > 0 {
		t.Errorf("Badger wrote memtable logs with the store's log on: %v", mems)
	}
	// The disk after a power cut: the log, and of Badger's files the
	// tables it flushed (synced, then named in the manifest). A copy of
	// the directory while a table is being written may take a manifest
	// naming a table the listing missed, so the flush is waited for first
	// (it makes no table, and leaves the batches after it in memory).
	if err := s.db.FlushImmutableMemTables(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(string) bool { return true })
	crash(s)

	s, err = Open(snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var missing []int
	err = s.View(context.Background(), func(r ledger.Reader) error {
		for i := range k {
			v, err := r.Get(fmt.Appendf(nil, "r\x00%04d", i))
			if err != nil && !errors.Is(err, ledger.ErrNotFound) {
				return err
			}
			if !bytes.Equal(v, val) {
				missing = append(missing, i)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("%d of the %d answered batches are missing after the power cut: %v", len(missing), k, missing)
	}
}

// A checkpoint starts a segment that holds none of the batches before it,
// so Badger must hold them durably without its memtable logs: in tables.
// A power cut just after a checkpoint, before Badger filled a memtable,
// leaves the log empty and Badger with what the checkpoint flushed.
func TestACheckpointLeavesEveryBatchInBadgersTables(t *testing.T) {
	dir, snap := t.TempDir(), t.TempDir()
	opts := &Options{MinFreeBytes: -1}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		putCounter(t, s, i)
	}
	if err := s.syncBadger(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(string) bool { return true })
	crash(s)
	openWant(t, snap, opts, 20, "after a power cut just after a checkpoint")
}

// An operator puts another ledger's log files into a ledger's directory
// (a mixed-up copy or restore of two data directories). The records carry
// nothing of the ledger they belong to, so Open replays the other
// ledger's batches into this one.
func TestAnotherLedgersLogIsNotReplayed(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	a, b, bsnap := t.TempDir(), t.TempDir(), t.TempDir()
	sa, err := Open(a, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		putCounter(t, sa, i)
	}
	want := contents(t, sa)
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}

	sb, err := Open(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		err := sb.Update(context.Background(), func(tx ledger.Txn) error {
			return tx.Set(fmt.Appendf(nil, "other\x00%d", i), []byte("not ledger a's"))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	copyDir(t, b, bsnap, isWAL) // b's log, as a crash leaves it
	sb.Close()

	for _, n := range walNames {
		os.Remove(filepath.Join(a, n))
	}
	copyDir(t, bsnap, a, isWAL)
	sa, err = Open(a, opts)
	if err != nil {
		return // refusing a log that is not this ledger's is a right answer
	}
	defer sa.Close()
	if diff := cmp.Diff(want, contents(t, sa)); diff != "" {
		t.Fatalf("ledger a after open with ledger b's log (-want +got):\n%s", diff)
	}
}

// A power cut during Restore, after Badger's pages of the loaded stream
// reached the disk and before Restore put this store's applied sequence
// number back: the stream carries the source's applied key (Backup copies
// the reserved key like any other), so Badger now claims to hold only the
// source's batches, fewer than the log's checkpoint, and the ledger no
// longer opens at all. (The source's key wins when its Badger version is
// the higher, as on any ledger that was itself restored or replayed.)
func TestALedgerOpensAfterAPowerCutDuringRestore(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	src, dst, snap := t.TempDir(), t.TempDir(), t.TempDir()
	// The source was itself restored once from a busier ledger: Badger's
	// versions there run well ahead of its own sequence numbers.
	busy, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		putCounter(t, busy, i)
	}
	var busyBackup bytes.Buffer
	if err := busy.Backup(&busyBackup); err != nil {
		t.Fatal(err)
	}
	busy.Close()
	ss, err := Open(src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := ss.Restore(&busyBackup); err != nil {
		t.Fatal(err)
	}
	err = ss.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("src\x00only"), []byte("restored")) })
	if err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if err := ss.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	ss.Close()

	ds, err := Open(dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		putCounter(t, ds, i)
	}
	if err := ds.Close(); err != nil { // a checkpoint at 10
		t.Fatal(err)
	}
	if ds, err = Open(dst, opts); err != nil {
		t.Fatal(err)
	}
	// Restore's first step, then the power cut: Badger's pages on disk.
	if err := ds.db.Load(bytes.NewReader(backup.Bytes()), 256); err != nil {
		t.Fatal(err)
	}
	if err := ds.logs.sync(); err != nil {
		t.Fatal(err)
	}
	copyDir(t, dst, snap, func(string) bool { return true })
	crash(ds)

	ds, err = Open(snap, opts)
	if err != nil {
		t.Fatalf("the ledger does not open after a power cut during Restore: %v", err)
	}
	defer ds.Close()
	// The restore may have landed or not, so only this ledger's own
	// answered records are asked for.
	got := contents(t, ds)
	for k, v := range wantCounters(10) {
		if k[0] == 'r' && got[k] != v {
			t.Errorf("record %q after open: %q, want %q", k, got[k], v)
		}
	}
}

// After a power cut the operator rolls back to a binary from before the
// log (here: the store opened NoSync, which, as an older binary, opens
// Badger alone and neither reads the log nor writes the applied key). It
// serves, writing on top of what Badger held. Then the new binary comes
// back: Badger's applied key is still the one from before the cut, so Open
// replays the old segment over the older binary's later writes, putting
// back stale values (an effect the older binary settled would be pending
// again).
func TestTheLogIsNotReplayedOverAnOlderBinarysLaterWrites(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	snap := badgerBehind(t, opts, 2, 3) // Badger after 2 batches, the log after 5

	old, err := Open(snap, &Options{MinFreeBytes: -1, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	err = old.Update(context.Background(), func(tx ledger.Txn) error {
		return tx.Set([]byte("c\x00n"), []byte("written by the older binary"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s, err := Open(snap, opts)
	if err != nil {
		return // refusing to replay a log that Badger has moved past is a right answer
	}
	defer s.Close()
	if got := contents(t, s)["c\x00n"]; got != "written by the older binary" {
		t.Fatalf("c\\x00n after the new binary's open: %q, want the older binary's later write", got)
	}
}

// The engine committed its next batch while the last one's Sync ran; the
// store no longer defers (Update syncs the log, then commits), so what is
// left of this finding is that readers do not wait for a write's
// fdatasync: a View runs while an Update is inside it.
func TestAReadDoesNotWaitForAWritesSync(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{MinFreeBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var first atomic.Bool
	s.wal.datasync = func(f *os.File) error {
		if !first.Swap(true) { // the write's: held until released
			entered <- struct{}{}
			<-release
		}
		return datasync(f)
	}
	set := func(k string) error {
		return s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte(k), []byte("v")) })
	}
	synced := make(chan error, 1)
	go func() { synced <- set("a") }()
	<-entered // the write is in its fdatasync
	read := make(chan error, 1)
	go func() {
		read <- s.View(context.Background(), func(r ledger.Reader) error { _, err := r.Get([]byte("a")); return err })
	}()
	select {
	case err := <-read:
		if !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("read during the write's sync: %v, want not found (not committed yet)", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("View still waiting for a write's fdatasync after 10s")
	}
	close(release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
}

// The log seals every record under the ledger's master key itself, the
// key Badger uses for its key registry, with a random 96-bit nonce per
// record: one key for two purposes, and past about 2^32 records (days at
// the engine's batch rates) a nonce repeats with a probability beyond
// NIST SP 800-38D's bound for random nonces, which gives away GCM's
// authentication key. A record must not open under the master key and its
// stored nonce: the log's key is to be derived (per ledger and generation),
// with nonces that never repeat under it.
func TestTheLogIsNotSealedUnderTheMasterKeyItself(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	snap := badgerBehind(t, &Options{MinFreeBytes: -1, EncryptionKey: key}, 1, 1)
	name, offs := records(t, snap)
	if len(offs) != 1 {
		t.Fatalf("%d records in the log, want 1", len(offs))
	}
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		t.Fatal(err)
	}
	off := offs[0]
	n := int64(binary.LittleEndian.Uint32(b[off:]))
	hdr, p := b[off:off+walRecHeader], b[off+walRecHeader:off+walRecHeader+n]
	ns := aead.NonceSize()
	if _, err := aead.Open(nil, p[:ns], p[ns:], hdr[8:]); err == nil {
		t.Fatal("a log record opens with AES-GCM under the master key and its random nonce")
	}
	if _, err := aead.Open(nil, walNonce(binary.LittleEndian.Uint64(hdr[16:])), p, hdr[8:]); err == nil {
		t.Fatal("a log record opens with AES-GCM under the master key and its random nonce")
	}
}

// A recycled segment keeps its older records past the new generation's
// tail, values included, and a record's framing is checked only by an
// unkeyed crc and a generation and sequence number anyone can predict.
// Without a key, bytes inside an older value that spell a record of the
// segment's next generation are replayed after a power cut as if they
// were a batch: here one that writes a key no batch wrote.
func TestBytesInARecycledSegmentsOldValueAreNotReplayed(t *testing.T) {
	opts := &Options{MinFreeBytes: -1}
	dir, snap := t.TempDir(), t.TempDir()
	s, err := Open(dir, opts) // generation 1 in ratchet-wal.0, from seq 1
	if err != nil {
		t.Fatal(err)
	}
	// A record of generation 3, seq 3, writing forged=injected.
	rec := newWALRecord()
	rec.set([]byte("forged"), []byte("injected"))
	payload := rec.buf[walRecHeader:]
	forged := make([]byte, walRecHeader, walRecHeader+len(payload))
	binary.LittleEndian.PutUint32(forged, uint32(len(payload)))
	binary.LittleEndian.PutUint64(forged[8:], 3)
	binary.LittleEndian.PutUint64(forged[16:], 3)
	forged = append(forged, payload...)
	crc := crc32.Update(crc32.Checksum(forged[:4], crcTable), crcTable, forged[8:])
	binary.LittleEndian.PutUint32(forged[4:], crc)
	val := append(forged, make([]byte, 200)...) // over 127 bytes: a 2-byte length
	err = s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("x"), val) })
	if err != nil {
		t.Fatal(err)
	}
	// Two checkpoints: generation 2 in ratchet-wal.1, then 3 in
	// ratchet-wal.0 again, from seq 2.
	for range 2 {
		if err := s.syncBadger(); err != nil {
			t.Fatal(err)
		}
	}
	// Batch 2's record (24+5 bytes) ends where the old value's bytes
	// begin: 24 (header) + 1 (op) + 1+1 (key) + 2 (value's length).
	err = s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("y"), []byte("z")) })
	if err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, snap, func(string) bool { return true }) // the power cut
	crash(s)

	s, err = Open(snap, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if v, ok := contents(t, s)["forged"]; ok {
		t.Fatalf("after open the ledger holds forged=%q, which no batch wrote", v)
	}
}

// Once a segment is half full the log checkpoints where Badger began a new
// memtable (wal.rotated), without waiting for the flush of the memtables
// before it. A power cut just after one, in either of two places:
//   - "flushed": after that flush. The batch that began the new memtable
//     is in that memtable alone, so it must be the new segment's first
//     record.
//   - "before the flush": Badger's tables as they were before the
//     rotation, and the log as it is after it. The batches between are
//     in the segment before, which Open must read too.
//
// With and without a key (each generation's records are sealed under its
// own).
func TestARotationCheckpointLosesNoBatchWhereverThePowerIsCut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		flushed bool
		key     []byte
	}{
		{"flushed", true, nil},
		{"before the flush", false, nil},
		{"before the flush, with a key", false, bytes.Repeat([]byte{7}, 32)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, snap := t.TempDir(), t.TempDir()
			opts := &Options{MinFreeBytes: -1, segmentSize: 24 << 20, EncryptionKey: tc.key} // a memtable is 16 MiB
			s, err := Open(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			val := bytes.Repeat([]byte("v"), 512<<10)
			gen := s.wal.hdr.gen
			k, copied := 0, false
			for ; s.wal.hdr.gen == gen; k++ {
				if k > 100 {
					t.Fatal("the log never checkpointed")
				}
				if !tc.flushed && !copied && s.wal.off >= opts.segmentSize/2 {
					// Badger's tables now: none holds the batches of the
					// memtable being filled, the one the rotation ends.
					if err := s.db.FlushImmutableMemTables(); err != nil {
						t.Fatal(err)
					}
					copyDir(t, dir, snap, func(n string) bool { return !isWAL(n) })
					copied = true
				}
				err := s.Update(context.Background(), func(tx ledger.Txn) error {
					return tx.Set(fmt.Appendf(nil, "r\x00%04d", k), val)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if written := int64(k) * int64(len(val)); written > opts.segmentSize-(2<<20) {
				t.Fatalf("the log checkpointed after %d bytes of values, at a full segment, not at a memtable's rotation", written)
			}
			if s.wal.hdr.start != s.seq {
				t.Fatalf("the new segment starts at batch %d, want %d (the one that began the memtable)", s.wal.hdr.start, s.seq)
			}
			if !tc.flushed && !copied {
				t.Fatal("the test took no copy of Badger before the rotation")
			}
			for range 3 { // and some batches after it, in the new segment
				err := s.Update(context.Background(), func(tx ledger.Txn) error {
					return tx.Set(fmt.Appendf(nil, "r\x00%04d", k), val)
				})
				if err != nil {
					t.Fatal(err)
				}
				k++
			}
			if err := s.db.FlushImmutableMemTables(); err != nil { // a consistent copy (see above)
				t.Fatal(err)
			}
			if tc.flushed {
				copyDir(t, dir, snap, func(string) bool { return true })
			} else {
				copyDir(t, dir, snap, isWAL)
			}
			crash(s)

			s, err = Open(snap, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var missing []int
			err = s.View(context.Background(), func(r ledger.Reader) error {
				for i := range k {
					v, err := r.Get(fmt.Appendf(nil, "r\x00%04d", i))
					if err != nil && !errors.Is(err, ledger.ErrNotFound) {
						return err
					}
					if !bytes.Equal(v, val) {
						missing = append(missing, i)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(missing) > 0 {
				t.Fatalf("%d of the %d answered batches are missing after the power cut: %v", len(missing), k, missing)
			}
		})
	}
}

// The segment a rotation checkpoint left holds the batches whose flush it
// did not wait for, so the next checkpoint, which overwrites that segment,
// must wait for that flush first (wal.leave), and for no other.
func TestTheNextCheckpointWaitsForTheRotationsFlush(t *testing.T) {
	opts := &Options{MinFreeBytes: -1, segmentSize: 24 << 20}
	s, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var waited, rotations []uint64
	s.wal.flushed = func(r uint64) error {
		waited = append(waited, r)
		return s.db.FlushedThrough(r)
	}
	val := bytes.Repeat([]byte("v"), 512<<10)
	for k := 0; len(rotations) < 2; k++ {
		if k > 300 {
			t.Fatalf("two rotation checkpoints did not come in %d batches", k)
		}
		gen := s.wal.hdr.gen
		err := s.Update(context.Background(), func(tx ledger.Txn) error {
			return tx.Set(fmt.Appendf(nil, "r\x00%04d", k), val)
		})
		if err != nil {
			t.Fatal(err)
		}
		if s.wal.hdr.gen != gen {
			if s.wal.hdr.start != s.seq {
				t.Fatalf("checkpoint %d was not at a rotation: the segment starts at %d, the batch was %d", len(rotations)+1, s.wal.hdr.start, s.seq)
			}
			rotations = append(rotations, s.db.MemTableRotations())
		}
	}
	if diff := cmp.Diff(rotations[:1], waited); diff != "" {
		t.Errorf("flushes the second rotation checkpoint waited for (-the first rotation's +waited):\n%s", diff)
	}
}

// Value log GC rewrites values through Badger while Updates run (Compact
// does not hold the store's write lock), so a checkpoint's flush of the
// mutable memtable may meet Badger writes that bypass the log. The flush
// must replace the memtable in order with them (the write goroutine does
// it), or a write lands in a memtable already being flushed, and lost, and
// the race detector sees the memtable swapped under the writer.
func TestACheckpointAmongWritesOutsideTheLogLosesNone(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{MinFreeBytes: -1, segmentSize: 256 << 10} // a full checkpoint every few batches
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 16<<10)
	const n = 400
	done := make(chan error, 1)
	go func() { // as value log GC writes
		for i := range n {
			err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(fmt.Appendf(nil, "g\x00%04d", i), val) })
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range n {
		err := s.Update(context.Background(), func(tx ledger.Txn) error {
			return tx.Set(fmt.Appendf(nil, "r\x00%04d", i), val)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, opts); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var missing []string
	err = s.View(context.Background(), func(r ledger.Reader) error {
		for i := range n {
			for _, p := range []string{"g", "r"} {
				k := fmt.Appendf(nil, "%s\x00%04d", p, i)
				if v, err := r.Get(k); err != nil || !bytes.Equal(v, val) {
					missing = append(missing, string(k))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Fatalf("%d writes missing after the reopen: %q", len(missing), missing[:min(5, len(missing))])
	}
}
