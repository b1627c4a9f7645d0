package badgerstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// logSync makes everything Badger has committed durable, with Badger's own
// SyncWrites off. Badger appends every commit to two kinds of log file in
// the directory, each numbered upwards by one as it rotates: the value log
// (NNNNNN.vlog), which holds values over the threshold, and the memtable's
// write-ahead log (NNNNN.mem), which holds the keys, the smaller values
// and, for the others, pointers into the value log. The store keeps every
// value it writes in the tree (see Open), so only a ledger written before
// that has values in the value log; and with the store's log on Badger
// writes no memtable log (WithMemTableLog(false): a checkpoint flushes the
// memtables to tables instead, see wal.checkpoint), so a memtable log is
// one an older binary left, replayed and synced at open, deleted once
// flushed: a commit writes to the value log alone (its header, with the
// store's defaults). Both kinds are written through shared memory maps,
// so an fdatasync of the file through any descriptor writes what was
// committed through the map.
//
// Order matters where the value log is written: a pointer on disk whose
// value is not would survive a power cut as an entry that cannot be read
// (Badger replays the memtable's log, and cuts the value log at its last
// whole entry). So sync makes the value log durable first and only then
// the memtable's log, as Badger does with SyncWrites on, and a new value
// log file's name (the directory) before the memtable's log too. The
// fdatasyncs therefore follow each other instead of running side by side,
// as they did until a test asking the kernel for unwritten pages showed
// the hole (while records still went to the value log, that cost a tenth
// to a fifth of the pairs/s at 1 and 16 callers). An fdatasync of a value
// log file nothing was written to costs next to nothing. For values in
// the value log one window remained that only Badger could close: it
// flushes a full memtable to a table (synced, with its pointers) in the
// background, and if that finished before the next sync of the value log
// a power cut in between would leave pointers to values that are gone.
// With the store's log the window is closed: the value log is synced at
// every checkpoint, before the memtables are flushed, and every batch
// since is a record of the log, replayed over whatever Badger kept at
// newer versions.
//
// With SyncWrites off, Badger syncs neither a file it rotates away from nor
// (see Store.Compact) a value log file before value log GC deletes the one
// it rewrote. So sync does not trust "the current file": it fdatasyncs,
// for each kind, the newest file seen by the previous sync and every file
// numbered after it, and the directory when new files of the kind
// appeared. A file that is gone is skipped: a memtable's log goes only
// after Badger has synced the table it was flushed to and the manifest,
// and a value log file only after Compact has synced the copies of its
// values.
//
// Each sync opens the files afresh. That is safe for errors: the kernel
// reports a writeback error nobody has seen yet to the first fsync of a
// descriptor opened after it (Linux 4.16 and later), and nothing else
// syncs these files while the store is open.
type logSync struct {
	dir      string
	syncFile func(name string) error // fdatasync; tests watch the order

	mu     sync.Mutex
	newest [2]int // per kind, the newest file the last sync saw
}

// logKinds are Badger's two log file kinds, in the order they are synced:
// extension and name width.
var logKinds = [2]struct {
	ext   string
	width int
}{{".vlog", 6}, {".mem", 5}}

// newLogSync syncs every log file in dir, once Badger has opened it (Badger
// writes to some while opening), and notes the newest of each kind.
func newLogSync(dir string) (*logSync, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing ledger directory: %w", err)
	}
	s := &logSync{dir: dir, syncFile: fdatasync}
	for k := range logKinds {
		for _, ent := range ents {
			n, ok := logNumber(ent.Name(), k)
			if !ok {
				continue
			}
			err := s.syncFile(filepath.Join(dir, ent.Name()))
			if err != nil && !errors.Is(err, fs.ErrNotExist) { // a memtable flushed meanwhile
				return nil, err
			}
			s.newest[k] = max(s.newest[k], n)
		}
	}
	return s, syncDir(dir)
}

// sync makes every log write committed before the call durable, the value
// log before the memtable's log. Calls are serialised: a sync that waits
// for another still syncs afterwards, since the earlier one may have begun
// before its caller's commit.
func (s *logSync) sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range logKinds {
		n, err := s.syncKind(k)
		if err != nil {
			return err
		}
		if n > s.newest[k] {
			// New files: their names must be durable too, a new value
			// log file's before any pointer into it.
			if err := syncDir(s.dir); err != nil {
				return err
			}
			s.newest[k] = n
		}
	}
	return nil
}

func (s *logSync) syncKind(k int) (int, error) {
	n := s.newest[k]
	err := s.syncFile(s.logName(k, n))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if err == nil {
		if _, serr := os.Stat(s.logName(k, n+1)); errors.Is(serr, fs.ErrNotExist) {
			return n, nil
		}
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("listing ledger directory: %w", err)
	}
	newest := n
	for _, ent := range ents {
		m, ok := logNumber(ent.Name(), k)
		if !ok || m <= n {
			continue
		}
		if err := s.syncFile(s.logName(k, m)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		newest = max(newest, m)
	}
	return newest, nil
}

func (s *logSync) logName(k, n int) string {
	return filepath.Join(s.dir, fmt.Sprintf("%0*d%s", logKinds[k].width, n, logKinds[k].ext))
}

// logNumber parses the number of a log file of kind k.
func logNumber(name string, k int) (int, bool) {
	base, ok := strings.CutSuffix(name, logKinds[k].ext)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(base)
	return n, err == nil
}

// fsyncPath fsyncs a file or directory by name with the platform's full
// fsync (os.File.Sync: fsync(2), F_FULLFSYNC on darwin, FlushFileBuffers
// on Windows).
//
// The platform files (sync_*.go) give fdatasync, which syncs a log file,
// and syncDir, which makes the names in a directory durable.
func fsyncPath(name string) error { return syncFile(name, os.O_RDONLY, (*os.File).Sync) }

// syncFile opens name with flag, syncs it with sync and closes it: the one
// shape of every sync by name here, the platform files choosing the call.
func syncFile(name string, flag int, sync func(*os.File) error) error {
	f, err := os.OpenFile(name, flag, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := sync(f); err != nil {
		return fmt.Errorf("syncing %s: %w", name, err)
	}
	return nil
}
