package badger

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
// committed before the call is then in a table. The write goroutine
// replaces the mutable memtable (a request of its own, in order with the
// writes), so writes may run meanwhile.
//
// It waits as a full memtable's writer does: while the flusher retries a
// failing flush, it waits too. It returns ErrDBClosed if the DB closes
// meanwhile, and ErrBlockedWrites while DropAll or DropPrefix runs. In
// memory or read-only, it does nothing.
func (db *DB) FlushMemTables() error {
	if db.opt.InMemory || db.opt.ReadOnly {
		return nil
	}
	if db.blockWrites.Load() == 1 {
		return ErrBlockedWrites
	}
	req := requestPool.Get().(*request)
	req.reset()
	req.rotate = true
	req.Wg.Add(1)
	req.IncrRef()     // for db write
	db.writeCh <- req // Handled in doWrites.
	if err := req.Wait(); err != nil {
		return err
	}
	return db.FlushImmutableMemTables()
}

// FlushImmutableMemTables returns once every immutable memtable (those
// full before the last rotation) is in a level 0 table and the manifest:
// every write committed before the last rotation is then in a table. It
// flushes nothing itself, so it makes no table a full memtable would not
// have made; it waits as FlushMemTables does.
func (db *DB) FlushImmutableMemTables() error { return db.FlushedThrough(^uint64(0)) }

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
	// Immutable memtables are flushed in order, oldest first; one replayed
	// at open has rotation 0.
	for len(db.imm) > 0 && db.imm[0].rotation <= r {
		if db.IsClosed() {
			return ErrDBClosed
		}
		db.flushCond.Wait()
	}
	return nil
}
