package ledger

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	json "github.com/segmentio/encoding/json"
)

// Audit records are written by hand-written appenders rather than through
// json.Marshal's reflection: each record used to be encoded twice (once,
// hash empty, for its hash; again in its block), and the two encodings were
// a twentieth of an engine pair's instructions. The bytes must stay exactly
// json.Marshal's (segmentio's, as the package uses it): a record's hash is
// over them, and VerifyAudit recomputes it over records written by any
// version. So everything but the common case goes through json.Marshal:
// strings other than printable ASCII without HTML characters, quotes and
// backslashes, and the rare nested values (a threshold's budget, an
// approval's compensation). TestAuditEncodingIsMarshals and
// FuzzAuditEncodingIsMarshals hold the appenders to json.Marshal, and
// TestAuditEncodingCoversEveryEventField fails when Event gains a field
// appendEvent does not write: add it there, in the struct's order.

// appendAuditRecord appends r's JSON and returns it with the offset of its
// hash's value (just after `"hash":"`), where a hash written later goes.
func appendAuditRecord(b []byte, r *AuditRecord) ([]byte, int, error) {
	b = append(b, `{"chain":`...)
	b = appendJSONString(b, r.Chain)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, r.Seq, 10)
	b = append(b, `,"prev":`...)
	b = appendJSONString(b, r.Prev)
	b = append(b, `,"hash":"`...)
	at := len(b)
	if !plainJSONString(r.Hash) {
		return nil, 0, fmt.Errorf("encoding audit record: hash %q is not hex", r.Hash)
	}
	b = append(b, r.Hash...)
	b = append(b, `","event":`...)
	b, err := appendEvent(b, &r.Event)
	if err != nil {
		return nil, 0, err
	}
	return append(b, '}'), at, nil
}

// appendEvent appends ev's JSON.
func appendEvent(b []byte, ev *Event) ([]byte, error) {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, ev.ID)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, ev.Type)
	b = append(b, `,"at":`...)
	var err error
	if b, err = appendJSONTime(b, ev.At); err != nil {
		return nil, err
	}
	b = appendField(b, "namespace", ev.Namespace)
	b = appendField(b, "effect_id", ev.EffectID)
	b = appendField(b, "effect_type", ev.EffectType)
	b = appendField(b, "vendor", ev.Vendor)
	b = appendField(b, "operation", ev.Operation)
	if ev.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(ev.Attempt), 10)
	}
	b = appendField(b, "agent_id", ev.AgentID)
	b = appendField(b, "run_id", ev.RunID)
	b = appendField(b, "group_key", ev.GroupKey)
	b = appendField(b, "approval_id", ev.ApprovalID)
	b = appendField(b, "decision", string(ev.Decision))
	b = appendField(b, "state", string(ev.State))
	b = appendField(b, "reason", ev.Reason)
	if ev.CostMicros != nil {
		b = append(b, `,"cost_micros":`...)
		b = strconv.AppendInt(b, *ev.CostMicros, 10)
	}
	b = appendField(b, "actor", ev.Actor)
	b = appendField(b, "principal", ev.Principal)
	if ev.Count != 0 {
		b = append(b, `,"count":`...)
		b = strconv.AppendInt(b, int64(ev.Count), 10)
	}
	if ev.Budget != nil {
		if b, err = appendMarshalled(b, "budget", ev.Budget); err != nil {
			return nil, err
		}
	}
	b = appendField(b, "grant_id", ev.GrantID)
	if len(ev.Dimensions) > 0 {
		b = append(b, `,"dimensions":{`...)
		names := make([]string, 0, len(ev.Dimensions))
		for n := range ev.Dimensions {
			names = append(names, n)
		}
		slices.Sort(names)
		for i, n := range names {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, n)
			b = append(b, ':')
			b = appendJSONString(b, ev.Dimensions[n])
		}
		b = append(b, '}')
	}
	b = appendField(b, "rule", ev.Rule)
	if len(ev.NotApplied) > 0 {
		b = appendStrings(b, "ceilings_not_applied", ev.NotApplied)
	}
	b = appendField(b, "halt_id", ev.HaltID)
	b = appendField(b, "note", ev.Note)
	if ev.Compensation != nil {
		if b, err = appendMarshalled(b, "compensation", ev.Compensation); err != nil {
			return nil, err
		}
	}
	if ev.ApproversRequired != 0 {
		b = append(b, `,"approvers_required":`...)
		b = strconv.AppendInt(b, int64(ev.ApproversRequired), 10)
	}
	if len(ev.ApprovedBy) > 0 {
		b = appendStrings(b, "approved_by", ev.ApprovedBy)
	}
	b = appendField(b, "sink", ev.Sink)
	return append(b, '}'), nil
}

// appendField appends an omitempty string field (nothing when s is empty).
func appendField(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return appendJSONString(b, s)
}

// appendStrings appends a field whose value is a list of strings.
func appendStrings(b []byte, name string, ss []string) []byte {
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":[`...)
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendMarshalled appends a field whose value json.Marshal encodes.
func appendMarshalled(b []byte, name string, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding audit record: %w", err)
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return append(b, j...), nil
}

// appendJSONTime appends t as time.Time's MarshalJSON spells it.
func appendJSONTime(b []byte, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		j, err := json.Marshal(t) // its error
		if err != nil {
			return nil, fmt.Errorf("encoding audit record: %w", err)
		}
		return append(b, j...), nil
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendJSONString appends s as json.Marshal spells it.
func appendJSONString(b []byte, s string) []byte {
	if plainJSONString(s) {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	j, _ := json.Marshal(s) // a string always encodes
	return append(b, j...)
}

// plainJSONString reports whether json.Marshal writes s as itself quoted:
// printable ASCII without a quote, a backslash or a character it escapes
// for HTML (<, >, &). A table lookup a byte: every audit record's strings
// pass through here.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainJSONByte[s[i]] {
			return false
		}
	}
	return true
}

// plainJSONByte says which bytes plainJSONString accepts.
var plainJSONByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()
