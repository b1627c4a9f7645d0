package badgerstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// dirtyPages asks the kernel (cachestat, Linux 6.5+) how many of a file's
// pages in the page cache are dirty or under writeback: written, not yet
// on disk (none for a file that is gone, such as a table a compaction
// replaced). It skips the test where the kernel cannot tell.
func dirtyPages(t *testing.T, name string) uint64 {
	t.Helper()
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rng struct{ off, len uint64 } // len 0: to the end of the file
	var st struct{ cache, dirty, writeback, evicted, recentlyEvicted uint64 }
	_, _, errno := unix.Syscall6(unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&rng)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
	if errno == unix.ENOSYS {
		t.Skip("the kernel has no cachestat: cannot see dirty pages")
	}
	if errno != 0 {
		t.Fatalf("cachestat %s: %v", name, errno)
	}
	return st.dirty + st.writeback
}

// logFiles lists the .mem and .vlog files of dir.
func logFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{"*.mem", "*.vlog"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// TestLogSyncFindsRotatedFiles: between two syncs the current file may be
// rotated away from, more than once, and the file last seen may be gone.
func TestLogSyncFindsRotatedFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(bytes.Repeat([]byte{'x'}, 64<<10)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	write("00001.mem")
	write("000001.vlog")
	s, err := newLogSync(dir)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name   string
		change func()
		newest [2]int
	}{
		{"current files", func() { write("00001.mem"); write("000001.vlog") }, [2]int{1, 1}},
		{"two rotations", func() { write("00001.mem"); write("00002.mem"); write("00003.mem"); write("000002.vlog") }, [2]int{2, 3}},
		{"last seen flushed and deleted, newer ones skipped a number", func() {
			os.Remove(filepath.Join(dir, "00003.mem"))
			write("00005.mem")
			write("000002.vlog")
		}, [2]int{2, 5}},
	}
	for _, st := range steps {
		st.change()
		if err := s.sync(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for _, f := range logFiles(t, dir) {
			if n := dirtyPages(t, f); n > 0 {
				t.Errorf("%s: %s still has %d pages not on disk", st.name, filepath.Base(f), n)
			}
		}
		if s.newest != st.newest {
			t.Errorf("%s: newest %v, want %v", st.name, s.newest, st.newest)
		}
	}
}

// TestSyncLeavesNothingUnwritten drives Badger through value log and
// memtable rotations and asks the kernel, after every Sync, whether any
// page of the store's own log is still waiting for the disk, and after
// every checkpoint (syncBadger), any page of Badger's log files and
// tables (Badger syncs each table it flushes a memtable to, and the
// manifest naming it, itself: the patched Badger writes a table with
// write(2) and fdatasync, where it msynced a mapping). With the store's log on Badger writes no memtable log (Open);
// with NoSync it does, and the same check finds its pages, so it can see
// them.
func TestSyncLeavesNothingUnwritten(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 150 MB")
	}
	unsynced := func(dir string, files []string) []string {
		var out []string
		for _, f := range files {
			if n := dirtyPages(t, f); n > 0 {
				out = append(out, fmt.Sprintf("%s: %d pages", filepath.Base(f), n))
			}
		}
		return out
	}
	put := func(s *Store, batch, n, size int) {
		t.Helper()
		err := s.Update(context.Background(), func(tx ledger.Txn) error {
			for i := range n {
				if err := tx.Set(fmt.Appendf(nil, "k\x00%08d-%06d", batch, i), bytes.Repeat([]byte{byte(i)}, size)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Large values in the value log, as in a ledger written before every
	// value stayed in the tree.
	dir := t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1, valueThreshold: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mems, vlogs := map[string]bool{}, map[string]bool{}
	note := func() {
		for _, f := range logFiles(t, dir) {
			if strings.HasSuffix(f, ".mem") {
				mems[f] = true
			} else {
				vlogs[f] = true
			}
		}
	}
	// Large values go to the value log (64 MiB files), small ones stay in
	// the memtable (32 MiB): both rotate.
	for b := range 100 {
		if b%2 == 0 {
			put(s, b, 4, 400<<10)
		} else {
			put(s, b, 4000, 300)
		}
		note()
		wals, _ := filepath.Glob(filepath.Join(dir, "ratchet-wal.*"))
		if left := unsynced(dir, wals); len(left) > 0 {
			t.Fatalf("after Update %d, not on disk: %v", b, left)
		}
		if err := s.syncBadger(); err != nil {
			t.Fatal(err)
		}
		// The tables Badger lists (in its manifest); a compaction's table
		// not yet listed may still be being written.
		var tables []string
		for _, ti := range s.db.Tables() {
			tables = append(tables, filepath.Join(dir, fmt.Sprintf("%06d.sst", ti.ID)))
		}
		if left := unsynced(dir, append(logFiles(t, dir), tables...)); len(left) > 0 {
			t.Fatalf("after Update %d and a checkpoint, not on disk: %v", b, left)
		}
	}
	if len(mems) > 0 || len(vlogs) < 2 {
		t.Fatalf("want no memtable log and the value log rotated: %d .mem and %d .vlog files seen", len(mems), len(vlogs))
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "*.sst")); len(n) < 2 {
		t.Fatalf("the test flushed %d memtables to tables, want 2 or more", len(n))
	}

	// The control: the same check sees what an unsynced commit leaves.
	ndir := t.TempDir()
	ns, err := Open(ndir, &Options{MinFreeBytes: -1, NoSync: true, valueThreshold: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	put(ns, 0, 4, 400<<10)
	if len(unsynced(ndir, logFiles(t, ndir))) == 0 {
		t.Fatal("an unsynced commit left no dirty pages: the check sees nothing")
	}
}

// TestValuesAreDurableBeforeTheirPointers: a memtable holds pointers
// into the value log, so when a checkpoint flushes the memtables to tables
// (the store's log is dropped after it), no page of any value log file may
// still be waiting for the disk; else a power cut after the checkpoint
// leaves entries whose values are gone.
func TestValuesAreDurableBeforeTheirPointers(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1, valueThreshold: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	flushes := 0
	s.wal.flush = func(mutable bool) error {
		flushes++
		for _, f := range logFiles(t, dir) {
			if n := dirtyPages(t, f); strings.HasSuffix(f, ".vlog") && n > 0 {
				t.Errorf("the memtables were flushed while %s had %d pages not on disk", filepath.Base(f), n)
			}
		}
		return flushMemTables(s.db, mutable)
	}
	val := bytes.Repeat([]byte{'v'}, 8<<10) // over the threshold: in the value log
	for i := range 50 {
		err := s.Update(context.Background(), func(tx ledger.Txn) error {
			for j := range 8 {
				if err := tx.Set(fmt.Appendf(nil, "e\x00%03d-%d", i, j), val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.syncBadger(); err != nil {
			t.Fatal(err)
		}
	}
	if flushes < 50 {
		t.Fatalf("only %d flushes of the memtables seen", flushes)
	}
}

// TestRecordsStayInTheTree: with the store's defaults even a value far
// larger than any effect record is kept in the LSM tree, so a commit
// writes nothing to the value log beyond its header (one page); with a low
// threshold the same values dirty value log pages. (Unsynced stores, so
// that what was written stays dirty and countable.)
func TestRecordsStayInTheTree(t *testing.T) {
	written := func(threshold int64) uint64 {
		t.Helper()
		dir := t.TempDir()
		s, err := Open(dir, &Options{MinFreeBytes: -1, NoSync: true, valueThreshold: threshold})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		val := bytes.Repeat([]byte{'r'}, 256<<10)
		for i := range 8 {
			if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set(fmt.Appendf(nil, "e\x00%d", i), val) }); err != nil {
				t.Fatal(err)
			}
		}
		vlogs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
		if err != nil || len(vlogs) == 0 {
			t.Fatalf("no value log file: %v", err)
		}
		var pages uint64
		for _, f := range vlogs {
			pages += dirtyPages(t, f)
		}
		return pages
	}
	if n := written(0); n > 1 {
		t.Errorf("the value log has %d pages written: records left the tree", n)
	}
	if n := written(512); n < 8*(256<<10)/4096 {
		t.Errorf("with a low threshold only %d value log pages were written: the check cannot see values there", n)
	}
}

func TestLogNumber(t *testing.T) {
	for name, want := range map[string]int{"00012.mem": 12, "000007.vlog": 7, "00012.sst": -1, "x.mem": -1, "MANIFEST": -1} {
		got := -1
		for k := range logKinds {
			if n, ok := logNumber(name, k); ok {
				got = n
			}
		}
		if got != want {
			t.Errorf("logNumber(%q) = %d, want %d", name, got, want)
		}
	}
}

// TestCompactSyncsBeforeDeleting: value log GC copies live values into the
// current file and deletes the old one; Compact returns with the copies on
// disk and the old file gone.
func TestCompactSyncsBeforeDeleting(t *testing.T) {
	if testing.Short() {
		t.Skip("writes about 100 MB")
	}
	dir := t.TempDir()
	s, err := Open(dir, &Options{MinFreeBytes: -1, valueThreshold: 512})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte{'v'}, 1<<20)
	for i := range 80 { // more than one 64 MiB value log file
		if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set(fmt.Appendf(nil, "k%03d", i), val) }); err != nil {
			t.Fatal(err)
		}
	}
	// Keep one value of the first file; delete the rest of it. Closing
	// flushes each step to its own table, so that compacting them together
	// tells Badger which values are garbage.
	reopen := func() {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if s, err = Open(dir, &Options{MinFreeBytes: -1, valueThreshold: 512}); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	for i := 1; i < 60; i++ {
		if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Delete(fmt.Appendf(nil, "k%03d", i)) }); err != nil {
			t.Fatal(err)
		}
	}
	reopen()
	// More level 0 tables than Badger keeps before it compacts them.
	for i := range 18 { // NumLevelZeroTables is 16
		if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set(fmt.Appendf(nil, "f%d", i), nil) }); err != nil {
			t.Fatal(err)
		}
		reopen()
	}
	defer func() { s.Close() }()
	if err := s.db.Flatten(1); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(dir, "000001.vlog")
	if _, err := os.Stat(first); err != nil {
		t.Fatalf("the first value log file is not there to reclaim: %v", err)
	}
	// Watch for the delete and look, as soon as it happens, at the file
	// the values were copied into.
	watch, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(watch)
	if _, err := unix.InotifyAddWatch(watch, dir, unix.IN_DELETE); err != nil {
		t.Fatal(err)
	}
	current := logFiles(t, dir)
	target := current[len(current)-1] // the newest value log file
	atDelete := make(chan uint64, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := unix.Read(watch, buf)
			if err != nil || n <= 0 {
				return
			}
			if bytes.Contains(buf[:n], []byte("000001.vlog")) {
				atDelete <- dirtyPages(t, target)
				return
			}
		}
	}()
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-atDelete:
		if n > 0 {
			t.Errorf("the old value log file was deleted while %d pages of the copies were not on disk", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no delete of the old value log file was seen")
	}
	if _, err := os.Stat(first); !os.IsNotExist(err) {
		t.Fatalf("Compact did not reclaim the first value log file: %v", err)
	}
	for _, f := range logFiles(t, dir) {
		if n := dirtyPages(t, f); n > 0 {
			t.Errorf("%s has %d pages not on disk after Compact", filepath.Base(f), n)
		}
	}
	wantValue(t, s, "k000", val) // the value GC moved
}
