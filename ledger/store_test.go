package ledger_test

import (
	"slices"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestWriteBuffer(t *testing.T) {
	var b ledger.WriteBuffer
	if _, ok := b.Lookup("a"); ok || b.Len() != 0 {
		t.Fatal("the zero buffer is not empty")
	}
	b.Put("b", []byte("1"))
	b.Put("a", []byte("2"))
	b.Put("b", nil) // deleted after all: still first in order
	b.Put("c", []byte{})
	if got := b.Keys(); !slices.Equal(got, []string{"b", "a", "c"}) || b.Len() != 3 {
		t.Fatalf("keys %q, len %d", got, b.Len())
	}
	for k, want := range map[string]string{"a": "2", "c": ""} {
		if v, ok := b.Lookup(k); !ok || v == nil || string(v) != want {
			t.Errorf("%s = %q, %v", k, v, ok)
		}
	}
	if v, ok := b.Lookup("b"); !ok || v != nil {
		t.Errorf("deleted key = %q, %v; want a buffered delete", v, ok)
	}
}
