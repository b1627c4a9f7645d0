package badgerstore

import (
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // go:linkname, below

	"github.com/dgraph-io/badger/v4"
)

// Badger's compactors each wake every 50 ms to look for work, whether or
// not anything was written: with three, 60 wake-ups a second in a sidecar
// with no traffic, most of an idle "ratchet serve"'s. Badger has no option
// for it, but the two methods its own Flatten, DropPrefix and StreamWriter
// use to pause compactions stop the compactor goroutines and start them
// again. The store stops them once it has written nothing for idleAfter and
// no level needs compacting (every level's score under 1, as Badger's
// compactors decide), and starts them again before the next write, so that
// level 0 never fills with the compactors stopped (a flush of the memtable
// only follows a write). Reads never need compactors.
//
// The two are unexported; a Badger release that renames them fails the
// build here, and TestCompactorsStopWhenIdle checks they still do this.
// Badger is pinned: go.mod replaces it with third_party/badger.

//go:linkname badgerStopCompactions github.com/dgraph-io/badger/v4.(*DB).stopCompactions
func badgerStopCompactions(db *badger.DB)

//go:linkname badgerStartCompactions github.com/dgraph-io/badger/v4.(*DB).startCompactions
func badgerStartCompactions(db *badger.DB)

// idleAfter is how long the store writes nothing before its compactors
// may stop.
const idleAfter = 5 * time.Second

// compactors starts and stops a Badger's compactors around idle spells.
// Every write calls wake first.
type compactors struct {
	db        *badger.DB
	idleAfter time.Duration
	lastWrite atomic.Int64 // unix nanoseconds
	stopped   atomic.Bool  // set before checking lastWrite, see idle

	mu     sync.Mutex // serialises starting, stopping and closing
	timer  *time.Timer
	closed bool
}

func newCompactors(db *badger.DB, idle time.Duration) *compactors {
	c := &compactors{db: db, idleAfter: idle}
	c.lastWrite.Store(time.Now().UnixNano())
	c.timer = time.AfterFunc(idle, c.idle)
	return c
}

// wake notes a write and starts the compactors if they are stopped; it
// returns once they run.
func (c *compactors) wake() {
	c.lastWrite.Store(time.Now().UnixNano())
	if !c.stopped.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.stopped.Load() {
		return
	}
	badgerStartCompactions(c.db)
	c.stopped.Store(false)
	c.timer.Reset(c.idleAfter)
}

// idle runs idleAfter after the last check: it stops the compactors when
// nothing was written meanwhile and nothing needs compacting, and looks
// again later otherwise. A write racing with it either sees stopped set
// (and starts them again once this returns) or is seen here (and they are
// not stopped): stopped is set before lastWrite is read, and a write
// stores lastWrite before it reads stopped.
func (c *compactors) idle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.stopped.Load() {
		return
	}
	c.stopped.Store(true)
	since := time.Since(time.Unix(0, c.lastWrite.Load()))
	if since < c.idleAfter || c.compactionDue() {
		c.stopped.Store(false)
		c.timer.Reset(max(c.idleAfter-since, time.Second))
		return
	}
	badgerStopCompactions(c.db)
}

// compactionDue reports whether a compactor would find work: a level
// whose score is 1 or more.
func (c *compactors) compactionDue() bool {
	for _, l := range c.db.Levels() {
		if l.Score >= 1 {
			return true
		}
	}
	return false
}

// close stops the timer; Badger's Close stops the compactors (stopped ones
// too).
func (c *compactors) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.timer.Stop()
}
