package ledger_test

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestAResetWriteBufferHoldsNothingOfBefore: the writer reuses one buffer
// for a batch's ops, so a reset one must forget every key, in Lookup and
// in All, and order what is written after it afresh.
func TestAResetWriteBufferHoldsNothingOfBefore(t *testing.T) {
	var b ledger.WriteBuffer
	b.Put("a", []byte("1"))
	b.Put("b", nil)
	b.Reset()
	if _, ok := b.Lookup("a"); ok || b.Len() != 0 {
		t.Fatalf("after Reset: Lookup(a) found %v, Len %d: want nothing", ok, b.Len())
	}
	b.Put("c", []byte("3"))
	b.Put("a", []byte("4"))
	var got []string
	for k, v := range b.All() {
		got = append(got, k+"="+string(v))
	}
	if diff := cmp.Diff([]string{"c=3", "a=4"}, got); diff != "" {
		t.Errorf("writes after Reset (-want +got):\n%s", diff)
	}
}
