package ledger

import (
	"encoding/binary"
	"time"
)

// The key layout: every key the engine stores, in one place. A key is a
// kind (one byte) and its parts, each after a NUL. Every part that comes
// from a caller is validated to contain no NUL (checkText refuses control
// characters), so NUL separates parts unambiguously; the two time indexes
// hold 8 bytes of big-endian Unix nanoseconds as a part, which may contain
// NUL, and are split by position (timeKeyParts). Effect ids are ULID-like
// and sort by time. TestEveryStoredKeyHasADocumentedLayout checks every key
// a ledger holds after a scenario that writes each kind against keyLayouts.
//
//	e\0<effect_id>                              effect record (codec.go)
//	k\0<ns>\0<idempotency_key>                  → effect_id
//	n\0<ns>\0<effect_id>                        namespace listing
//	r\0<ns>\0<run_id>\0<effect_id>              run listing
//	m\0<ns>\0<group_key>\0<effect_id>           group member
//	g\0<ns>\0<group_key>                        group record (JSON)
//	a\0<approval_id>                            → effect_id
//	l\0<lease expiry, 8 bytes BE>\0<effect_id>  pending leases, for the reaper (a new effect's comes later on an exclusive store: leasemark.go)
//	t\0<retained, 8 bytes BE>\0<effect_id>      retention index: written before 2026-12-02, still swept (Purge)
//	u\0<ns>\0<agent_id>                         an agent's unreported expiries: count and oldest (unreported.go, JSON)
//	y\0<ns>\0<agent_id>\0<since, 16 hex digits>\0<effect_id> one of them, in the order the oldest is chosen (unreported.go)
//	c\0<ns>\0<ceiling>\0<scope>\0<run>          ceiling counter, or a shared store's pool (budget.go)
//	c\0<ns>\0<ceiling>\0<scope>\0<run>\0<replica> one replica's share of a pool
//	m\0states                                  state counts, exclusive store (JSON)
//	m\0secret-check                            the HMAC secret's check value
//	m\0ping                                    written by Ping
//	m\0lease-mark                              every pending effect whose id sorts before it has its l entry (leasemark.go)
//	m\0halts                                   the active halts (halt.go, JSON)
//	s\0<replica>                                one replica's state counts, shared store (JSON)
//	h\0<chain>\0<seq, 16 hex digits>            a batch's audit records, from that seq (events.go)
//	j\0<chain>                                  an audit chain's head (JSON)
//	o\0<sink>\0<event_id>                       an outbox entry: an event to deliver to a sink (JSON)
//	v\0<vendor>\0<vendor key>                   → effect_id NUL attempt: whose vendor key it is (settle.go)
//	x\0<sink>\0<ref>                            what a sink needs to find a delivery again (sinkrefs.go, JSON)
//	b\0<ns>\0<ceiling>\0<scope>\0<run>          the budget thresholds a counter fired, and when (thresholds.go, JSON)
//	d\0<expires, 8 bytes BE>\0<effect_id>       approval requests by expiry, for the expiry sweep (approvals.go)
//	q\0<grant_id>                               a grant: a scoped approval and what it covered (grants.go, JSON)
//	w\0<effect_id>                              a recovery claim: expiry (8 bytes BE) and attempt (recoveryclaim.go)
//	z\0<expires, 8 bytes BE>\0<state id>        a redeemed MCP requestState, until it expires (requeststate.go)
//
// The kind m holds both group members (three parts) and the engine's own
// records (one part); they never collide, as the number of parts differs.
// The engine's records keep that kind because existing ledgers hold them
// there, and a fleet mid-upgrade could not move them atomically.
const (
	kindEffect          = "e"
	kindIdemKey         = "k"
	kindNamespace       = "n"
	kindRun             = "r"
	kindGroupMember     = "m"
	kindGroup           = "g"
	kindApproval        = "a"
	kindLease           = "l"
	kindRetention       = "t"
	kindUnreported      = "u"
	kindUnreportedIndex = "y"
	kindCounter         = "c"
	kindMeta            = kindGroupMember // the same stored byte: see above
	kindReplicaCounts   = "s"
	kindAudit           = "h"
	kindAuditHead       = "j"
	kindOutbox          = "o"
	kindVendorKey       = "v"
	kindSinkRef         = "x"
	kindThreshold       = "b"
	kindApprovalDue     = "d"
	kindGrant           = "q"
	kindRecoveryClaim   = "w"
	kindRedeemed        = "z"
)

// The engine's own records (kindMeta). secretCheckKey holds a keyed hash of
// a constant, written when the ledger is first opened: it proves later
// opens use the same secret without revealing anything about it.
var (
	exclusiveCountsKey = key(kindMeta, "states")
	secretCheckKey     = key(kindMeta, "secret-check")
	pingKey            = key(kindMeta, "ping")
)

// keyLayouts is the layout above as data: for each kind, the numbers of
// NUL-separated parts its keys may have (0 for the time indexes, which are
// checked by length instead).
var keyLayouts = map[string][]int{
	kindEffect:          {1},
	kindIdemKey:         {2},
	kindNamespace:       {2},
	kindRun:             {3},
	kindGroupMember:     {3, 1}, // 3: a group member; 1: a kindMeta record (the same byte)
	kindGroup:           {2},
	kindApproval:        {1},
	kindLease:           {0},
	kindRetention:       {0},
	kindUnreported:      {2},
	kindUnreportedIndex: {4},
	kindCounter:         {4, 5},
	kindReplicaCounts:   {1},
	kindAudit:           {2},
	kindAuditHead:       {1},
	kindOutbox:          {2},
	kindVendorKey:       {2},
	kindSinkRef:         {2},
	kindThreshold:       {4},
	kindApprovalDue:     {0},
	kindGrant:           {1},
	kindRecoveryClaim:   {1},
	kindRedeemed:        {0},
}

func key(kind string, parts ...string) []byte {
	n := len(kind)
	for _, p := range parts {
		n += 1 + len(p)
	}
	b := make([]byte, 0, n)
	b = append(b, kind...)
	for _, p := range parts {
		b = append(b, 0)
		b = append(b, p...)
	}
	return b
}

// prefix is key(kind, parts...) followed by a separator, for scanning.
func prefix(kind string, parts ...string) []byte {
	return append(key(kind, parts...), 0)
}

// timeKey is a time index key: kind\0<unix nanos BE>\0<id>.
func timeKey(kind string, t time.Time, id string) []byte {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(t.UnixNano()))
	return key(kind, string(ts[:]), id)
}

// timeKeyParts splits a time index key.
func timeKeyParts(k []byte) (time.Time, string, bool) {
	if len(k) < 2+8+1 {
		return time.Time{}, "", false
	}
	ts := int64(binary.BigEndian.Uint64(k[2:10]))
	return time.Unix(0, ts), string(k[11:]), true
}

// lastPart returns what follows the last NUL in k.
func lastPart(k []byte) string {
	for i := len(k) - 1; i >= 0; i-- {
		if k[i] == 0 {
			return string(k[i+1:])
		}
	}
	return string(k)
}
