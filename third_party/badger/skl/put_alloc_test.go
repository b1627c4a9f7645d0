package skl

import (
	"encoding/binary"
	"testing"

	"github.com/dgraph-io/badger/v4/y"
)

// Putting a key into a skiplist with room allocates nothing (Ratchet's
// seventh patch, arena.go): v4.9.6 boxed the arena's size check's
// arguments for every node, key and value: up to six allocations a key
// (two a check), four in this Put.
func TestAPutIntoASkiplistWithRoomAllocatesNothing(t *testing.T) {
	l := NewSkiplist(1 << 20)
	defer l.DecrRef()
	i := uint64(0)
	key := make([]byte, 16)
	allocs := testing.AllocsPerRun(1000, func() {
		i++
		binary.BigEndian.PutUint64(key, i<<20) // offsets past 255: boxed, they allocated
		l.Put(y.KeyWithTs(key[:8], 1), y.ValueStruct{Value: key})
	})
	if allocs > 1 { // y.KeyWithTs's own key
		t.Fatalf("a Put allocated %v times, want only the key's", allocs)
	}
}
