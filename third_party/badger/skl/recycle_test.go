package skl

import (
	"fmt"
	"sync"
	"testing"

	"github.com/dgraph-io/badger/v4/y"
)

// A list built on the arena of an earlier one (Ratchet's patch: Recycle and
// NewSkiplistIn) holds only the keys put into it: nothing of the earlier
// list is reachable, whether the new list is empty or full.
func TestAListOnARecycledArenaHoldsOnlyItsOwnKeys(t *testing.T) {
	const size = 1 << 20
	var spare []byte
	first := NewSkiplist(size)
	first.Recycle = func(buf []byte) { spare = buf }
	for i := 0; i < 2000; i++ {
		first.Put(y.KeyWithTs([]byte(fmt.Sprintf("old%05d", i)), 1), y.ValueStruct{Value: []byte("old value")})
	}
	first.DecrRef()
	if spare == nil {
		t.Fatal("the last DecrRef did not give the arena to Recycle")
	}

	second := NewSkiplistIn(spare, size)
	if !second.Empty() {
		t.Fatal("a new list on a recycled arena is not empty: the earlier list's nodes are reachable")
	}
	if got := second.Get(y.KeyWithTs([]byte("old00000"), 1)); got.Value != nil {
		t.Fatalf("a new list on a recycled arena finds the earlier list's key, value %q", got.Value)
	}
	want := map[string]string{}
	for i := 0; i < 500; i++ {
		k := fmt.Sprintf("new%05d", i*3)
		want[k] = fmt.Sprintf("value %d", i)
		second.Put(y.KeyWithTs([]byte(k), 2), y.ValueStruct{Value: []byte(want[k])})
	}
	it := second.NewIterator()
	defer it.Close()
	seen := 0
	for it.SeekToFirst(); it.Valid(); it.Next() {
		k := string(y.ParseKey(it.Key()))
		w, ok := want[k]
		if !ok {
			t.Fatalf("the list on a recycled arena holds key %q it was never given", k)
		}
		if got := string(it.Value().Value); got != w {
			t.Fatalf("key %q: value %q, want %q", k, got, w)
		}
		seen++
	}
	if seen != len(want) {
		t.Fatalf("iterated %d keys, put %d", seen, len(want))
	}
	for k, w := range want {
		if got := string(second.Get(y.KeyWithTs([]byte(k), 2)).Value); got != w {
			t.Fatalf("Get(%q) = %q, want %q", k, got, w)
		}
	}
}

// An arena too small for the size asked is not reused.
func TestAShortBufferIsNotReused(t *testing.T) {
	s := NewSkiplistIn(make([]byte, 100), 1<<16)
	if got := len(s.arena.buf); got != 1<<16 {
		t.Fatalf("arena of %d bytes, want %d", got, 1<<16)
	}
}

// Whatever bytes an earlier list left in the buffer, concurrent writers
// and readers of a list built on it see only its own keys, in order.
func TestConcurrentWritersOnAJunkFilledArena(t *testing.T) {
	const size = 4 << 20
	for _, junk := range []byte{0xff, 0x10} {
		buf := make([]byte, size)
		for i := range buf {
			buf[i] = junk ^ byte(i)
		}
		l := NewSkiplistIn(buf, size)
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < 2000; i++ {
					k := y.KeyWithTs([]byte(fmt.Sprintf("w%d-%05d", w, i)), 1)
					l.Put(k, y.ValueStruct{Value: []byte(fmt.Sprintf("v%d-%d", w, i))})
					if got := string(l.Get(k).Value); got != fmt.Sprintf("v%d-%d", w, i) {
						t.Errorf("junk %#x: Get after Put of %q read %q", junk, k, got)
						return
					}
				}
			}(w)
		}
		wg.Wait()
		it := l.NewIterator()
		n, last := 0, []byte(nil)
		for it.SeekToFirst(); it.Valid(); it.Next() {
			if last != nil && y.CompareKeys(last, it.Key()) >= 0 {
				t.Fatalf("junk %#x: key %q after %q: out of order", junk, it.Key(), last)
			}
			last = append(last[:0], it.Key()...)
			n++
		}
		it.Close()
		if n != 8*2000 {
			t.Fatalf("junk %#x: iterated %d keys, put %d", junk, n, 8*2000)
		}
	}
}
