package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"
)

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// idGen makes ULID-style ids: 48 bits of milliseconds and 80 random bits in
// Crockford base32, so ids are unguessable and sort by creation time. Within
// one millisecond (or if the clock steps back) the random part is
// incremented instead of redrawn, so ids made by one engine always sort in
// the order they were made.
type idGen struct {
	mu     sync.Mutex
	lastMs uint64
	hi     uint16 // top 16 of the 80 random bits
	lo     uint64 // low 64 of the 80 random bits
}

func (g *idGen) next(prefix string, now time.Time) string {
	g.mu.Lock()
	ms := uint64(now.UnixMilli())
	if ms > g.lastMs {
		var r [10]byte
		_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+)
		g.lastMs, g.hi, g.lo = ms, binary.BigEndian.Uint16(r[:2]), binary.BigEndian.Uint64(r[2:])
	} else {
		g.lo++
		if g.lo == 0 {
			g.hi++
		}
	}
	hi := g.lastMs<<16 | uint64(g.hi)
	lo := g.lo
	g.mu.Unlock()
	out := make([]byte, len(prefix)+26)
	copy(out, prefix)
	// 128 bits as 26 base32 digits: the first digit carries 3 bits.
	for i := 25; i >= 0; i-- {
		out[len(prefix)+i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out)
}

// newReplicaID names an engine on a shared store, for as long as it runs.
func newReplicaID() string {
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(id[:])
}
