// Package badgerstore is Ratchet's embedded ledger storage: a ledger.Store on
// Badger v4 in a local directory.
//
// Durability: the store keeps a log of its own (wal.go), and Badger runs
// unsynced (SyncWrites off). Log first, commit after, with no overlap:
// Update runs fn in a Badger read-write transaction, not yet committed,
// recording every Set and Delete in order; it appends that record to the
// current segment of the log and fdatasyncs that file alone, and only then
// commits the transaction to Badger (unsynced), with, in the same
// transaction, the batch's sequence number under a reserved key
// (appliedKey). Segments are zero-filled ahead of the records and reused,
// so the fdatasync overwrites allocated blocks and needs no journal
// commit, where a sync of Badger's sparse, growing memtable log needs one
// each time. With the log on, Badger keeps no memtable logs at all (the
// patched Badger in third_party, WithMemTableLog(false)): a commit goes to
// its memtable's skiplist, and is in Badger's files once Badger flushes
// that memtable to a level 0 table. Writing each commit a second time,
// through a fresh memory map whose every page faulted in, was a tenth of
// an engine pair's CPU (docs/design.md, "Badger without its memtable
// logs"). The engine calls Update per batch and answers it when Update
// returns, so its writer waits for each fdatasync (the overlap of commit
// and sync that Badger's own log allowed is gone; docs/design.md has the
// cost). Badger's own conflict detection
// is off: the engine serialises every write through a single writer
// goroutine (group commit), and one Badger transaction carries a whole
// batch of decisions.
//
// The rule a change must keep: Badger never holds a batch the log lacks.
// Everything that writes Badger outside Update (Restore's load; value log
// GC, which rewrites values at their versions) checkpoints around it, so
// the log never begins before such a write.
//
// A checkpoint writes the applied key (the last batch) at Badger's newest
// version, makes Badger's files durable (logSync: the value log, and any
// memtable log an older binary left; then every memtable flushed to a
// table, FlushMemTables; then the directory), and starts the other
// segment with the next generation, its header naming the first sequence
// number it will hold, the ledger's id and a new random salt. It runs when
// a segment is full (before the record that does not fit), on Open, on
// Close (so a clean shutdown leaves Badger complete without the log), and
// around writes that bypass the log (Restore, value log GC). Once a
// segment is half full, a rotation checkpoint comes first: when a batch's
// commit made Badger begin a new memtable (MemTableRotations), that
// memtable holds the batch alone, so the log starts the other segment at
// that batch, its record the first (wal.rotated), and notes the rotation:
// the batches before it are in the memtables Badger has begun to flush,
// and in the segment just left, which the next checkpoint overwrites only
// once that flush is in a table (FlushedThrough, at once by then). It
// makes no table Badger would not have made and holds no write; a
// checkpoint at a full segment flushes a memtable only begun.
//
// Recovery. Open opens Badger, which holds the memtables flushed to tables
// before the crash (and replays a memtable log an older binary left): a
// transaction-atomic state, not always a prefix of the commits (an older
// binary's two memtable logs could lose the older one's tail and keep the
// newer one's pages). It reads the
// current segment's records from its first, s, to the first that fails
// its length, crc32c (over the segment's salt and the record), generation
// or sequence (a torn tail, or a reused segment's older bytes, which
// cannot carry the new salt): the last good one is L. At the checkpoint
// that began the segment Badger was durable up to s-1 (after a rotation
// checkpoint, once its flush finished; before that, Badger is behind s-1,
// and Open reads the segment before too, of the generation before, which
// begins where Badger is durable and reaches s-1), and every batch
// committed to Badger since is one of the records s..L, since each was
// synced before its commit. Open applies every record from s to L in
// order, each in its own transaction with its sequence number, whatever
// Badger holds: each record sets (or deletes) its keys as they were after
// its batch, so the result is exactly the state after L, however much of
// the batches since s Badger kept. Every answered batch is a record up to
// L; a record after the last answered one (its commit, or answer, cut off)
// is a whole batch nobody was told of, and applying it is as if the answer
// was lost. Then it checkpoints. A sequence number is never reused within
// a generation, and each open starts a generation.
//
// A commit to Badger that fails after its record was synced leaves the log
// holding a batch Badger lacks: the store fails (fail-stop), refusing every
// later write until it is reopened, and the reopen replays the record.
// After a failed write or sync of the log, or a failed checkpoint, the
// same: the record may or may not be on disk. Such failures wrap
// ledger.ErrStoreFailed, and the engine stops taking writes until restart.
// Doing the sync here rather than with Badger's SyncWrites also means a
// failed sync is seen (Badger only logs a failed value log sync). NoSync
// and InMemory stores keep no log.
//
// Open refuses, with an error saying what to do: a log whose header names
// another ledger (the id, random, is stored in Badger under idKey at the
// first open; a directory from before the log gets one then); Badger
// behind the log's checkpoint where the segment before cannot carry it
// there; and a replay over writes that bypassed the log. The last is found
// cheaply: the applied key is written by every batch and every full
// checkpoint, so it is Badger's newest version unless
// something committed to Badger without the log after the last batch, and
// when records are to be replayed and Badger's MaxVersion is past the
// applied key's, open stops rather than put the log's older values over
// those writes.
//
// Downgrade: a binary from before the log ignores its files and the
// store's keys (its scans would show them). After a clean Close Badger
// holds everything and a downgrade is safe. After a crash, batches only
// the log holds are missing to it: open and Close the ledger with this
// binary first. If an older binary did write after a crash, this binary
// refuses to replay (above).
//
// Backup and Restore leave the store's own keys (appliedKey, idKey) out of
// the stream: Backup does not write them, and Restore drops them from
// streams that have them. They describe a directory, not the ledger.
//
// Encryption at rest: with Options.EncryptionKey Badger's files are
// encrypted (AES), and the log's records are sealed with AES-GCM under a
// key derived for each generation (HKDF-SHA256 of the master key, with the
// generation's salt, the ledger's id and the generation), the record's
// sequence number as the nonce (never repeated under a key) and the
// generation and sequence number as associated data.
//
// Badger allows one process per directory. A second Open of a directory in
// use fails at once with ErrLocked rather than waiting.
//
// Disk trouble: Badger writes through memory-mapped, sparse files, so on a
// full disk a write may fault (SIGBUS) instead of returning an error, and it
// needs room to flush and compact. The store therefore checks the filesystem before every write: below
// Options.MinFreeBytes free, or on a read-only filesystem, Update refuses
// with ErrDiskFull without touching Badger, and succeeds again once space
// is back. The engine answers such refusals as unavailable and readiness
// probes turn red.
//
// Platforms: the syscalls live in platform files, as bbolt keeps them, with
// a portable fallback: sync_*.go (fdatasync on Linux, F_FULLFSYNC on
// macOS, FlushFileBuffers and no directory sync on Windows) and disk_*.go
// (statfs on Linux and macOS, GetDiskFreeSpaceEx on Windows; elsewhere the
// floor is not checked). A change keeps every platform building: `make
// cross` builds and vets for macOS and Windows.
package badgerstore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// ErrLocked means another process has the data directory open.
var ErrLocked = errors.New("data directory is locked by another process")

// ErrDiskFull means the data directory's filesystem is full (below the
// configured floor) or read-only; nothing was written.
var ErrDiskFull = errors.New("the ledger's disk is full or read-only")

// Options tunes Open. The zero value is valid.
type Options struct {
	// EncryptionKey, when set (16, 24 or 32 bytes), turns on Badger's
	// encryption at rest (AES), and seals the store's own log with keys
	// derived from it (AES-GCM). A directory written with a key can only be opened with
	// the same key.
	EncryptionKey []byte
	// Logger receives Badger's own warnings and errors; nil discards them.
	Logger *slog.Logger
	// InMemory keeps everything in memory (benchmarks of the engine alone);
	// nothing is durable.
	InMemory bool
	// MinFreeBytes is the free space below which writes are refused; zero
	// means 64 MiB, negative turns the check off.
	MinFreeBytes int64
	// NoSync makes Sync do nothing. Only the benchmarks use it, for a
	// labelled comparison; Ratchet itself always syncs.
	NoSync bool

	valueThreshold int64         // tests put values in the value log with a lower one
	blockSize      int           // tests write Badger's 4 KiB blocks, as ledgers from before 16 KiB have
	idleAfter      time.Duration // tests stop the compactors sooner (zero: idleAfter)
	segmentSize    int64         // tests fill the log's segments sooner (zero: walSegment)
}

// Store is a ledger.Store on Badger.
type Store struct {
	db      *badger.DB
	dir     string
	minFree int64
	logs    *logSync // nil when nothing is synced (NoSync, InMemory)
	wal     *wal     // nil with logs
	comp    *compactors

	wmu sync.Mutex // one Update, checkpoint or Restore at a time: the log's order
	seq uint64     // the last batch's sequence number (logged)
	// rec collects each Update's writes in turn (under wmu), its buffer
	// kept for the next: a new one per batch grew by doubling to the
	// batch's size, a fifth of the bytes an engine pair allocated.
	rec  walRecord
	ents entrySlab // makes each Update's entries in turn, its chunks kept for the next (under wmu)
	// next is the next Update's transaction when PrepareUpdate began it
	// (under wmu; nil when none is ready).
	next *badger.Txn
}

// keptRecord is the most of a batch record's buffer an Update keeps for
// the next (the log's own write buffer keeps as much again): a rare large
// batch does not leave its buffer held by an idle store.
const keptRecord = 1 << 20

// The store, and the optional powers the engine finds by assertion.
var (
	_ ledger.Store     = (*Store)(nil)
	_ ledger.Exclusive = (*Store)(nil)
	_ ledger.Compactor = (*Store)(nil)
	_ ledger.Preparer  = (*Store)(nil)
	_ ledger.Txn       = (*txnAdapter)(nil)
)

// Open opens or creates the ledger in dir.
func Open(dir string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	// Memory is bounded for a sidecar: two memtables of 16 MiB instead of
	// five of 64, three compactors instead of four (each builds tables in
	// memory), and 8 MiB of block cache and 8 MiB of index cache instead
	// of Badger's 256 MiB and unbounded defaults (measured: a million
	// effects took the server past 600 MiB with the defaults). Ratchet's
	// load writes new keys and bloom filters answer most reads, so the
	// caches were mostly memory: a million-effect ledger under MCP load
	// held 176 MiB resident with 64 and 32 MiB and 139-142 with 16 and 8,
	// where the block cache's decompressed blocks were the largest part of
	// the Go heap after the memtable's arena (12-20 MiB of 43-51 in heap
	// profiles). Blocks are 16 KiB, not Badger's 4: each table's index (a
	// key and an offset per block, and its bloom filter) is read when the
	// table opens and stays mapped, so resident, while it is open, and
	// Linux maps a file 64 KiB around each page read. With 4 KiB blocks a
	// million effects' 287 tables held 61 MiB of file-backed pages; with
	// 16 KiB, 263 tables held 28 MiB (their indexes 10 MiB in all instead
	// of 18), and the ledger took 7% less disk. A read that gets past the
	// bloom filter and the block cache decompresses 16 KiB instead of 4.
	// With 16 KiB blocks and an 8 MiB block cache that ledger held
	// 112-123 MiB under MCP load, the engine on it 81-164% of its pairs/s
	// on an empty ledger (make bench, "Scale"). While a compaction runs,
	// its table builders still take hundreds of MiB (see the table size
	// below; issue 31 in docs/design.md).
	//
	// The memtable is where a fresh sidecar's memory peaks: its first flush
	// builds a table from the full memtable while the next one fills, each
	// an arena of the memtable's size (mapped outside the Go heap on Linux,
	// third_party/README.md; with the store's log on, Badger keeps no
	// memtable log files). Before those patches each also had a log file
	// mapped at twice its size: with 32 MiB memtables a "ratchet serve" peaked at 228-311 MiB
	// resident at its first flush (13,000-16,000 effects); with 16 MiB,
	// at 140-146 MiB (about 7,800 effects), under the 192 MiB a sidecar is
	// budgeted (issue 32; make bench, "Memory at the first memtable
	// flush").
	//
	// Every value Ratchet writes stays in the LSM tree (the threshold is
	// Badger's largest, 1 MiB; a record is at most a few hundred KiB, since
	// payloads and results are capped at 64 KiB), so a commit writes one
	// log file, the memtable's, and a sync is one fdatasync with no order
	// to keep against the value log: measured, 1.2-1.6x the pairs/s of
	// records in the value log (1.4-1.6x at one caller). Large values in
	// the tree make compaction rewrite them level by level; with Badger's
	// level sizes (10 MiB base) a million effects left compaction far
	// enough behind that the engine ran at 76-79% of its empty-ledger
	// figure. A 256 MiB base level and more level 0 tables before a stall
	// keep a million effects within two levels: 100-108% of the empty
	// figure then (2026-11-30). Each level 0 compaction rewrote the whole
	// base level (every level 0 table spans the key range; since badger's
	// sixth patch it leaves in place the base tables none of its keys fall
	// in, third_party/README.md), so 16 level 0 tables before a compaction (stall at 48), not 8 (24), halve
	// how often it is: on make bench's scale section (each side over 32
	// memtables, its compactions in its own time) 79-81% of the empty
	// figure against 69-72% in alternating rounds, 6.9 KiB written and
	// 132-174 µs of CPU a loaded pair against 9.4-10.0 KiB and 201-216 µs;
	// a read checks up to 16 level 0 tables, and opening took about the
	// same (docs/design.md, "The scale section over level 0 cycles").
	//
	// Tables are 2 MiB: a compaction builds each table it writes in
	// memory, with a compressed copy, and lets 8 and more wait to be written
	// at once, so its memory grows with the table size. With 8 MiB tables a
	// million-effect ledger opened just after being written (a restart)
	// compacted its way to 0.9-1 GiB of RSS, Go heap nearly all Badger's
	// table builders, even with GOMEMLIMIT at 400 MiB: the Kubernetes
	// manifest's 512 MiB limit would have killed it. With 2 MiB tables the
	// same runs peaked at 100-370 MiB (make bench reports the peak). Under
	// load, a level 0 compaction into the 256 MiB base level still takes
	// the process to 850-870 MiB resident: 340-410 MiB anonymous (the
	// builders of its splits at once) and about 520 MiB of the tables it
	// reads and writes, mapped and clean, which a 512 MiB memory cgroup
	// reclaims without killing it (1 MiB tables, two compactors or no
	// compression did not lower it; docs/design.md, "What a level 0
	// compaction holds under load"). A
	// ledger written before keeps its older values in the value log, still
	// read, synced (value log first, see logSync) and reclaimed by value log
	// GC (Compact). Value log files are 64 MiB instead of 1 GiB: smaller
	// files let value log GC reclaim sooner.
	bo := badger.DefaultOptions(dir).
		WithSyncWrites(false). // Store.Sync does it: see logSync
		WithDetectConflicts(false).
		WithLogger(badgerLogger{opts.Logger}).
		WithNumVersionsToKeep(1).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithNumCompactors(3).
		WithBlockSize(cmp.Or(opts.blockSize, 16<<10)).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(8 << 20).
		WithValueThreshold(cmp.Or(opts.valueThreshold, 1<<20)).
		WithValueLogFileSize(64 << 20).
		WithBaseLevelSize(256 << 20).
		WithBaseTableSize(2 << 20).
		WithNumLevelZeroTables(16).
		WithNumLevelZeroTablesStall(48).
		WithInMemory(opts.InMemory).
		WithMemTableLog(opts.NoSync). // the store's log covers every commit (see checkpoint)
		// Badger's expvar counters (gets, bloom filter hits per level,
		// puts): nothing reads them, and each read of a key the ledger
		// does not hold yet updated several under a lock, 0.9% of an
		// engine pair's CPU (docs/design.md, "Tables written, not mapped").
		WithMetricsEnabled(false)
	if opts.InMemory {
		// There is no value log in memory: Badger refuses a value over the
		// threshold (and its error path panics on values under 1 KiB), so
		// every value stays in the tree, as Badger's default allows.
		bo.Dir, bo.ValueDir = "", ""
		bo = bo.WithValueThreshold(badger.DefaultOptions("").ValueThreshold)
	}
	if len(opts.EncryptionKey) > 0 {
		bo = bo.WithEncryptionKey(opts.EncryptionKey)
	}
	db, err := badger.Open(bo)
	if err != nil {
		if strings.Contains(err.Error(), "Cannot acquire directory lock") {
			return nil, fmt.Errorf("opening ledger in %s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("opening ledger in %s: %w", dir, err)
	}
	st := &Store{db: db, dir: dir, minFree: opts.MinFreeBytes, comp: newCompactors(db, cmp.Or(opts.idleAfter, idleAfter))}
	if !opts.NoSync && !opts.InMemory {
		if st.logs, err = newLogSync(dir); err == nil {
			st.wal, st.seq, err = openWAL(dir, opts.EncryptionKey, cmp.Or(opts.segmentSize, walSegment), db, st.logs)
		}
		if err != nil {
			st.comp.close()
			db.Close()
			return nil, err
		}
	}
	if st.minFree == 0 {
		st.minFree = 64 << 20
	}
	if opts.InMemory {
		st.minFree = -1
	}
	return st, nil
}

// Update implements ledger.Store. With the log: fn runs in a Badger
// transaction, its writes are recorded, the record is appended to the log
// and fdatasynced, and only then is the transaction committed (unsynced),
// so Badger never holds a batch the log lacks. A commit that fails after
// the record is durable fails the store (every later write refused until
// it is reopened, which replays the record). Badger never waits on
// anything but the local disk, so ctx is checked only before the
// transaction starts.
func (s *Store) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger update: %w", err)
	}
	if err := s.checkDisk(); err != nil {
		return err
	}
	s.comp.wake()
	if s.wal == nil {
		return s.db.Update(func(txn *badger.Txn) error { return fn(txnAdapter{txn: txn, ents: &entrySlab{}}) })
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.wal.err(); err != nil {
		return err
	}
	txn := s.next
	s.next = nil
	if txn == nil {
		txn = s.db.NewTransaction(true)
	}
	defer s.ents.reset() // runs after the Discard: Badger is done with the entries
	defer txn.Discard()
	seq, rec := s.seq+1, s.nextRecord()
	err := fn(txnAdapter{txn: txn, rec: rec, ents: &s.ents})
	if err != nil {
		return err
	}
	if rec.empty() {
		// Nothing to make durable or to commit: every batch before it was
		// durable when its Update returned. No record either: a binary
		// before 6423ff9 stops reading the log at a record with an empty
		// payload (as at the zeros after the last one), so after a power
		// cut and a downgrade it would lose every batch answered after it.
		return nil
	}
	if err := txn.Set(appliedKey, appliedValue(seq)); err != nil {
		return err
	}
	if err := s.wal.append(seq, s.seq, rec); err != nil {
		return err
	}
	s.seq = seq // used in the log even if the commit fails
	rotations := s.db.MemTableRotations()
	if err := txn.Commit(); err != nil {
		return s.wal.fail(fmt.Errorf("committing batch %d to Badger after the log: %w", seq, err))
	}
	if r := s.db.MemTableRotations(); r != rotations {
		return s.wal.rotated(seq, rec, r) // the batch began a memtable
	}
	return nil
}

// MemTables returns how many memtables Badger has begun since the store
// opened (each written to a level 0 table once full, or by a checkpoint):
// with Badger's memtable logs off (see Open) no file in the directory
// counts them, so make bench's scale section asks the store.
func (s *Store) MemTables() uint64 { return s.db.MemTableRotations() }

// PrepareUpdate implements ledger.Preparer: it begins the next Update's
// transaction now. A transaction's read timestamp waits until Badger's
// watermark goroutine has seen the last commit; begun at the next Update,
// after the engine's answers had woken that batch's callers, the goroutine
// waited behind them for a core, 0.14 ms of a 0.69 ms batch at 16 callers
// (docs/design.md, "Where an MCP begin+report pair waits"). Begun before
// the answers, it runs at once. The transaction reads Badger as of the
// last commit, so every write that bypasses Update (a checkpoint's, a
// restore's Load) drops it first (dropNext): nothing else writes Badger's
// keys, and value log GC keeps their versions.
func (s *Store) PrepareUpdate() {
	if s.wal == nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.next == nil && s.wal.err() == nil {
		s.next = s.db.NewTransaction(true)
	}
}

// dropNext discards the transaction begun for the next Update (wmu held),
// before a write that bypasses Update, which it would not see.
func (s *Store) dropNext() {
	if s.next != nil {
		s.next.Discard()
		s.next = nil
	}
}

// nextRecord is the store's record, emptied, for the next Update (wmu
// held); nothing holds the bytes of the one before, which wal.append
// copied into the log's buffer.
func (s *Store) nextRecord() *walRecord {
	if cap(s.rec.buf) > keptRecord || s.rec.buf == nil {
		s.rec = *newWALRecord()
	}
	s.rec.buf = s.rec.buf[:walRecHeader]
	return &s.rec
}

// syncBadger makes Badger's own files durable and starts a new segment of
// the log (a checkpoint): for writes that bypass the log.
func (s *Store) syncBadger() error {
	if s.wal == nil {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.dropNext()
	return s.wal.syncBadger(s.seq)
}

// checkDisk refuses writes on a full or read-only filesystem.
func (s *Store) checkDisk() error {
	if s.minFree < 0 {
		return nil
	}
	free, readOnly, err := diskSpace(s.dir)
	if err != nil {
		return fmt.Errorf("checking the ledger's disk: %w", err)
	}
	if readOnly {
		return fmt.Errorf("%w: %s is read-only", ErrDiskFull, s.dir)
	}
	if free >= 0 && free < s.minFree {
		return fmt.Errorf("%w: %d bytes free in %s, below the floor of %d", ErrDiskFull, free, s.dir, s.minFree)
	}
	return nil
}

// View implements ledger.Store. A read of Badger never waits on anything
// but the local disk; ctx is checked before each Get and between the keys
// of a Scan, so a long listing stops when its request does.
func (s *Store) View(ctx context.Context, fn func(ledger.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ledger read: %w", err)
	}
	return s.db.View(func(txn *badger.Txn) error { return fn(txnAdapter{txn: txn, ctx: ctx}) })
}

// Exclusive implements ledger.Exclusive: Badger allows one process per
// directory, so the engine is the only writer.
func (s *Store) Exclusive() bool { return true }

// Close implements ledger.Store.
func (s *Store) Close() error {
	s.comp.close()
	var err error
	if s.wal != nil {
		err = s.syncBadger()
		s.wal.close()
	}
	return errors.Join(err, s.db.Close())
}

// Backup writes a full backup stream (Badger's own format) to w, without
// the store's own keys (reservedKey): they describe this directory, not
// the ledger.
func (s *Store) Backup(w io.Writer) error {
	stream := s.db.NewStream()
	stream.LogPrefix = "ledger backup"
	stream.ChooseKey = func(item *badger.Item) bool { return !reservedKey(item.Key()) }
	_, err := stream.Backup(w, 0)
	return err
}

// Restore loads a backup stream into the store, which should be empty,
// and syncs it. The store's own keys are dropped from the stream (backups
// from before Backup left them out). Load writes Badger without the log,
// so a checkpoint comes before it (the log then holds nothing Badger may
// lack, and no replay can go over the loaded keys) and after it.
func (s *Store) Restore(r io.Reader) error {
	s.comp.wake()
	if s.wal == nil {
		return s.db.Load(withoutReserved(r), 256)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.dropNext()
	if err := s.wal.syncBadger(s.seq); err != nil {
		return err
	}
	err := s.db.Load(withoutReserved(r), 256)
	return errors.Join(err, s.wal.syncBadger(s.seq)) // even a partial load
}

// txnAdapter is a Badger transaction as a ledger.Txn; ctx, when set (a
// View's), is checked before each read.
type txnAdapter struct {
	txn *badger.Txn
	ctx context.Context
	rec *walRecord // an update's writes, for the log (nil: not logged)
	// ents hands out an update's entries (nil in a View).
	ents *entrySlab
}

// entrySlab hands out the entries of one transaction's sets from chunks
// of entryChunk, where badger.Txn.Set allocates one per key (NewEntry).
// Chunks sized by the last batch wasted more bytes than they saved
// allocations: batches at 64 callers range from a few ops to a hundred.
//
// The store's slab (Store.ents) keeps its chunks from Update to Update:
// reset, once the transaction is committed or discarded, empties them for
// the next. Badger reads a transaction's entries only until its commit
// returns: the commit waits for its write to the memtable, whose skiplist
// copies each key and value, and the write request then drops them (it
// would hand them on to subscribers, and nothing subscribes to the
// store's Badger). A new chunk for every Update was 5.8 KiB a batch, the
// largest part of what a batch of one op allocated (docs/design.md, "The
// writer's fixed cost per batch").
type entrySlab struct {
	chunks []*[entryChunk]badger.Entry
	n      int // entries handed out since the last reset
}

const (
	entryChunk = 64
	// keptEntryChunks bounds the chunks reset keeps: a rare batch of
	// thousands of keys leaves no slab that large behind.
	keptEntryChunks = 16
)

// entry is badger.NewEntry(key, val), from the slab.
func (s *entrySlab) entry(key, val []byte) *badger.Entry {
	i, j := s.n/entryChunk, s.n%entryChunk
	if i == len(s.chunks) {
		s.chunks = append(s.chunks, new([entryChunk]badger.Entry))
	}
	s.n++
	e := &s.chunks[i][j]
	*e = badger.Entry{Key: key, Value: val}
	return e
}

// reset empties the slab for the next transaction, once Badger is done
// with the last one's entries (committed or discarded): it clears those
// handed out, which point to that batch's keys and values, and keeps at
// most keptEntryChunks chunks.
func (s *entrySlab) reset() {
	for i := 0; i*entryChunk < s.n; i++ {
		clear(s.chunks[i][:min(entryChunk, s.n-i*entryChunk)])
	}
	s.n = 0
	if len(s.chunks) > keptEntryChunks {
		clear(s.chunks[keptEntryChunks:])
		s.chunks = s.chunks[:keptEntryChunks]
	}
}

func (t txnAdapter) ctxErr() error {
	if t.ctx == nil || t.ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("ledger read: %w", t.ctx.Err())
}

func (t txnAdapter) Get(key []byte) ([]byte, error) {
	if err := t.ctxErr(); err != nil {
		return nil, err
	}
	item, err := t.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, ledger.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

func (t txnAdapter) Scan(prefix, start []byte, fn func(key, val []byte) (bool, error)) error {
	it := t.txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	seek := prefix
	if start != nil && bytes.Compare(start, prefix) > 0 {
		seek = start
	}
	for it.Seek(seek); it.ValidForPrefix(prefix); it.Next() {
		if err := t.ctxErr(); err != nil {
			return err
		}
		item := it.Item()
		if len(prefix) == 0 && reservedKey(item.Key()) {
			continue
		}
		val, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		more, err := fn(item.KeyCopy(nil), val)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

func (t txnAdapter) Set(key, val []byte) error {
	var err error
	if t.ents != nil {
		err = t.txn.SetEntry(t.ents.entry(key, val))
	} else {
		err = t.txn.Set(key, val) // a View's: refused
	}
	if err != nil {
		return err
	}
	if t.rec != nil {
		t.rec.set(key, val)
	}
	return nil
}

func (t txnAdapter) Delete(key []byte) error {
	if err := t.txn.Delete(key); err != nil {
		return err
	}
	if t.rec != nil {
		t.rec.delete(key)
	}
	return nil
}

// badgerLogger forwards Badger's log lines to slog, dropping its chatty
// informational lines.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	if b.l != nil {
		b.l.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

func (b badgerLogger) Warningf(f string, a ...any) {
	if b.l != nil {
		b.l.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, a...)))
	}
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}

// Empty reports whether the store holds no keys.
func (s *Store) Empty() (bool, error) {
	empty := true
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		it.Rewind()
		for it.Valid() && reservedKey(it.Item().Key()) {
			it.Next()
		}
		empty = !it.Valid()
		return nil
	})
	return empty, err
}

// Compact implements ledger.Compactor: it rewrites value log files that
// are mostly garbage (effect records purged by retention live there), until
// none is worth rewriting.
//
// GC copies the live values of a file to the current value log and then
// deletes the file, with no sync in between when SyncWrites is off; a
// power cut could then lose the only copy. Badger defers such deletes
// while any iterator is open, so Compact holds one across the GC and the
// checkpoint after it: the files go only once their values are durable
// elsewhere. GC rewrites values at their own versions, so it moves
// neither the logical state nor Badger's newest version (see Open's
// refusals).
func (s *Store) Compact() error {
	s.comp.wake() // GC rewrites values: a write
	txn := s.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{})
	defer it.Close() // after the Sync below: deferred deletes happen here
	for {
		err := s.db.RunValueLogGC(0.5)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			break
		}
		if err != nil {
			return fmt.Errorf("value log GC: %w", err)
		}
	}
	if err := s.syncBadger(); err != nil {
		return fmt.Errorf("syncing after value log GC: %w", err)
	}
	return nil
}
