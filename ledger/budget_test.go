package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucketsAreConservative(t *testing.T) {
	c := &ceiling{Ceiling: Ceiling{Name: "c", Window: "1h"}, window: time.Hour, limit: 10, money: true}
	var r counterRec
	t0 := time.Date(2026, 1, 1, 0, 0, 30, 0, time.UTC) // mid-bucket (buckets are 1 minute)
	s, e := c.bucketFor(t0)
	r.add(c, t0, s, e, 7, 1)
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{
		{0, 7},
		{time.Hour - time.Second, 7},
		{time.Hour, 7}, // truly slid out at t0+1h, still counted: early refusal, never late
		{time.Hour + 29*time.Second, 7},
		{time.Hour + 30*time.Second, 0}, // the whole bucket has left the window
	} {
		if got := r.counted(c, t0.Add(tc.at)); got != tc.want {
			t.Errorf("counted at +%v = %d, want %d", tc.at, got, tc.want)
		}
	}
	// Clock stepping backwards: a grant in an earlier bucket still counts.
	s2, e2 := c.bucketFor(t0.Add(-5 * time.Minute))
	r.add(c, t0, s2, e2, 2, 1)
	if got := r.counted(c, t0); got != 9 {
		t.Fatalf("counted after backwards grant = %d", got)
	}
	if satAdd(1<<62, 1<<62) < 0 {
		t.Fatal("saturating add overflowed")
	}
}

func TestCounterCodec(t *testing.T) {
	plain := counterRec{Namespace: "shop", Ceiling: "daily", Per: "dimension:counterparty", Scope: "abc", RunID: "r1",
		Unit: "micros", Limit: 500, Window: "24h", Buckets: []bucket{{1, 2, 3, 4}, {-5, 1 << 62, 0, 9}}}
	pool, share := plain, plain
	pool.Buckets, pool.Grant, pool.Shares = nil, 300, []string{"0a1b", "2c3d"}
	share.Replica, share.Grant = "0a1b", 120
	for _, tc := range []struct {
		name    string
		r       counterRec
		version byte
	}{{"one writer's counter", plain, counterVersion}, {"a pool", pool, counterVersionShares}, {"a share", share, counterVersionShares}} {
		b := tc.r.encode()
		if b[0] != tc.version {
			t.Errorf("%s: version %d, want %d (a ledger without shares keeps version 1)", tc.name, b[0], tc.version)
		}
		got := counterRec{Replica: "stale", Grant: 7, Shares: []string{"stale"}}
		if err := decodeCounter(b, &got); err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.r) {
			t.Fatalf("%s: round trip: %+v %v", tc.name, got, err)
		}
		for i := range len(b) {
			if err := decodeCounter(b[:i], &got); err == nil {
				t.Fatalf("%s: a record cut to %d bytes decoded", tc.name, i)
			}
		}
		// Unlabelled (a begin's read, which sets the labels itself): the
		// counts, grant and shares as labelled, the labels left alone.
		bare := counterRec{Namespace: "mine", Replica: "mine", Grant: 7, Shares: []string{"stale"}}
		want := tc.r
		want.Namespace, want.Ceiling, want.Per, want.Scope, want.RunID, want.Unit, want.Window, want.Replica = "mine", "", "", "", "", "", "", "mine"
		if err := decodeCounterLabelled(b, &bare, false); err != nil || fmt.Sprintf("%+v", bare) != fmt.Sprintf("%+v", want) {
			t.Fatalf("%s: unlabelled: %+v %v, want %+v", tc.name, bare, err, want)
		}
		for i := range len(b) {
			if err := decodeCounterLabelled(b[:i], &bare, false); err == nil {
				t.Fatalf("%s: unlabelled: a record cut to %d bytes decoded", tc.name, i)
			}
		}
	}
}

// TestPastSpendIsMergedNeverForgotten: whatever the clock reads from one
// grant to the next (steps ahead by hours, back again), a counter counts
// exactly what every grant ever made would count at the latest reading
// yet, and at least that at any other: spend that left the window is merged
// into bins of past spend, never dropped, and the bins stay bounded.
func TestPastSpendIsMergedNeverForgotten(t *testing.T) {
	c := &ceiling{Ceiling: Ceiling{Name: "c", Window: "1h"}, window: time.Hour, limit: 1 << 40, money: true}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var r counterRec
	var all []bucket // every grant, never merged or dropped
	truth := func(at time.Time) (n int64) {
		for _, b := range all {
			if live(b, c.window, at) {
				n += b.Amount
			}
		}
		return n
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now, latest := t0, t0
	var readings []time.Time
	for i := range 2000 {
		switch rng.IntN(10) {
		case 0:
			now = now.Add(time.Duration(rng.IntN(5)+1) * time.Hour) // a jump ahead
		case 1:
			now = now.Add(-time.Duration(rng.IntN(3)+1) * time.Hour) // corrected, or a step back
		default:
			now = now.Add(time.Duration(rng.IntN(300)) * time.Second)
		}
		readings = append(readings, now)
		s, e := c.bucketFor(now)
		amount := int64(rng.IntN(100) + 1)
		r.add(c, now, s, e, amount, 1)
		all = append(all, bucket{Start: s, End: e, Amount: amount, Count: 1})
		if !now.Before(latest) {
			latest = now
			if got, want := r.counted(c, now), truth(now); got != want {
				t.Fatalf("grant %d: counted %d at the latest reading, want exactly %d", i, got, want)
			}
		}
		for _, at := range readings[max(0, len(readings)-50):] {
			if got, want := r.counted(c, at), truth(at); got < want {
				t.Fatalf("grant %d: at an earlier reading %v the counter counts %d, less than the %d granted then", i, at.Sub(t0), got, want)
			}
		}
		if live := liveBuckets(r.Buckets, c, now); len(r.Buckets)-live > pastBins {
			t.Fatalf("grant %d: %d buckets kept beyond the %d live ones, want at most %d bins of past spend", i, len(r.Buckets)-live, live, pastBins)
		}
	}
}

func liveBuckets(bs []bucket, c *ceiling, now time.Time) (n int) {
	for _, b := range bs {
		if live(b, c.window, now) {
			n++
		}
	}
	return n
}
