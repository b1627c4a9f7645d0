package badger

import "github.com/dgraph-io/badger/v4/y"

// Ratchet's patch (third_party/README.md): with the memtable logs off
// (Options.WithMemTableLog), a commit is durable once its memtable is in a
// level 0 table. A store with a log of its own uses these to know when it
// may discard part of that log.

// MemTableRotations returns how many times the mutable memtable has been
// replaced by a new one: when full, before a write (the write then goes to
// the new one), and by FlushMemTables. Each rotation's number is the count
// after it (FlushedThrough).
func (db *DB) MemTableRotations() uint64 { return db.rotations.Load() }

// FlushMemTables writes the mutable memtable, when it holds anything, and
// every immutable one to level 0 tables, and returns once all of them are
// in tables and the manifest (Badger syncs both as it flushes). Every write
// committed before the call is then in a table.
//
// The caller must not commit, or write in any other way, while it runs:
// FlushMemTables replaces the mutable memtable, which the write goroutine
// uses without the lock. A store that serialises its writes calls it
// between them.
//
// It waits as a full memtable's writer does: while the flusher retries a
// failing flush, it waits too. It returns ErrDBClosed if the DB closes
// meanwhile. In memory or read-only, it does nothing.
func (db *DB) FlushMemTables() error { return db.flushMemTables(true) }

// FlushImmutableMemTables returns once every immutable memtable (those
// full before the last rotation) is in a level 0 table and the manifest:
// every write committed before the last rotation is then in a table. It
// flushes nothing itself, so it makes no table a full memtable would not
// have made; it waits as FlushMemTables does, with the same rule for the
// caller.
func (db *DB) FlushImmutableMemTables() error { return db.flushMemTables(false) }

func (db *DB) flushMemTables(mutable bool) error {
	if db.opt.InMemory || db.opt.ReadOnly {
		return nil
	}
	db.lock.Lock()
	defer db.lock.Unlock()
	if db.mt == nil {
		return ErrDBClosed
	}
	if mutable && !db.mt.sl.Empty() {
		for {
			if db.IsClosed() {
				return ErrDBClosed
			}
			pushed := false
			select {
			case db.flushChan <- db.mt:
				pushed = true
			default:
			}
			if pushed {
				break
			}
			db.flushCond.Wait() // the flusher broadcasts after each flush
		}
		db.imm = append(db.imm, db.mt)
		db.mt.rotation = db.rotations.Add(1)
		mt, err := db.newMemTable()
		if err != nil { // as in ensureRoomForWrite
			return y.Wrapf(err, "cannot create new mem table")
		}
		db.mt = mt
	}
	return db.waitFlushed(^uint64(0))
}

// FlushedThrough returns once every memtable made immutable by rotation
// number r (MemTableRotations' count) or before it is in a level 0 table
// and the manifest: every write committed before that rotation is then in
// a table. It flushes nothing itself; a rotation long past returns at
// once. FlushedThrough(0) waits only for memtables replayed at open.
func (db *DB) FlushedThrough(r uint64) error {
	if db.opt.InMemory || db.opt.ReadOnly {
		return nil
	}
	db.lock.Lock()
	defer db.lock.Unlock()
	return db.waitFlushed(r)
}

// waitFlushed waits, db.lock held, until no immutable memtable of
// rotation r or before is left (they are flushed in order, oldest first).
func (db *DB) waitFlushed(r uint64) error {
	for len(db.imm) > 0 && db.imm[0].rotation <= r {
		if db.IsClosed() {
			return ErrDBClosed
		}
		db.flushCond.Wait()
	}
	return nil
}
