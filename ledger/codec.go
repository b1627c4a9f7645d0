package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	json "github.com/segmentio/encoding/json"
)

// Effect records are stored in a compact binary form: encoding them as JSON
// was a fifth of the writer goroutine's CPU, and every op waits for the
// writer, a serial stage (see "What limits it" in doc.go). The first byte
// is the format: recBinary, or '{' for a record written as JSON by an
// earlier version, which is still read (and rewritten in binary when the
// effect next changes). After it come the fields in a fixed order: strings
// and byte strings as a uvarint length and the bytes, integers as varints,
// optional values behind a presence byte, times as Unix seconds and
// nanoseconds (read back in UTC, as JSON gave them). The compensation and
// the approval, rare and nested, are embedded as JSON. TestRecordCodecCoversEveryField fails when
// a field is added to the record but not here. A field is added at the end
// under a new format byte, so that a truncated record is never read as an
// older format's whole one; every earlier binary format is still read.
//
// A record whose agents are all its first agent (AttemptAgent and
// UnreportedAgent empty or AgentID: nearly all) is written in format 1, so
// that the version before format 2 reads it and a rolling upgrade or a
// rollback of a fleet meets format 2 only for records another agent took
// over; the decoder fills the agents in from AgentID. Likewise format 3
// (Operation, the vendor's operation of a proxied effect) is written only
// for a record that has one.
const (
	recBinaryV1 = 1 // without AttemptAgent and UnreportedAgent
	recBinaryV2 = 2 // without Operation
	recBinary   = 3
)

func encodeEffect(r *effectRec) ([]byte, error) {
	w := recWriter{b: make([]byte, 0, 512)}
	attemptAgent, unreportedAgent := r.AttemptAgent, r.UnreportedAgent
	if attemptAgent == r.AgentID {
		attemptAgent = ""
	}
	if unreportedAgent == r.AgentID || r.UnreportedAt.IsZero() {
		unreportedAgent = ""
	}
	format := byte(recBinaryV1)
	switch {
	case r.Operation != "":
		format = recBinary
	case attemptAgent != "" || unreportedAgent != "":
		format = recBinaryV2
	}
	w.b = append(w.b, format)
	e := &r.Effect
	for _, s := range []string{e.EffectID, e.Namespace, e.IdempotencyKey, e.EffectType, e.Vendor, e.RunID,
		e.AgentID, e.GroupKey, string(e.State), e.Fingerprint, e.VendorReference, e.Error, e.Reason,
		e.CompensatesEffectID, e.CompensatedBy, e.ResolvedBy, e.ResolutionNote} {
		w.str(s)
	}
	w.int(int64(e.Attempt))
	w.strs(e.DimensionNames)
	w.optInt(e.EstimatedCostMicros)
	w.optInt(e.ActualCostMicros)
	w.optTime(e.LeaseExpiresAt)
	w.str(string(e.Result))
	w.optTime(e.Since)
	if err := w.json(e.Compensation != nil, e.Compensation); err != nil {
		return nil, err
	}
	if err := w.json(e.Approval != nil, e.Approval); err != nil {
		return nil, err
	}
	w.time(e.CreatedAt)
	w.time(e.UpdatedAt)
	w.optTime(e.CompletedAt)
	w.int(int64(len(r.Dimensions)))
	for _, k := range sortedKeys(r.Dimensions, make([]string, 0, 8)) {
		w.str(k)
		w.str(r.Dimensions[k])
	}
	w.int(int64(len(r.Reservations)))
	for _, res := range r.Reservations {
		w.str(res.Counter)
		w.int(res.Bucket)
		w.int(res.Amount)
		w.int(res.Count)
	}
	w.strs(r.PriorApprovals)
	w.time(r.GrantedAt)
	w.time(r.UnreportedAt)
	w.time(r.RetainedAt)
	if format >= recBinaryV2 {
		w.str(attemptAgent)
		w.str(unreportedAgent)
	}
	if format >= recBinary {
		w.str(r.Operation)
	}
	return w.b, nil
}

func decodeEffect(b []byte, r *effectRec) error {
	if len(b) > 0 && b[0] == '{' {
		return decodeJSON(b, r)
	}
	if len(b) == 0 || b[0] < recBinaryV1 || b[0] > recBinary {
		return errors.New("decoding ledger record: unknown format")
	}
	d := recReader{b: b[1:]}
	e := &r.Effect
	var state string
	for _, s := range []*string{&e.EffectID, &e.Namespace, &e.IdempotencyKey, &e.EffectType, &e.Vendor, &e.RunID,
		&e.AgentID, &e.GroupKey, &state, &e.Fingerprint, &e.VendorReference, &e.Error, &e.Reason,
		&e.CompensatesEffectID, &e.CompensatedBy, &e.ResolvedBy, &e.ResolutionNote} {
		*s = d.str()
	}
	e.State = State(state)
	e.Attempt = int(d.int())
	e.DimensionNames = d.strs()
	e.EstimatedCostMicros = d.optInt()
	e.ActualCostMicros = d.optInt()
	e.LeaseExpiresAt = d.optTime()
	if res := d.str(); res != "" {
		e.Result = json.RawMessage(res)
	}
	e.Since = d.optTime()
	d.json(&e.Compensation)
	d.json(&e.Approval)
	e.CreatedAt = d.time()
	e.UpdatedAt = d.time()
	e.CompletedAt = d.optTime()
	if n := d.count(); n > 0 {
		r.Dimensions = make(map[string]string, n)
		for range n {
			k := d.str()
			r.Dimensions[k] = d.str()
		}
	}
	if n := d.count(); n > 0 {
		r.Reservations = make([]reservation, n)
		for i := range r.Reservations {
			r.Reservations[i] = reservation{Counter: d.str(), Bucket: d.int(), Amount: d.int(), Count: d.int()}
		}
	}
	r.PriorApprovals = d.strs()
	r.GrantedAt = d.time()
	r.UnreportedAt = d.time()
	r.RetainedAt = d.time()
	if b[0] >= recBinaryV2 {
		r.AttemptAgent = d.str()
		r.UnreportedAgent = d.str()
	}
	if b[0] >= recBinary {
		e.Operation = d.str()
	}
	if r.AttemptAgent == "" {
		r.AttemptAgent = e.AgentID
	}
	if r.UnreportedAgent == "" && !r.UnreportedAt.IsZero() {
		r.UnreportedAgent = e.AgentID
	}
	if d.err == nil && len(d.b) > 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return fmt.Errorf("decoding ledger record: %w", d.err)
	}
	return nil
}

// sortedKeys appends m's keys to dst in order. A record's few dimensions
// sort in dst's room, on the stack when dst is (slices.Sorted of
// maps.Keys took three allocations a record).
func sortedKeys(m map[string]string, dst []string) []string {
	for k := range m {
		dst = append(dst, k)
	}
	slices.Sort(dst)
	return dst
}

type recWriter struct{ b []byte }

func (w *recWriter) str(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}

func (w *recWriter) int(v int64) { w.b = binary.AppendVarint(w.b, v) }

func (w *recWriter) strs(ss []string) {
	w.int(int64(len(ss)))
	for _, s := range ss {
		w.str(s)
	}
}

func (w *recWriter) optInt(p *int64) {
	if p == nil {
		w.b = append(w.b, 0)
		return
	}
	w.b = append(w.b, 1)
	w.int(*p)
}

// time writes t as seconds and nanoseconds since the epoch; the zero time
// is kept apart from every other.
func (w *recWriter) time(t time.Time) {
	if t.IsZero() {
		w.b = append(w.b, 0)
		return
	}
	w.b = append(w.b, 1)
	w.int(t.Unix())
	w.int(int64(t.Nanosecond()))
}

func (w *recWriter) optTime(p *time.Time) {
	if p == nil {
		w.b = append(w.b, 2)
		return
	}
	w.time(*p)
}

// json writes a nested struct as JSON, or nothing when it is absent.
func (w *recWriter) json(present bool, v any) error {
	if !present {
		w.str("")
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding record: %w", err)
	}
	w.str(string(b))
	return nil
}

type recReader struct {
	b   []byte
	err error
}

func (d *recReader) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("truncated or corrupt %s", what)
	}
	d.b = nil
}

func (d *recReader) str() string {
	n, k := binary.Uvarint(d.b)
	if k <= 0 || n > uint64(len(d.b)-k) {
		d.fail("string")
		return ""
	}
	s := string(d.b[k : k+int(n)])
	d.b = d.b[k+int(n):]
	return s
}

func (d *recReader) int() int64 {
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.fail("integer")
		return 0
	}
	d.b = d.b[k:]
	return v
}

// count reads a length, which cannot exceed the bytes left.
func (d *recReader) count() int {
	n := d.int()
	if n < 0 || n > int64(len(d.b)) {
		d.fail("count")
		return 0
	}
	return int(n)
}

func (d *recReader) strs() []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	ss := make([]string, n)
	for i := range ss {
		ss[i] = d.str()
	}
	return ss
}

func (d *recReader) flag() byte {
	if len(d.b) == 0 {
		d.fail("flag")
		return 0
	}
	f := d.b[0]
	d.b = d.b[1:]
	return f
}

func (d *recReader) optInt() *int64 {
	if d.flag() != 1 {
		return nil
	}
	v := d.int()
	return &v
}

func (d *recReader) timeAfter(f byte) time.Time {
	switch f {
	case 0:
		return time.Time{}
	case 1:
		sec := d.int()
		return time.Unix(sec, d.int()).UTC()
	}
	d.fail("time")
	return time.Time{}
}

func (d *recReader) time() time.Time { return d.timeAfter(d.flag()) }

func (d *recReader) optTime() *time.Time {
	f := d.flag()
	if f == 2 {
		return nil
	}
	t := d.timeAfter(f)
	return &t
}

// json reads what recWriter.json wrote into *dst, a pointer to a pointer.
func (d *recReader) json(dst any) {
	s := d.str()
	if s == "" || d.err != nil {
		return
	}
	if err := json.Unmarshal([]byte(s), dst); err != nil && d.err == nil {
		d.err = err
	}
}

// getJSON, setJSON and decodeJSON store the records kept as JSON (groups,
// agents' unreported summaries, state counts).
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
