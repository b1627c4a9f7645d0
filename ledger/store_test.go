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
	var keys []string
	var vals [][]byte
	for k, v := range b.All() {
		keys, vals = append(keys, k), append(vals, v)
	}
	if !slices.Equal(keys, []string{"b", "a", "c"}) {
		t.Fatalf("!slices.Equal(keys, []string{\"b\", \"a\", \"c\"}): keys %q, len %d", keys, b.Len())
	}
	if b.Len() != 3 {
		t.Fatalf("b.Len() != 3: keys %q, len %d", keys, b.Len())
	}
	if vals[0] != nil {
		t.Fatalf("vals[0] != nil: values %q: want the last write to each key", vals)
	}
	if string(vals[1]) != "2" {
		t.Fatalf("string(vals[1]) != \"2\": values %q: want the last write to each key", vals)
	}
	if vals[2] == nil {
		t.Fatalf("vals[2] == nil: values %q: want the last write to each key", vals)
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
