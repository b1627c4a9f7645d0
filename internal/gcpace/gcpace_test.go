package gcpace

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercentKeepsTheHeadroomWithinBounds(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		scanned uint64
		want    int
	}{
		{0, maxPercent},
		{1 * mib, maxPercent}, // 3200 capped
		{8 * mib, 400},        // 32 MiB over 8: the cap exactly
		{12 * mib, 260},       // 266, in steps of 10
		{32 * mib, 100},       // the headroom equals what is live: Go's default
		{500 * mib, 100},      // a large live heap: never below Go's default
		{16*mib + 1, 190},     // just over 16: 199.99 -> 190
		{16 * mib, 200},       // exactly
		{1<<62 + 1, 100},      // no overflow for absurd sizes
		{Headroom / 100, maxPercent},
	} {
		if got := percentFor(tc.scanned, Headroom); got != tc.want {
			t.Errorf("percentFor(%d MiB) = %d, want %d", tc.scanned/mib, got, tc.want)
		}
	}
}

func gogc() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

var keep [][]byte

// The pacer follows what each collection leaves live: a small live heap
// raises GOGC, a large one brings it back to 100, and it keeps running
// from the finalizer goroutine without being called again.
func TestThePaceFollowsTheLiveHeapAfterEachCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	p := newPacer(Headroom)
	p.adjust()
	p.arm()
	defer p.stopped.Store(true)
	waitFor := func(what string, ok func(int64) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			runtime.GC()
			if g := gogc(); ok(g) {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("GOGC %d after collections: want %s", g, what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("above 100 with little live", func(g int64) bool { return g > 100 })
	for range 80 {
		keep = append(keep, make([]byte, 1<<20)) // 80 MiB live
	}
	waitFor("100 with 80 MiB live", func(g int64) bool { return g == 100 })
	keep = nil
	waitFor("above 100 again once it is garbage", func(g int64) bool { return g > 100 })
}

func TestAnOperatorsGOGCWins(t *testing.T) {
	t.Setenv("GOGC", "")
	if Start() {
		t.Fatal("Start paced the collector with GOGC set to nothing")
	}
	t.Setenv("GOGC", "150")
	defer debug.SetGCPercent(debug.SetGCPercent(150))
	if Start() {
		t.Fatal("Start paced the collector with GOGC set")
	}
	runtime.GC()
	if g := gogc(); g != 150 {
		t.Fatalf("GOGC %d, want the operator's 150", g)
	}
}
