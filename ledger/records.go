package ledger

import (
	"encoding/binary"
	"fmt"
	json "github.com/segmentio/encoding/json"
	"sort"
	"time"
)

// Key layout. Every part is validated to contain no NUL byte, so NUL
// separates parts unambiguously. Effect ids are ULID-like and sort by time.
//
//	e\0<effect_id>                          effect record (JSON)
//	k\0<ns>\0<idempotency_key>              → effect_id
//	n\0<ns>\0<effect_id>                    namespace listing
//	r\0<ns>\0<run_id>\0<effect_id>          run listing
//	m\0<ns>\0<group_key>\0<effect_id>       group members
//	g\0<ns>\0<group_key>                    group record (JSON)
//	a\0<approval_id>                        → effect_id
//	l\0<lease expiry, 8 bytes BE>\0<id>     pending leases, for the reaper
//	t\0<completed, 8 bytes BE>\0<id>        finished effects, for retention
//	u\0<ns>\0<agent_id>                     unreported expirations of an agent
//	c\0<ns>\0<ceiling>\0<scope>             ceiling counter (JSON)
//	m\0states                               state counts, exclusive store (JSON)
//	s\0<replica>                            one replica's state counts, shared store (JSON)
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

// effectRec is the stored effect: the public view plus bookkeeping that is
// never shown as is.
type effectRec struct {
	Effect
	// Dimensions maps each dimension name to the keyed hash of its value.
	Dimensions   map[string]string `json:"dimensions,omitempty"`
	Reservations []reservation     `json:"reservations,omitempty"`
	// PriorApprovals are the ids of earlier approval requests of this
	// effect, whose index entries go when it is purged.
	PriorApprovals []string  `json:"prior_approvals,omitempty"`
	GrantedAt      time.Time `json:"granted_at,omitzero"`
	// UnreportedAt is set while the effect counts as an unreported expiry.
	UnreportedAt time.Time `json:"unreported_at,omitzero"`
	// RetainedAt is the time under which it sits in the retention index.
	RetainedAt time.Time `json:"retained_at,omitzero"`
	// AttemptAgent is the agent that began the current attempt, which a
	// token fixed to another agent may not report or resolve ("" in records
	// written before it was kept: then AgentID).
	AttemptAgent string `json:"attempt_agent,omitempty"`
	// Records are stored in the binary form of reccodec.go; records
	// written as JSON (segmentio's encoding/json, which ignores omitzero:
	// zero times were written out and read back as zero) are still read.
	//
	// stored is the state as last written, so a write knows which state
	// count to move.
	stored State
}

// reservation is what one attempt holds in one ceiling counter.
type reservation struct {
	Counter string `json:"counter"`
	Bucket  int64  `json:"bucket"`
	Amount  int64  `json:"amount"`
	Count   int64  `json:"count"`
}

// view is the public Effect as of now: a pending effect whose lease has run
// out shows as indeterminate even before the reaper has written it, and a
// pending approval past its expiry shows as expired.
func (r *effectRec) view(now time.Time) Effect {
	v := r.Effect
	if v.State == StatePending && v.LeaseExpiresAt != nil && !now.Before(*v.LeaseExpiresAt) {
		v.State, v.Reason, v.Since = StateIndeterminate, ReasonLeaseExpired, v.LeaseExpiresAt
	}
	if v.Approval != nil {
		a := *v.Approval
		if a.State == ApprovalPending && !now.Before(a.ExpiresAt) {
			a.State = ApprovalExpired
		}
		v.Approval = &a
	}
	v.DimensionNames = nil
	for name := range r.Dimensions {
		v.DimensionNames = append(v.DimensionNames, name)
	}
	sort.Strings(v.DimensionNames)
	return v
}

// groupRec is the stored state of a group.
type groupRec struct {
	State     string    `json:"state"`
	Reason    string    `json:"reason,omitempty"`
	UnwoundAt time.Time `json:"unwound_at,omitzero"`
}

// agentRec tracks an agent's effects whose leases expired unreported.
type agentRec struct {
	Unreported map[string]time.Time `json:"unreported"`
}

// oldest returns the earliest unreported effect.
func (a *agentRec) oldest() (string, time.Time) {
	var id string
	var at time.Time
	for k, t := range a.Unreported {
		if id == "" || t.Before(at) || (t.Equal(at) && k < id) {
			id, at = k, t
		}
	}
	return id, at
}

func getJSON(r Reader, k []byte, v any) error {
	b, err := r.Get(k)
	if err != nil {
		return err
	}
	return decodeJSON(b, v)
}

func setJSON(t Txn, k []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %q: %w", k[:1], err)
	}
	return t.Set(k, b)
}

func decodeJSON(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decoding ledger record: %w", err)
	}
	return nil
}
