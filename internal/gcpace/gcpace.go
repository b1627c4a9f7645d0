// Package gcpace sets the Go collector's pace for a process whose live heap
// is small and whose allocation rate is high, as ratchet serve's is under
// load (it starts where the ratchet commands open the ledger, and in every
// process of make bench): a few MiB to a few tens of MiB live (Badger's memtable arenas are
// outside the Go heap on Linux), hundreds of MiB a second allocated. At
// GOGC 100 the heap's goal is twice the live heap, so such a process
// collects dozens of times a second, and each cycle's fixed cost (stacks,
// globals, the mark workers' start and stop, the assists) is paid per
// cycle, not per byte.
//
// Start keeps the goal at about the live heap plus a fixed headroom
// instead: after every collection it sets GOGC to headroom over what the
// collector scans (live heap, stacks, globals), never below 100 (Go's
// default, where a large live heap ends up) and never above maxPercent.
// So memory above the live heap is bounded by the headroom, or by the live
// heap itself when that is larger, as at GOGC 100; with almost nothing
// live, by Go's smallest goal (4 MiB at GOGC 100) times maxPercent/100.
//
// Rules a change must keep:
//   - An operator's GOGC wins: Start does nothing when GOGC is set, even
//     to nothing.
//   - No timer and no goroutine of its own: it runs on the finalizer
//     goroutine once a collection has run, so an idle process is not woken
//     by it (the runtime's forced collection every two minutes runs it).
//   - The soft memory limit (GOMEMLIMIT, or serve's default) still bounds
//     the heap; this only changes the pace below it.
package gcpace

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// Headroom is the heap growth above what the collector scans that Start
// allows before the next collection: 32 MiB, sized so serve's RSS under the
// million-effect MCP load stays under make bench's 128 MiB target
// (docs/design.md, "The collector's pace").
const Headroom = 32 << 20

// maxPercent bounds GOGC when little is live (at start, idle, under
// callgrind): Go's smallest goal, 4 MiB at GOGC 100, becomes 40 MiB, the
// headroom's order. A lower cap costs collections where little is live
// (docs/design.md, "The collector's pace").
const maxPercent = 1000

var once sync.Once

// Start sets the pace as the package doc says, unless GOGC is set. It
// returns whether it did; calling it again does nothing more.
func Start() bool {
	if _, set := os.LookupEnv("GOGC"); set {
		return false
	}
	once.Do(func() {
		p := newPacer(Headroom)
		p.adjust()
		p.arm()
	})
	return true
}

// pacer reads what the last collection found live and sets GOGC from it.
type pacer struct {
	headroom uint64
	samples  []metrics.Sample
	percent  int
	stopped  atomic.Bool // tests only: the next finalizer neither adjusts nor re-arms
}

func newPacer(headroom uint64) *pacer {
	return &pacer{headroom: headroom, percent: -1, samples: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/gc/scan/globals:bytes"},
	}}
}

// sentinel is what the finalizer hangs on: large enough not to share a
// tiny-allocator block, whose other objects would keep it alive.
type sentinel struct{ _ [64]byte }

// arm sets a finalizer on a new unreachable object, which runs after the
// next collection and arms the one after it.
func (p *pacer) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if p.stopped.Load() {
			return
		}
		p.adjust()
		p.arm()
	})
}

// adjust sets GOGC to the headroom over the scanned bytes, within bounds.
func (p *pacer) adjust() {
	metrics.Read(p.samples)
	var scanned uint64
	for _, s := range p.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			scanned += s.Value.Uint64()
		}
	}
	pct := percentFor(scanned, p.headroom)
	if pct != p.percent {
		debug.SetGCPercent(pct)
		p.percent = pct
	}
}

// percentFor is the GOGC that lets the heap grow by headroom over scanned
// bytes, in steps of 10 (no new setting for every cycle), in [100,
// maxPercent].
func percentFor(scanned, headroom uint64) int {
	if scanned == 0 {
		return maxPercent
	}
	pct := float64(headroom) * 100 / float64(scanned)
	if pct >= maxPercent {
		return maxPercent
	}
	return max(100, int(pct)/10*10)
}
