package ledger

import (
	stdjson "encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	json "github.com/segmentio/encoding/json"
)

// fullEvent is an event with every field set, its strings s.
func fullEvent(s string, at time.Time, n int64) Event {
	return Event{ID: "evt_" + s, Type: s, At: at, Namespace: s, EffectID: s, EffectType: s, Vendor: s, Operation: s,
		Attempt: int(n), AgentID: s, RunID: s, GroupKey: s, ApprovalID: s, Decision: Decision(s), State: State(s), Reason: s,
		CostMicros: &n, Actor: s, Count: int(n), GrantID: s, Rule: s, HaltID: s, Note: s,
		Budget:            &BudgetThreshold{Ceiling: s, Per: s, Scope: s, Window: s, Unit: s, Limit: n, Counted: n, Threshold: 0.8},
		Dimensions:        map[string]string{s: s, "b": "x" + s, "a": s + "y"},
		NotApplied:        []string{s, "per-" + s},
		Compensation:      &Compensation{EffectType: s, Vendor: s, EstimatedCostMicros: &n, Description: s},
		ApproversRequired: int(n), ApprovedBy: []string{s, "admin:" + s},
	}
}

// checkAuditEncoding compares the appenders with json.Marshal for a record
// of ev: the record alone and in a block.
func checkAuditEncoding(t *testing.T, ev Event) {
	t.Helper()
	r := AuditRecord{Chain: "local", Seq: 7, Prev: "ab12", Hash: "", Event: ev}
	want, err := json.Marshal(&r)
	if err != nil {
		t.Skip("json.Marshal refuses it:", err)
	}
	got, _, err := appendAuditRecord(nil, &r)
	if err != nil {
		t.Fatalf("appendAuditRecord: %v (json.Marshal: %s)", err, want)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("record, hash empty (-json.Marshal +appender):\n%s", diff)
	}
	h, err := r.computeHash()
	if err != nil {
		t.Fatal(err)
	}
	r.Hash = h
	want, _ = json.Marshal(&r)
	got, at, _ := appendAuditRecord(nil, &r)
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("record (-json.Marshal +appender):\n%s", diff)
	}
	if got := string(got[at : at+len(h)]); got != h {
		t.Errorf("hash offset points at %q, want %q", got, h)
	}
}

// The audit appenders write what json.Marshal writes, byte for byte, for
// the events the engine writes and for odd ones: records written before
// them verify, and so do those written after.
func TestAuditEncodingIsMarshals(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)
	cost := int64(1000)
	for name, ev := range map[string]Event{
		"begin":        {ID: "evt_1", Type: EventEffectBegun, At: at, Namespace: "default", EffectID: "eff_1", EffectType: "bench.charge", Attempt: 1, AgentID: "bench", Decision: DecisionExecute, State: StatePending, CostMicros: &cost, Actor: "agent:bench", Dimensions: map[string]string{"counterparty": "9f8e"}},
		"empty":        {},
		"zero cost":    {ID: "evt_2", Type: EventEffectReported, At: at, CostMicros: new(int64)},
		"plain":        fullEvent("payment.charge", at, 42),
		"html":         fullEvent("<a href='x'>&</a>", at, -1),
		"quotes":       fullEvent(`say "hi" \ there`, at, 1<<62),
		"controls":     fullEvent("tab\tnew\nline\x00\x01\x1f\x7f\b\f", at, 0),
		"unicode":      fullEvent("é ☃ \u2028 \u2029 \U0001F600", at, 3),
		"invalid":      fullEvent("bad \xff\xfe utf-8", at, 3),
		"local time":   fullEvent("x", at.In(time.FixedZone("", -7*3600)), 1),
		"whole second": fullEvent("x", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 1),
		"year 10000":   fullEvent("x", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), 1),
	} {
		t.Run(name, func(t *testing.T) { checkAuditEncoding(t, ev) })
	}
}

func FuzzAuditEncodingIsMarshals(f *testing.F) {
	f.Add("payment.charge", int64(1000), int64(0))
	f.Add("<&>\"\\\u2028\xff", int64(-5), int64(1764637323456789000))
	f.Fuzz(func(t *testing.T, s string, n, nanos int64) {
		checkAuditEncoding(t, fullEvent(s, time.Unix(0, nanos), n))
	})
}

// A block of records is the JSON array json.Marshal writes of them.
func TestAuditBlockIsMarshals(t *testing.T) {
	h := &Engine{audit: true} // one exclusive chain: "local"
	at := time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC)
	evs := []Event{fullEvent("a", at, 1), fullEvent("<b>", at.Add(-time.Hour), 2), {ID: "evt_c", Type: EventEffectBegun, At: at}}
	tx := &memTxn{vals: map[string][]byte{}}
	if err := h.appendAudit(tx, evs, at); err != nil {
		t.Fatal(err)
	}
	block := tx.vals[string(auditKey("local", 1))]
	var recs []AuditRecord
	if err := json.Unmarshal(block, &recs); err != nil {
		t.Fatalf("block does not decode: %v\n%s", err, block)
	}
	want, _ := json.Marshal(recs)
	if diff := cmp.Diff(string(want), string(block)); diff != "" {
		t.Errorf("block (-json.Marshal +appender):\n%s", diff)
	}
	if b := VerifyAudit(recs, nil); b != nil {
		t.Errorf("VerifyAudit: %v", b)
	}
}

// memTxn is a Txn over a map, for the writer's helpers alone.
type memTxn struct{ vals map[string][]byte }

func (m *memTxn) Get(k []byte) ([]byte, error) {
	v, ok := m.vals[string(k)]
	if !ok {
		return nil, ErrNotFound
	}
	return v, nil
}

func (m *memTxn) Scan(prefix, start []byte, fn func(key, val []byte) (bool, error)) error {
	panic("not used")
}

func (m *memTxn) Set(k, v []byte) error { m.vals[string(k)] = v; return nil }
func (m *memTxn) Delete(k []byte) error { delete(m.vals, string(k)); return nil }

// Every field of Event is written as json.Marshal writes it: a field added
// to Event and not to appendEvent fails here. Each field is set by
// reflection to a value that is not its zero.
func TestAuditEncodingCoversEveryEventField(t *testing.T) {
	var ev Event
	v := reflect.ValueOf(&ev).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Slice:
			f.Set(reflect.Append(reflect.MakeSlice(f.Type(), 0, 1), reflect.Zero(f.Type().Elem())))
			if f.Index(0).Kind() == reflect.String {
				f.Index(0).SetString("y")
			}
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			f.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v").Convert(f.Type().Elem()))
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		case reflect.Struct:
			if f.Type() == reflect.TypeFor[time.Time]() {
				f.Set(reflect.ValueOf(time.Date(2026, 12, 2, 1, 0, 0, 5, time.UTC)))
				continue
			}
			t.Fatalf("Event.%s: a struct field this test cannot fill; teach it and appendEvent", v.Type().Field(i).Name)
		default:
			t.Fatalf("Event.%s: a %s field this test cannot fill; teach it and appendEvent", v.Type().Field(i).Name, f.Kind())
		}
	}
	checkAuditEncoding(t, ev)
}

// The audit head and the state counts are written by appenders too; their
// bytes are json.Marshal's (segmentio's for the head, encoding/json's for
// the counts, as before), so any version reads them.
func TestAuditHeadEncodingIsMarshals(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)
	for name, h := range map[string]auditHead{
		"zero":       {},
		"head":       {Seq: 42, Hash: "9f8e7d", At: at},
		"local time": {Seq: 1 << 63, Hash: "ab", At: at.In(time.FixedZone("", 5*3600))},
		"year 10000": {Seq: 1, Hash: "ab", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		want, wantErr := json.Marshal(&h)
		got, err := appendAuditHead(nil, &h)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%s: appendAuditHead error %v, json.Marshal's %v", name, err, wantErr)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s: appendAuditHead differs from json.Marshal (-want +got):\n%s", name, diff)
		}
	}
}

func TestStateCountsEncodingIsMarshals(t *testing.T) {
	for name, c := range map[string]map[State]int64{
		"empty":   {},
		"states":  {StateSucceeded: 7, StatePending: 0, StateFailed: -2, StateAwaitingApproval: 1 << 62, StateCompensated: 1},
		"escaped": {State(`a"b`): 1, State("<x>"): 2, StatePending: 3},
	} {
		want, err := stdjson.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(appendStateCounts(nil, c))); diff != "" {
			t.Errorf("%s: appendStateCounts differs from json.Marshal (-want +got):\n%s", name, diff)
		}
	}
}

// TestAuditKeysAreTheirSeqInSixteenHexDigits: a block's key spells its
// first record's sequence number in 16 lower-case hex digits, so keys
// sort in chain order (what older ledgers hold and Audit scans).
func TestAuditKeysAreTheirSeqInSixteenHexDigits(t *testing.T) {
	for _, seq := range []uint64{0, 1, 0x1a2b, 1<<63 + 5, ^uint64(0)} {
		if got, want := string(auditKey("local", seq)), string(key(kindAudit, "local", fmt.Sprintf("%016x", seq))); got != want {
			t.Errorf("auditKey(local, %d) = %q, want %q", seq, got, want)
		}
	}
}
