package badgerstore

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// The log of Ratchet's own (see the package doc for why it is safe).
//
// Two segment files, walNames, are used in turn. Each begins with a
// header block (walHeaderSize bytes):
//
//	magic   8 bytes walMagic
//	gen     uint64  the segment's generation (one more at each checkpoint)
//	start   uint64  the sequence number of its first record
//	id      16 bytes the ledger's id (idKey in Badger)
//	salt    8 bytes random, new at each checkpoint
//	crc     uint32  crc32c of the above
//
// and the records follow it, each
//
//	length  uint32  payload bytes
//	crc     uint32  crc32c of salt, length, generation, seq and payload
//	gen     uint64  the segment's generation
//	seq     uint64  the batch's sequence number
//	payload         the batch's writes (walOps), sealed with AES-GCM when
//	                the store has a key: ciphertext and tag, under the
//	                generation's key (walKey) with seq as the nonce
//
// A segment is zero-filled ahead of its records in walChunk steps (written
// zeros, not a hole or fallocate's unwritten extents) and reused after a
// checkpoint, so the fdatasync of a record overwrites allocated blocks and
// needs no metadata, except when it grows the file by a chunk. A reused
// segment keeps its older records past the new generation's tail; the
// salt in every record's crc (and, with a key, the generation's own key)
// makes any byte sequence written before the header fail as a record.
const (
	walHeaderSize = 4096
	walHeaderUsed = 52
	walRecHeader  = 24
	walChunk      = 1 << 20
	walSegment    = 64 << 20 // a segment's size, the log's bound between checkpoints
	walOpSet      = 1
	walOpDelete   = 2
)

var (
	walNames = [2]string{"ratchet-wal.0", "ratchet-wal.1"}
	walMagic = []byte("RATCHWL2")
	crcTable = crc32.MakeTable(crc32.Castagnoli)

	// appliedKey holds the sequence number of the last batch committed to
	// Badger, written in the batch's own transaction and again by each
	// checkpoint, so that it is the newest version Badger holds unless
	// something wrote Badger without the log (see openWAL). idKey holds
	// the ledger's id. No ledger key begins with 0xff (keys.go): Scan,
	// Empty and Backup skip them, Restore drops them.
	appliedKey = []byte("\xffratchet\x00applied-seq")
	idKey      = []byte("\xffratchet\x00ledger-id")

	errLogFailed = fmt.Errorf("the ledger's log could not be written or synced, or Badger's commit after it failed: %w", ledger.ErrStoreFailed)
)

// reservedKey reports whether key is one of the store's own.
func reservedKey(key []byte) bool { return bytes.Equal(key, appliedKey) || bytes.Equal(key, idKey) }

// walRecord collects one batch's writes (txnAdapter.Set and Delete), after
// room for the record header.
type walRecord struct{ buf []byte }

func newWALRecord() *walRecord { return &walRecord{buf: make([]byte, walRecHeader, 512)} }

// empty reports whether the record holds no write.
func (r *walRecord) empty() bool { return len(r.buf) == walRecHeader }

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

type walHeader struct {
	gen, start uint64
	id         [16]byte
	salt       [8]byte
}

func (h walHeader) encode() []byte {
	b := make([]byte, walHeaderSize)
	copy(b, walMagic)
	binary.LittleEndian.PutUint64(b[8:], h.gen)
	binary.LittleEndian.PutUint64(b[16:], h.start)
	copy(b[24:40], h.id[:])
	copy(b[40:48], h.salt[:])
	binary.LittleEndian.PutUint32(b[48:], crc32.Checksum(b[:48], crcTable))
	return b
}

func decodeWALHeader(b []byte) (walHeader, bool) {
	if len(b) < walHeaderUsed || !bytes.Equal(b[:8], walMagic) || binary.LittleEndian.Uint32(b[48:]) != crc32.Checksum(b[:48], crcTable) {
		return walHeader{}, false
	}
	h := walHeader{gen: binary.LittleEndian.Uint64(b[8:]), start: binary.LittleEndian.Uint64(b[16:])}
	copy(h.id[:], b[24:40])
	copy(h.salt[:], b[40:48])
	return h, true
}

// recordCRC is the crc of a record: the segment's salt, then the record's
// header (but its crc) and payload.
func recordCRC(salt [8]byte, hdr, payload []byte) uint32 {
	crc := crc32.Checksum(salt[:], crcTable)
	crc = crc32.Update(crc, crcTable, hdr[:4])
	crc = crc32.Update(crc, crcTable, hdr[8:walRecHeader])
	return crc32.Update(crc, crcTable, payload)
}

// walKey derives the AES-GCM key of one generation from the master key:
// HKDF-SHA256 with the generation's salt, the ledger's id and the
// generation in the info. Each record's nonce is its seq, unique within
// the generation, so no nonce repeats under a key, and the master key
// (Badger's, for its key registry) seals nothing itself.
func walKey(master []byte, h walHeader) (cipher.AEAD, error) {
	info := append([]byte("ratchet wal v1"), h.id[:]...)
	info = binary.BigEndian.AppendUint64(info, h.gen)
	key, err := hkdf.Key(sha256.New, master, h.salt[:], string(info), 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func walNonce(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 12), seq)[:12:12]
}

// wal is the log and the segment records are written to. Its methods are
// called under Store.wmu, one at a time.
type wal struct {
	dir         string
	master      []byte      // the encryption key; nil without one
	aead        cipher.AEAD // the current generation's key (nil without one)
	id          [16]byte
	logs        *logSync // Badger's files, synced at a checkpoint
	db          *badger.DB
	segmentSize int64
	datasync    func(*os.File) error     // tests inject a failure
	flush       func(mutable bool) error // flushMemTables; tests watch the order
	flushed     func(r uint64) error     // db.FlushedThrough; tests hold it back

	failed error // once set, every later write is refused
	files  [2]*os.File
	sizes  [2]int64 // bytes of each file written (records or zeros)
	cur    int
	hdr    walHeader // the current segment's
	segRot [2]uint64 // per segment, the Badger flush its start waits for (0: none; see rotated)
	off    int64     // where the next record goes in files[cur]
	wbuf   []byte
}

// openWAL opens (creating when missing) the log in dir, replays into db
// every record since the last checkpoint, and checkpoints. It returns the
// log and the last sequence number used.
func openWAL(dir string, key []byte, segmentSize int64, db *badger.DB, logs *logSync) (*wal, uint64, error) {
	w := &wal{dir: dir, master: key, logs: logs, db: db, segmentSize: segmentSize, datasync: datasync}
	w.flush = func(mutable bool) error { return flushMemTables(db, mutable) }
	w.flushed = db.FlushedThrough
	applied, appliedVersion, err := readApplied(db)
	if err != nil {
		return nil, 0, err
	}
	id, hasID, err := readID(db)
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
		b := make([]byte, walHeaderUsed)
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
	fail := func(err error) (*wal, uint64, error) {
		w.close()
		return nil, 0, err
	}
	last := applied
	if valid[w.cur] {
		h := headers[w.cur]
		if !hasID || h.id != id {
			return fail(fmt.Errorf("ledger log: %s holds the log of ledger %x, not of this ledger (%x): it was copied from another data directory; remove %s and %s to open the ledger without it",
				walNames[w.cur], h.id, id, walNames[0], walNames[1]))
		}
		var recs []walRead
		if applied+1 < h.start {
			// Badger behind the segment's start: a power cut before the
			// flush a rotation checkpoint left running (wal.rotated). The
			// batches between are in the segment before, not overwritten
			// until that flush was done.
			prev, ok, err := w.previous(headers, valid, applied)
			if err != nil {
				return fail(err)
			}
			if !ok {
				return fail(fmt.Errorf("ledger log: Badger holds batches up to %d, but the log's checkpoint says it held %d", applied, h.start-1))
			}
			for _, rc := range prev {
				if rc.seq < h.start {
					recs = append(recs, rc)
				}
			}
		}
		w.hdr = h
		if err := w.useKey(); err != nil {
			return fail(err)
		}
		cur, err := w.read()
		if err != nil {
			return fail(err)
		}
		recs = append(recs, cur...)
		if n := len(recs); n > 0 && applied > recs[n-1].seq {
			// Each record is synced before its batch commits, and a
			// checkpoint starts its segment after the last batch logged, so
			// after any crash Badger's applied batch is at most the log's
			// last. Badger past it means this log is older than Badger (a
			// copy that read the log before Badger's files, an old log put
			// back): replaying it would put older values over later batches.
			return fail(fmt.Errorf("ledger log: Badger holds batches up to %d, past the log's last batch %d: the log is older than Badger (copied or put back from before); which side is wrong cannot be told, so nothing was replayed. Remove %s and %s to open the ledger as Badger holds it",
				applied, recs[n-1].seq, walNames[0], walNames[1]))
		}
		if len(recs) > 0 {
			// Every batch committed to Badger since the checkpoint is in
			// the log, and was committed in the same transaction as a new
			// applied key, so the applied key is Badger's newest version.
			// A newer one means a write that bypassed the log (a binary
			// from before the log ran on this directory after a crash):
			// replaying would put older values over it.
			if v := db.MaxVersion(); v > appliedVersion {
				return fail(fmt.Errorf("ledger log: Badger holds writes made without the log after its batch %d (version %d, newer than %d: was a binary from before the log run on this directory after a crash?); replaying the log's batches %d to %d would put older values over them. Remove %s and %s to open the ledger as Badger holds it, losing those batches",
					applied, v, appliedVersion, recs[0].seq, recs[len(recs)-1].seq, walNames[0], walNames[1]))
			}
			if err := replay(db, recs); err != nil {
				return fail(err)
			}
			last = max(applied, recs[len(recs)-1].seq)
		}
	}
	if !hasID {
		if _, err := rand.Read(id[:]); err != nil {
			return fail(err)
		}
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set(idKey, id[:]) }); err != nil {
			return fail(fmt.Errorf("writing the ledger's id: %w", err))
		}
	}
	w.id = id
	if err := w.checkpoint(last); err != nil {
		return fail(err)
	}
	return w, last, nil
}

// previous reads the segment before the current one (w.cur) when it can
// carry Badger, which holds batches up to applied, to the current one's
// start: the generation before, the same ledger, beginning where Badger
// holds everything before it, and its records reaching the current
// segment's start-1. ok is false when it cannot.
func (w *wal) previous(headers [2]walHeader, valid [2]bool, applied uint64) (recs []walRead, ok bool, err error) {
	cur, other := w.cur, 1-w.cur
	h, p := headers[cur], headers[other]
	if !valid[other] || p.gen+1 != h.gen || p.id != h.id || p.start > applied+1 {
		return nil, false, nil
	}
	w.cur, w.hdr = other, p
	defer func() { w.cur = cur }()
	if err := w.useKey(); err != nil {
		return nil, false, err
	}
	if recs, err = w.read(); err != nil {
		return nil, false, err
	}
	if len(recs) == 0 || recs[len(recs)-1].seq+1 < h.start {
		return nil, false, nil
	}
	return recs, true, nil
}

// readKey calls fn with key's value and version in db; absent, not at all.
func readKey(db *badger.DB, key []byte, fn func(v []byte, version uint64) error) error {
	return db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return fn(v, item.Version()) })
	})
}

// readApplied returns the applied sequence number and its Badger version.
func readApplied(db *badger.DB) (seq, version uint64, err error) {
	err = readKey(db, appliedKey, func(v []byte, ver uint64) error {
		if len(v) != 8 {
			return fmt.Errorf("ledger log: applied sequence number of %d bytes", len(v))
		}
		seq, version = binary.BigEndian.Uint64(v), ver
		return nil
	})
	return seq, version, err
}

// readID returns the ledger's id, ok false when it has none yet.
func readID(db *badger.DB) (id [16]byte, ok bool, err error) {
	err = readKey(db, idKey, func(v []byte, _ uint64) error {
		if len(v) != len(id) {
			return fmt.Errorf("ledger id of %d bytes", len(v))
		}
		copy(id[:], v)
		ok = true
		return nil
	})
	return id, ok, err
}

func appliedValue(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// useKey sets the current generation's key.
func (w *wal) useKey() error {
	if len(w.master) == 0 {
		return nil
	}
	var err error
	if w.aead, err = walKey(w.master, w.hdr); err != nil {
		return fmt.Errorf("ledger log key: %w", err)
	}
	return nil
}

type walRead struct {
	seq     uint64
	payload []byte
}

// read returns the current segment's records in order up to the first
// that is torn, fails its crc, is of another generation or out of
// sequence, each opened with the generation's key.
func (w *wal) read() ([]walRead, error) {
	var recs []walRead
	h := w.hdr
	r := bufio.NewReaderSize(io.NewSectionReader(w.files[w.cur], walHeaderSize, max(0, w.sizes[w.cur]-walHeaderSize)), 1<<20)
	want := h.start
	hdr := make([]byte, walRecHeader)
	// A record may be longer than the segment (append writes past its
	// size rather than refuse an answered batch), never than the file.
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			break
		}
		n := binary.LittleEndian.Uint32(hdr)
		gen, seq := binary.LittleEndian.Uint64(hdr[8:]), binary.LittleEndian.Uint64(hdr[16:])
		// Zeros (the segment past its last record) fail the generation,
		// never 0; an empty payload (a batch that wrote nothing but the
		// applied key, without a key to seal it, as binaries before
		// 607eae9 wrote one) is a record.
		if gen != h.gen || seq != want || int64(n) > w.sizes[w.cur]-walHeaderSize {
			break
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(r, p); err != nil {
			break
		}
		if recordCRC(h.salt, hdr, p) != binary.LittleEndian.Uint32(hdr[4:]) {
			break
		}
		if w.aead != nil {
			var err error
			if p, err = w.aead.Open(p[:0], walNonce(seq), p, hdr[8:]); err != nil {
				return nil, fmt.Errorf("ledger log record %d: %w (a different encryption key?)", seq, err)
			}
		}
		recs = append(recs, walRead{seq, p})
		want++
	}
	return recs, nil
}

// replay applies every record, in order, each in its own transaction with
// its seq as the applied one. Badger was durable up to the segment's
// start-1 at the checkpoint that began it, and every batch it may hold
// since is one of these records, each setting (or deleting) its keys as
// they were after its batch: whatever part of them Badger kept, the result
// is exactly the state after the last record.
func replay(db *badger.DB, recs []walRead) error {
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
			return fmt.Errorf("replaying ledger log record %d: %w", rc.seq, err)
		}
	}
	return nil
}

// err reports a failure that refuses writes until the store is reopened.
func (w *wal) err() error { return w.failed }

// append writes the record of batch seq, not yet committed to Badger, and
// fdatasyncs it; last is the batch before it, committed. When the record
// does not fit in the segment it checkpoints first (Badger durable up to
// last, the record then the new segment's first).
func (w *wal) append(seq, last uint64, rec *walRecord) error {
	if w.failed != nil {
		return w.failed
	}
	w.wbuf = w.seal(w.wbuf[:0], seq, rec)
	if w.off+int64(len(w.wbuf)) > w.segmentSize && w.off > walHeaderSize {
		if err := w.checkpoint(last); err != nil {
			return w.fail(err)
		}
		w.wbuf = w.seal(w.wbuf[:0], seq, rec)
	}
	f := w.files[w.cur]
	if end := w.off + int64(len(w.wbuf)); end > w.sizes[w.cur] {
		if err := w.zeroFill(w.cur, max(end, min(w.segmentSize, (end+walChunk-1)/walChunk*walChunk))); err != nil {
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
	return nil
}

// seal appends batch seq's record to b: header, then payload (sealed with
// a key).
func (w *wal) seal(b []byte, seq uint64, rec *walRecord) []byte {
	start := len(b)
	payload := rec.buf[walRecHeader:]
	b = append(b, make([]byte, walRecHeader)...)
	binary.LittleEndian.PutUint64(b[start+8:], w.hdr.gen)
	binary.LittleEndian.PutUint64(b[start+16:], seq)
	if w.aead != nil {
		b = w.aead.Seal(b, walNonce(seq), payload, b[start+8:start+24])
	} else {
		b = append(b, payload...)
	}
	h := b[start : start+walRecHeader]
	binary.LittleEndian.PutUint32(h, uint32(len(b)-start-walRecHeader))
	binary.LittleEndian.PutUint32(h[4:], recordCRC(w.hdr.salt, h, b[start+walRecHeader:]))
	return b
}

// fail makes err, if any, refuse every later write.
func (w *wal) fail(err error) error {
	if err != nil && w.failed == nil {
		w.failed = fmt.Errorf("%w: %w", errLogFailed, err)
	}
	if err != nil {
		return w.failed
	}
	return nil
}

// checkpoint writes the applied key (last) at Badger's newest version,
// makes Badger durable (every batch committed so far, last and all before
// it, and whatever was written without the log), then starts the other
// segment with the next generation at last+1, a new salt and key.
//
// Badger keeps no memtable logs (see Open), so it is durable once its
// memtables are in tables: the value log first (a table may point into
// it), then every memtable flushed, then the tables' names.
func (w *wal) checkpoint(last uint64) error {
	if err := w.db.Update(func(txn *badger.Txn) error { return txn.Set(appliedKey, appliedValue(last)) }); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := w.logs.sync(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := w.flush(true); err != nil {
		return fmt.Errorf("checkpoint: flushing Badger's memtables: %w", err)
	}
	w.segRot[w.cur] = 0 // every flush is done
	if err := syncDir(w.dir); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := w.begin(last + 1); err != nil {
		return err
	}
	w.segRot[w.cur] = 0
	return nil
}

// rotated is called after batch seq, whose record is rec, was committed
// and Badger began a new memtable for it (rotation number r): that
// memtable holds seq alone, and every batch before it is in the memtables
// Badger began to flush at the rotation. Once the segment is half full,
// the log checkpoints there (a rotation checkpoint) without waiting for
// that flush: it starts the other segment at seq, with seq's record,
// sealed anew, as its first, and notes r as the flush the new segment's
// start waits for (segRot). Until that flush is in a table, the batches
// before seq are in the segment just left, which is not overwritten
// before the next checkpoint, and Open reads both (openWAL). So the next
// checkpoint of either kind first waits for it, a whole half segment
// later, which is at once.
//
// A checkpoint forced at a full segment flushes a memtable Badger had only
// begun, one more table at level 0 for every segment, and the compactions
// they brought cost about as much CPU as the memtable logs saved; waiting
// for the rotation's flush held every write for 14-36 ms (docs/design.md,
// "Badger without its memtable logs"). With memtables a quarter of a
// segment, one fills before the segment does unless its batches hold far
// more than the log's records do.
func (w *wal) rotated(seq uint64, rec *walRecord, r uint64) error {
	if w.failed != nil {
		return w.failed
	}
	if w.off < w.segmentSize/2 {
		return nil
	}
	if err := w.leave(); err != nil {
		return w.fail(fmt.Errorf("checkpoint: %w", err))
	}
	if err := w.begin(seq); err != nil {
		return w.fail(err)
	}
	w.segRot[w.cur] = r
	return w.append(seq, seq-1, rec)
}

// leave makes Badger durable up to the current segment's start-1, so that
// the other segment, which holds the batches before it, may be
// overwritten: the value log (a table may point into it), the flush the
// segment's start waits for, then the tables' names.
func (w *wal) leave() error {
	if err := w.logs.sync(); err != nil {
		return err
	}
	if r := w.segRot[w.cur]; r != 0 {
		if err := w.flushed(r); err != nil {
			return fmt.Errorf("waiting for Badger's memtable flush: %w", err)
		}
		w.segRot[w.cur] = 0
	}
	return syncDir(w.dir)
}

// flushMemTables flushes Badger's memtables, the mutable one too or only
// the immutable ones.
func flushMemTables(db *badger.DB, mutable bool) error {
	if mutable {
		return db.FlushMemTables()
	}
	return db.FlushImmutableMemTables()
}

// begin starts the other segment with the next generation at start,
// Badger durable up to start-1.
func (w *wal) begin(start uint64) error {
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
	h := walHeader{gen: w.hdr.gen + 1, start: start, id: w.id}
	if _, err := rand.Read(h.salt[:]); err != nil {
		return err
	}
	if _, err := w.files[next].WriteAt(h.encode(), 0); err != nil {
		return fmt.Errorf("writing ledger log header: %w", err)
	}
	if err := w.datasync(w.files[next]); err != nil {
		return fmt.Errorf("syncing ledger log header: %w", err)
	}
	w.cur, w.hdr, w.off = next, h, walHeaderSize
	return w.useKey()
}

// zeroFill writes zeros to file i from what it holds up to size, and syncs
// them with the file's new size (one metadata commit per chunk).
func (w *wal) zeroFill(i int, size int64) error {
	f := w.files[i]
	zeros := walZeros[:]
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

// walZeros is what zeroFill writes, never written itself: a chunk made
// for each call was a MiB allocated for every MiB the log grew (2.6 KiB an
// engine pair), and, never written, its pages are the kernel's zero page.
var walZeros [walChunk]byte

// syncBadger checkpoints unless the log failed, so that Badger alone
// holds every batch: on Close (an older binary opening the directory then
// misses nothing), and around writes that bypass the log (value log GC, a
// restore), so that the log never begins before them.
func (w *wal) syncBadger(last uint64) error {
	if w.failed != nil {
		return w.failed
	}
	return w.fail(w.checkpoint(last))
}

func (w *wal) close() {
	for _, f := range w.files {
		if f != nil {
			f.Close()
		}
	}
}
