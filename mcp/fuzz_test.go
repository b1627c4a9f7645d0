package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// FuzzToolArguments decodes arbitrary tool arguments as the begin tool does
// and hands them to a real engine: never a panic, and every refusal is a
// *ledger.Error with a code.
func FuzzToolArguments(f *testing.F) {
	for _, s := range []string{`{"idempotency_key":"k","effect_type":"a.b"}`, `{}`, `null`, `[]`, `{"payload":{"a":[1,2,{"b":null}]}}`,
		`{"idempotency_key":"k","effect_type":"a.b","dimensions":{"x":"y"},"estimated_cost_micros":5,"lease_seconds":3}`,
		`{"compensation":{"effect_type":"a.b","payload":1e999}}`} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	st, err := badgerstore.Open(dir, &badgerstore.Options{InMemory: true})
	if err != nil {
		f.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: make([]byte, 32), ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		f.Fatal(err)
	}
	defer eng.Close(context.Background())
	f.Fuzz(func(t *testing.T, raw []byte) {
		var req ledger.BeginRequest
		if err := decodeArgs(json.RawMessage(raw), &req); err != nil {
			if ledger.CodeOf(err) != ledger.CodeInvalidArgument {
				t.Fatalf("decode error without a code: %v", err)
			}
			return
		}
		req.Namespace = "fuzz"
		if _, err := eng.Begin(context.Background(), req); err != nil {
			var le *ledger.Error
			if !errors.As(err, &le) || le.Message == "" {
				t.Fatalf("begin error without a code: %v", err)
			}
		}
	})
}
