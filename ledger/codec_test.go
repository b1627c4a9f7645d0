package ledger

import (
	"reflect"
	"strings"
	"testing"
	"time"

	json "github.com/segmentio/encoding/json"
)

// fillEvery sets every exported field reachable from v (a pointer) to a
// value that is not its zero value, distinct per field where it can.
func fillEvery(t testing.TB, v reflect.Value, seed *int) {
	t.Helper()
	*seed++
	n := *seed
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillEvery(t, v.Elem(), seed)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(1_800_000_000+int64(n), int64(n)).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillEvery(t, v.Field(i), seed)
			}
		}
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", n%7) + string(rune('a'+n%26)))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(n) * -1_000_003)
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage(nil)) {
			v.SetBytes([]byte(`{"n":` + strings.Repeat("1", n%5+1) + `}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fillEvery(t, s.Index(i), seed)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for range 3 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fillEvery(t, k, seed)
			fillEvery(t, e, seed)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	default:
		t.Fatalf("fillEvery: a field of kind %s: teach the record codec and this test about it", v.Kind())
	}
}

// filledRecord is a record with every field set (fillEvery).
func filledRecord(t testing.TB) effectRec {
	var rec effectRec
	seed := 0
	fillEvery(t, reflect.ValueOf(&rec), &seed)
	rec.ResultNote = "" // only in a report's answer, never stored
	return rec
}

// TestRecordCodecCoversEveryField fills every field of a record, encodes
// and decodes it, and wants it back whole: a field added to the record and
// not to the codec fails here. Zero and absent values come back so too.
func TestRecordCodecCoversEveryField(t *testing.T) {
	for what, rec := range map[string]effectRec{"a full record": filledRecord(t), "an empty record": {}} {
		b, err := encodeEffect(&rec)
		if err != nil {
			t.Fatal(err)
		}
		wantDecoded(t, b, rec, what)
	}
}

// TestRecordCodecReadsJSONRecords: records written as JSON before the
// binary form are read as they were.
func TestRecordCodecReadsJSONRecords(t *testing.T) {
	rec := filledRecord(t)
	old, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	wantDecoded(t, old, rec, "a JSON record")
}

// wantDecoded decodes b and wants rec back, field for field.
func wantDecoded(t *testing.T, b []byte, want effectRec, what string) {
	t.Helper()
	var got effectRec
	if err := decodeEffect(b, &got); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s read back as\n%+v\nwant\n%+v", what, got, want)
	}
}

// TestRecordCodecRefusesDamage: every truncation of a record, and bytes
// after it, are reported as errors, never read as another record.
func TestRecordCodecRefusesDamage(t *testing.T) {
	rec := filledRecord(t)
	b, err := encodeEffect(&rec)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		if err := decodeEffect(b[:n], &effectRec{}); err == nil {
			t.Fatalf("a record cut at %d of %d bytes was read", n, len(b))
		}
	}
	if err := decodeEffect(append(b, 0), &effectRec{}); err == nil {
		t.Fatal("a record with a trailing byte was read")
	}
	if err := decodeEffect([]byte{9, 1, 2}, &effectRec{}); err == nil {
		t.Fatal("an unknown format was read")
	}
}

// FuzzDecodeRecord: no bytes make the decoder panic, and whatever it
// accepts in binary form encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	rec := filledRecord(f)
	b, _ := encodeEffect(&rec)
	f.Add(b)
	old, _ := json.Marshal(&rec)
	f.Add(old)
	f.Add([]byte{recBinary})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r effectRec
		if decodeEffect(b, &r) != nil || len(b) == 0 || b[0] != recBinary {
			return
		}
		again, err := encodeEffect(&r)
		if err != nil {
			t.Fatal(err)
		}
		var r2 effectRec
		if err := decodeEffect(again, &r2); err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("a decoded record does not survive another round: %v", err)
		}
	})
}

// TestRecordCodecReadsFormatOne: records written before the attempt's and
// the unreported expiry's agents were kept (format 1, the same fields but
// those two) are read, with both taken to be the effect's first agent.
func TestRecordCodecReadsFormatOne(t *testing.T) {
	rec := filledRecord(t)
	rec.Operation = "" // else format 3
	b, err := encodeEffect(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != recBinaryV2 {
		t.Fatalf("a record another agent took over written in format %d", b[0])
	}
	tail := len(rec.AttemptAgent) + 1 + len(rec.UnreportedAgent) + 1 // each a one-byte length and its bytes
	v1 := append([]byte{recBinaryV1}, b[1:len(b)-tail]...)
	rec.AttemptAgent, rec.UnreportedAgent = rec.AgentID, rec.AgentID
	wantDecoded(t, v1, rec, "a format 1 record")
}

// TestRecordCodecWritesFormatOneWhenItCan: a record whose agents are its
// first agent is written in format 1, which the version before format 2
// reads (a rollback, or replicas of two versions sharing a ledger).
func TestRecordCodecWritesFormatOneWhenItCan(t *testing.T) {
	rec := filledRecord(t)
	rec.AttemptAgent, rec.UnreportedAgent, rec.Operation = rec.AgentID, rec.AgentID, ""
	b, err := encodeEffect(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != recBinaryV1 {
		t.Fatalf("written in format %d, want 1", b[0])
	}
	wantDecoded(t, b, rec, "a record of one agent")
}

// TestRecordCodecWritesOperationOnlyInFormatThree: a proxied effect's
// operation is kept (format 3); a record without one is written as before
// (format 1 or 2), which the versions before the operation read.
func TestRecordCodecWritesOperationOnlyInFormatThree(t *testing.T) {
	rec := filledRecord(t)
	b, err := encodeEffect(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != recBinary {
		t.Fatalf("a record with an operation written in format %d, want %d", b[0], recBinary)
	}
	wantDecoded(t, b, rec, "a record with an operation")
	rec.Operation = ""
	if b, err = encodeEffect(&rec); err != nil {
		t.Fatal(err)
	}
	if b[0] != recBinaryV2 {
		t.Fatalf("a record without an operation written in format %d, want %d", b[0], recBinaryV2)
	}
}
