package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"strings"
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

// idTime is the time an id made by idGen carries (its milliseconds), and
// false for a string that is not such an id. An engine's ids never carry a
// time before its clock's reading when it made them (a clock stepping back
// keeps the last time), so an effect finishes no earlier than its id says,
// by the clock of the engine that made it.
func idTime(id string) (time.Time, bool) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 || len(id)-i-1 != 26 {
		return time.Time{}, false
	}
	_, ms, ok := decodeBase32(id[i+1 : i+11]) // 10 digits: 3 + 9×5 bits, the 48 of the time
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(int64(ms)), true
}

// decodeBase32 reads up to 26 of idGen's Crockford digits as a number of
// up to 128 bits, hi and lo; false for any other character.
func decodeBase32(s string) (hi, lo uint64, ok bool) {
	for _, c := range []byte(s) {
		d := strings.IndexByte(crockford, c)
		if d < 0 {
			return 0, 0, false
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(d)
	}
	return hi, lo, true
}

// newReplicaID names an engine on a shared store, for as long as it runs.
func newReplicaID() string {
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(id[:])
}

// seed makes every id g makes from now on sort after id, one made by an
// idGen (perhaps by an earlier process, whose clock ran ahead of this
// one's); anything else is ignored.
func (g *idGen) seed(id string) {
	i := strings.LastIndexByte(id, '_')
	if i < 0 || len(id)-i-1 != 26 {
		return
	}
	hi, lo, ok := decodeBase32(id[i+1:])
	if !ok {
		return
	}
	ms, rhi := hi>>16, uint16(hi)
	g.mu.Lock()
	defer g.mu.Unlock()
	if ms > g.lastMs || ms == g.lastMs && (rhi > g.hi || rhi == g.hi && lo > g.lo) {
		g.lastMs, g.hi, g.lo = ms, rhi, lo
	}
}
