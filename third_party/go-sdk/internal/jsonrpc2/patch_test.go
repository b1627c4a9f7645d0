package jsonrpc2

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Ratchet's tests of its patch to messages.go (third_party/README.md, the
// second patch, and CompactMarshaler): what marshalToRaw made is appended
// without checking it again, a field replaced afterwards is checked, and a
// marshaler's bytes skip the check only when it vouches for them.

type vouching struct {
	data    string
	compact bool
}

func (v vouching) MarshalJSON() ([]byte, error) { return []byte(v.data), nil }
func (v vouching) MarshalCompactJSON() ([]byte, bool, error) {
	return []byte(v.data), v.compact, nil
}

func encode(t *testing.T, msg Message) string {
	t.Helper()
	b, err := EncodeMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAMarshalersBytesSkipTheCheckOnlyWhenItVouchesForThem(t *testing.T) {
	id := Int64ID(7)
	// A marshaler that vouches is taken at its word: the spaced bytes stay
	// (no real marshaler vouches for these; it shows the check is skipped).
	r, err := NewResponse(id, vouching{`{ "a" : 1 }`, true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"jsonrpc":"2.0","id":7,"result":{ "a" : 1 }}`, encode(t, r)); diff != "" {
		t.Errorf("vouched result (-want +got):\n%s", diff)
	}
	// One that does not is compacted, as any MarshalJSON's output.
	r, err = NewResponse(id, vouching{`{ "a" : 1 }`, false}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"jsonrpc":"2.0","id":7,"result":{"a":1}}`, encode(t, r)); diff != "" {
		t.Errorf("unvouched result (-want +got):\n%s", diff)
	}
	// And invalid JSON it does not vouch for is an error, as before.
	if _, err := NewResponse(id, vouching{`{"a":`, false}, nil); err == nil {
		t.Error("an unvouched invalid result encoded")
	}
}

func TestAFieldReplacedAfterItWasMadeIsCheckedAgain(t *testing.T) {
	id := Int64ID(7)
	r, err := NewResponse(id, map[string]int{"a": 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Result = json.RawMessage(`{ "b" : 2 }`)
	if diff := cmp.Diff(`{"jsonrpc":"2.0","id":7,"result":{"b":2}}`, encode(t, r)); diff != "" {
		t.Errorf("replaced result (-want +got):\n%s", diff)
	}
	c, err := NewCall(id, "tools/call", map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":1}}`, encode(t, c)); diff != "" {
		t.Errorf("call (-want +got):\n%s", diff)
	}
	c.Params = json.RawMessage(`[ 1, 2 ]`)
	if diff := cmp.Diff(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1,2]}`, encode(t, c)); diff != "" {
		t.Errorf("replaced params (-want +got):\n%s", diff)
	}
	// A replacement of the same length over other bytes is not the field
	// NewCall made either.
	c.Params = json.RawMessage(`{ "a":1}`[:7])
	if _, err := EncodeMessage(c); err == nil {
		t.Error("invalid replaced params encoded")
	}
}

// A json.RawMessage (or any Marshaler that returns its own buffer) is the
// caller's bytes: changed in place after NewResponse, they are checked
// again, not sent as they were vouched for (the adversarial review's case).
func TestAResultTheCallerChangesInPlaceIsCheckedAgain(t *testing.T) {
	buf := json.RawMessage(`{"a":1}`)
	r, err := NewResponse(Int64ID(1), buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, `{"a": }`)
	if b, err := EncodeMessage(r); err == nil {
		t.Errorf("invalid JSON encoded: %s", b)
	}
}
