package mcp

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestOutputSchemaFollowsTheType checks that an output schema names only
// fields its Go type has (so a renamed field fails every test rather than
// leaving the schema behind) and takes their types from it.
func TestOutputSchemaFollowsTheType(t *testing.T) {
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), `no field "effect_idd"`) {
				t.Errorf("a listed field the type lacks: recovered %v", r)
			}
		}()
		outputSchema[ledger.Effect](fields{"effect_idd": nil})
	}()
	type inner struct {
		N int `json:"n"`
	}
	type embedded struct {
		E string `json:"e,omitempty"`
	}
	type result struct {
		embedded
		S    string          `json:"s"`
		P    *int64          `json:"p,omitempty"`
		L    []inner         `json:"l"`
		T    time.Time       `json:"t"`
		Z    time.Time       `json:"z,omitzero"`
		R    json.RawMessage `json:"r,omitempty"`
		Skip string          `json:"-"`
	}
	got, _ := json.Marshal(outputSchema[result](fields{"e": nil, "s": nil, "p": nil, "l": {"n": nil}, "t": nil, "z": nil, "r": nil}))
	want := `{"type":"object","properties":{"e":{"type":"string"},"l":{"type":["null","array"],` +
		`"items":{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}},"p":{"type":"integer"},` +
		`"r":{"description":"any JSON value"},"s":{"type":"string"},"t":{"type":"string"},"z":{"type":"string"}},"required":["l","s","t"]}`
	if string(got) != want {
		t.Errorf("schema\n got %s\nwant %s", got, want)
	}
}

// TestArgumentsThatAreNotAnObjectNameThemselves: an array or a string as a
// tool's arguments is refused naming "arguments", not an empty field.
func TestArgumentsThatAreNotAnObjectNameThemselves(t *testing.T) {
	for _, raw := range []string{`[1,2]`, `"x"`, `7`} {
		var in getInput
		err := decodeArgs(json.RawMessage(raw), &in)
		le, ok := err.(*ledger.Error)
		if !ok || le.Code != ledger.CodeInvalidArgument || le.Field != "arguments" || !strings.HasPrefix(le.Message, "arguments must be a JSON object") {
			t.Fatalf("%s: %v", raw, err)
		}
	}
}
