package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Clock tells the engine the time; tests inject one they control so leases,
// windows and expiry are tested without sleeping.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID returns prefix followed by 26 characters of a ULID: 48 bits of
// milliseconds and 80 random bits in Crockford base32, so ids are unguessable
// and sort by creation time.
func newID(prefix string, now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], uint64(now.UnixMilli())<<16)
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails (Go 1.24+)
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
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
