package badgerstore

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
)

// The log of Ratchet's own (see the package doc for why it is safe).
//
// Two segment files, walNames, are used in turn. Each begins with a
// header block (walHeaderSize bytes) holding the segment's generation and
// the sequence number of its first record; the records follow it, each
//
//	length  uint32  payload bytes
//	crc     uint32  crc32c of length, generation, seq and payload
//	gen     uint64  the segment's generation
//	seq     uint64  the batch's sequence number
//	payload         the batch's writes (walOps), sealed with AES-GCM when
//	                the store has a key: nonce, then ciphertext and tag
//
// A segment is zero-filled ahead of its records in walChunk steps (written
// zeros, not a hole or fallocate's unwritten extents) and reused after a
// checkpoint, so the fdatasync of a Sync overwrites allocated blocks and
// needs no metadata, except when it grows the file by a chunk.
const (
	walHeaderSize = 4096
	walRecHeader  = 24
	walChunk      = 1 << 20
	walSegment    = 64 << 20 // a segment's size, the log's bound between checkpoints
	walOpSet      = 1
	walOpDelete   = 2
)

var (
	walNames = [2]string{"ratchet-wal.0", "ratchet-wal.1"}
	walMagic = []byte("RATCHWAL")
	crcTable = crc32.MakeTable(crc32.Castagnoli)

	// appliedKey holds the sequence number of the last batch applied to
	// Badger, written in the batch's own transaction. No ledger key begins
	// with 0xff (keys.go), and Scan and Empty skip it.
	appliedKey = []byte("\xffratchet\x00applied-seq")

	errLogFailed = errors.New("the ledger's log could not be written or synced; reopen the ledger")
)

// walRecord collects one batch's writes (txnAdapter.Set and Delete), after
// room for the record header.
type walRecord struct{ buf []byte }

func newWALRecord() *walRecord { return &walRecord{buf: make([]byte, walRecHeader, 512)} }

func (r *walRecord) set(key, val []byte) {
	r.buf = append(r.buf, walOpSet)
	r.buf = binary.AppendUvarint(r.buf, uint64(len(key)))
	r.buf = append(r.buf, key...)
	r.buf = binary.AppendUvarint(r.buf, uint64(len(val)))
	r.buf = append(r.buf, val...)
}

func (r *walRecord) delete(key []byte) {
	r.buf = append(r.buf, walOpDelete)
	r.buf = binary.AppendUvarint(r.buf, uint64(len(key)))
	r.buf = append(r.buf, key...)
}

// walOps calls fn for each write of a record's payload, in order (val nil
// for a delete).
func walOps(p []byte, fn func(op byte, key, val []byte) error) error {
	field := func() ([]byte, error) {
		n, k := binary.Uvarint(p)
		if k <= 0 || n > uint64(len(p)-k) {
			return nil, errors.New("log record: bad length")
		}
		f := p[k : k+int(n)]
		p = p[k+int(n):]
		return f, nil
	}
	for len(p) > 0 {
		op := p[0]
		p = p[1:]
		key, err := field()
		if err != nil {
			return err
		}
		var val []byte
		switch op {
		case walOpSet:
			if val, err = field(); err != nil {
				return err
			}
		case walOpDelete:
		default:
			return fmt.Errorf("log record: unknown op %d", op)
		}
		if err := fn(op, key, val); err != nil {
			return err
		}
	}
	return nil
}

type walHeader struct{ gen, start uint64 }

func (h walHeader) encode() []byte {
	b := make([]byte, walHeaderSize)
	copy(b, walMagic)
	binary.LittleEndian.PutUint64(b[8:], h.gen)
	binary.LittleEndian.PutUint64(b[16:], h.start)
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[:24], crcTable))
	return b
}

func decodeWALHeader(b []byte) (walHeader, bool) {
	if len(b) < 28 || !bytes.Equal(b[:8], walMagic) || binary.LittleEndian.Uint32(b[24:]) != crc32.Checksum(b[:24], crcTable) {
		return walHeader{}, false
	}
	return walHeader{binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])}, true
}

// wal is the log: the records of batches applied to Badger and not yet
// written (pending), and the segment they are written to.
type wal struct {
	dir         string
	aead        cipher.AEAD // nil without an encryption key
	logs        *logSync    // Badger's files, synced at a checkpoint
	segmentSize int64
	datasync    func(*os.File) error // tests inject a failure

	mu      sync.Mutex
	pending []pendingRecord

	smu    sync.Mutex  // a write and sync of the segment, or a checkpoint
	failed error       // once set, every later Sync and write is refused
	broken atomic.Bool // failed is set: read without waiting for a sync
	files  [2]*os.File
	sizes  [2]int64 // bytes of each file written (records or zeros)
	cur    int
	gen    uint64
	off    int64  // where the next record goes in files[cur]
	last   uint64 // seq of the last record made durable (written or checkpointed)
	wbuf   []byte
}

type pendingRecord struct {
	seq uint64
	rec *walRecord
}

// openWAL opens (creating when missing) the log in dir, replays into db
// what Badger lacks of it, and checkpoints. It returns the log and the
// last sequence number Badger holds.
func openWAL(dir string, key []byte, segmentSize int64, db *badger.DB, logs *logSync) (*wal, uint64, error) {
	w := &wal{dir: dir, logs: logs, segmentSize: segmentSize, datasync: datasync}
	if len(key) > 0 {
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, 0, fmt.Errorf("ledger log key: %w", err)
		}
		if w.aead, err = cipher.NewGCM(block); err != nil {
			return nil, 0, fmt.Errorf("ledger log key: %w", err)
		}
	}
	applied, err := readApplied(db)
	if err != nil {
		return nil, 0, err
	}
	var headers [2]walHeader
	valid := [2]bool{}
	for i, name := range walNames {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			w.close()
			return nil, 0, fmt.Errorf("opening ledger log: %w", err)
		}
		w.files[i] = f
		st, err := f.Stat()
		if err != nil {
			w.close()
			return nil, 0, err
		}
		w.sizes[i] = st.Size()
		b := make([]byte, 28)
		if _, err := f.ReadAt(b, 0); err == nil {
			headers[i], valid[i] = decodeWALHeader(b)
		}
	}
	w.cur = 1 // the next checkpoint starts file 0 when neither is valid
	switch {
	case valid[0] && (!valid[1] || headers[0].gen > headers[1].gen):
		w.cur = 0
	case valid[1]:
		w.cur = 1
	}
	last := applied
	if valid[w.cur] {
		h := headers[w.cur]
		w.gen = h.gen
		if applied+1 < h.start {
			w.close()
			return nil, 0, fmt.Errorf("ledger log: Badger holds batches up to %d, but the log's checkpoint says it held %d", applied, h.start-1)
		}
		end, err := w.replay(db, h, applied)
		if err != nil {
			w.close()
			return nil, 0, err
		}
		last = max(applied, end)
	}
	if err := w.checkpoint(last); err != nil {
		w.close()
		return nil, 0, err
	}
	return w, last, nil
}

func readApplied(db *badger.DB) (uint64, error) {
	var applied uint64
	err := db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(appliedKey)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("ledger log: applied sequence number of %d bytes", len(v))
			}
			applied = binary.BigEndian.Uint64(v)
			return nil
		})
	})
	return applied, err
}

func appliedValue(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// replay reads the segment's records in order up to the first that is
// torn, of another generation or out of sequence, and returns the last
// good one's seq (h.start-1 for none). When Badger holds no batch after it
// (applied <= end), it applies every record of the segment, each in its own
// transaction with its seq as the applied one: Badger was durable up to
// h.start-1 at the checkpoint that began the segment, so this restores
// exactly the state at end even if Badger kept only some of the batches
// since (see the package doc). When Badger is ahead, nothing is applied.
func (w *wal) replay(db *badger.DB, h walHeader, applied uint64) (uint64, error) {
	type rec struct {
		seq     uint64
		payload []byte
	}
	var recs []rec
	f := w.files[w.cur]
	r := bufio.NewReaderSize(io.NewSectionReader(f, walHeaderSize, max(0, w.sizes[w.cur]-walHeaderSize)), 1<<20)
	want := h.start
	hdr := make([]byte, walRecHeader)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			break
		}
		n := binary.LittleEndian.Uint32(hdr)
		gen, seq := binary.LittleEndian.Uint64(hdr[8:]), binary.LittleEndian.Uint64(hdr[16:])
		if n == 0 || gen != h.gen || seq != want || int64(n) > w.segmentSize {
			break
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			break
		}
		crc := crc32.Update(crc32.Checksum(hdr[:4], crcTable), crcTable, hdr[8:])
		if crc32.Update(crc, crcTable, p) != binary.LittleEndian.Uint32(hdr[4:]) {
			break
		}
		if w.aead != nil {
			ns := w.aead.NonceSize()
			if len(p) < ns {
				return 0, fmt.Errorf("ledger log record %d: too short to be sealed", seq)
			}
			var err error
			if p, err = w.aead.Open(p[ns:ns], p[:ns], p[ns:], hdr[8:]); err != nil {
				return 0, fmt.Errorf("ledger log record %d: %w (a different encryption key?)", seq, err)
			}
		}
		recs = append(recs, rec{seq, p})
		want++
	}
	end := want - 1
	if applied > end {
		return end, nil
	}
	for _, rc := range recs {
		err := db.Update(func(txn *badger.Txn) error {
			err := walOps(rc.payload, func(op byte, key, val []byte) error {
				if op == walOpDelete {
					return txn.Delete(key)
				}
				return txn.Set(key, val)
			})
			if err != nil {
				return err
			}
			return txn.Set(appliedKey, appliedValue(rc.seq))
		})
		if err != nil {
			return 0, fmt.Errorf("replaying ledger log record %d: %w", rc.seq, err)
		}
	}
	return end, nil
}

// add queues a batch's record, applied to Badger as seq, for the next sync.
func (w *wal) add(seq uint64, rec *walRecord) {
	w.mu.Lock()
	w.pending = append(w.pending, pendingRecord{seq, rec})
	w.mu.Unlock()
}

// err reports a failure that refuses writes until the store is reopened.
func (w *wal) err() error {
	if !w.broken.Load() {
		return nil
	}
	w.smu.Lock()
	defer w.smu.Unlock()
	return w.failed
}

// sync writes the pending records to the segment and fdatasyncs it. When
// they do not fit, or Badger has begun a new memtable (whose log may reach
// the disk before the rest of the last one's), it checkpoints instead.
func (w *wal) sync() error {
	w.smu.Lock()
	defer w.smu.Unlock()
	if w.failed != nil {
		return w.failed
	}
	w.mu.Lock()
	recs := w.pending
	w.pending = nil
	w.mu.Unlock()
	if len(recs) == 0 {
		return nil
	}
	last := recs[len(recs)-1].seq
	w.wbuf = w.wbuf[:0]
	for _, pr := range recs {
		w.wbuf = w.seal(w.wbuf, pr)
	}
	if w.off+int64(len(w.wbuf)) > w.segmentSize || w.logs.rotated() {
		return w.fail(w.checkpoint(last))
	}
	f := w.files[w.cur]
	if end := w.off + int64(len(w.wbuf)); end > w.sizes[w.cur] {
		if err := w.zeroFill(w.cur, min(w.segmentSize, (end+walChunk-1)/walChunk*walChunk)); err != nil {
			return w.fail(err)
		}
	}
	if _, err := f.WriteAt(w.wbuf, w.off); err != nil {
		return w.fail(fmt.Errorf("writing ledger log: %w", err))
	}
	if err := w.datasync(f); err != nil {
		return w.fail(fmt.Errorf("syncing ledger log: %w", err))
	}
	w.off += int64(len(w.wbuf))
	w.last = last
	return nil
}

// seal appends pr's record to b: header, then payload (sealed with a key).
func (w *wal) seal(b []byte, pr pendingRecord) []byte {
	start := len(b)
	payload := pr.rec.buf[walRecHeader:]
	b = append(b, make([]byte, walRecHeader)...)
	if w.aead != nil {
		nonce := make([]byte, w.aead.NonceSize())
		rand.Read(nonce)
		b = append(b, nonce...)
		binary.LittleEndian.PutUint64(b[start+8:], w.gen)
		binary.LittleEndian.PutUint64(b[start+16:], pr.seq)
		b = w.aead.Seal(b, nonce, payload, b[start+8:start+24])
	} else {
		b = append(b, payload...)
	}
	h := b[start : start+walRecHeader]
	binary.LittleEndian.PutUint32(h, uint32(len(b)-start-walRecHeader))
	binary.LittleEndian.PutUint64(h[8:], w.gen)
	binary.LittleEndian.PutUint64(h[16:], pr.seq)
	crc := crc32.Update(crc32.Checksum(h[:4], crcTable), crcTable, b[start+8:])
	binary.LittleEndian.PutUint32(h[4:], crc)
	return b
}

// fail makes err, if any, refuse every later sync.
func (w *wal) fail(err error) error {
	if err != nil && w.failed == nil {
		w.failed = fmt.Errorf("%w: %w", errLogFailed, err)
		w.broken.Store(true)
	}
	if err != nil {
		return w.failed
	}
	return nil
}

// checkpoint makes Badger durable (every batch applied so far, which
// includes last and all before it), then starts the other segment with the
// next generation at last+1. Records pending after last stay pending.
// Callers hold smu, except openWAL.
func (w *wal) checkpoint(last uint64) error {
	if err := w.logs.sync(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	next := 1 - w.cur
	if w.files[next] == nil {
		f, err := os.OpenFile(filepath.Join(w.dir, walNames[next]), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return fmt.Errorf("creating ledger log: %w", err)
		}
		w.files[next], w.sizes[next] = f, 0
		if err := w.zeroFill(next, walChunk); err != nil {
			return err
		}
		if err := syncDir(w.dir); err != nil {
			return err
		}
	}
	h := walHeader{gen: w.gen + 1, start: last + 1}
	if _, err := w.files[next].WriteAt(h.encode(), 0); err != nil {
		return fmt.Errorf("writing ledger log header: %w", err)
	}
	if err := w.datasync(w.files[next]); err != nil {
		return fmt.Errorf("syncing ledger log header: %w", err)
	}
	w.cur, w.gen, w.off, w.last = next, h.gen, walHeaderSize, last
	return nil
}

// zeroFill writes zeros to file i from what it holds up to size, and syncs
// them with the file's new size (one metadata commit per chunk).
func (w *wal) zeroFill(i int, size int64) error {
	f := w.files[i]
	zeros := make([]byte, walChunk)
	for off := w.sizes[i]; off < size; off += walChunk {
		if _, err := f.WriteAt(zeros[:min(walChunk, size-off)], off); err != nil {
			return fmt.Errorf("preparing ledger log: %w", err)
		}
	}
	if err := w.datasync(f); err != nil {
		return fmt.Errorf("syncing ledger log: %w", err)
	}
	w.sizes[i] = max(w.sizes[i], size)
	return nil
}

// syncBadger syncs what is pending and, unless the log failed,
// checkpoints, so that Badger alone holds every batch: on Close (an older
// binary opening the directory then misses nothing), and after writes that
// bypass the log (value log GC, a restore).
func (w *wal) syncBadger() error {
	if err := w.sync(); err != nil {
		return err
	}
	w.smu.Lock()
	defer w.smu.Unlock()
	if w.failed != nil {
		return w.failed
	}
	return w.fail(w.checkpoint(w.last))
}

func (w *wal) close() {
	for _, f := range w.files {
		if f != nil {
			f.Close()
		}
	}
}
