package ledger

import (
	"sort"
	"strings"
	"testing"
	"time"
)

func TestIDsSortInCreationOrder(t *testing.T) {
	var g idGen
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 1000 {
		if i%100 == 0 {
			now = now.Add(time.Millisecond)
		}
		if i == 500 {
			now = now.Add(-time.Second) // the clock steps back
		}
		id := g.next("eff_", now)
		if len(id) != 30 {
			t.Fatalf("len(id) != 30: id %q", id)
		}
		if !strings.HasPrefix(id, "eff_") {
			t.Fatalf("!strings.HasPrefix(id, \"eff_\"): id %q", id)
		}
		ids = append(ids, id)
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids do not sort in creation order")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
}

// An id says when it was made, to the millisecond, and never earlier than
// the clock said: Purge stops at the first effect made after its cutoff.
func TestAnIDCarriesTheTimeItWasMade(t *testing.T) {
	var g idGen
	now := time.Date(2026, 12, 2, 17, 40, 1, 234567891, time.UTC)
	at, ok := idTime(g.next("eff_", now))
	if !ok || !at.Equal(now.Truncate(time.Millisecond)) {
		t.Fatalf("idTime = %v, %v; want %v", at, ok, now.Truncate(time.Millisecond))
	}
	at, _ = idTime(g.next("eff_", now.Add(-time.Hour))) // the clock steps back
	if at.Before(now.Truncate(time.Millisecond)) {
		t.Fatalf("an id made after the clock stepped back carries %v, before the %v it already gave", at, now)
	}
	for _, bad := range []string{"", "eff_", "eff_01M6BFP5G0HYQG5R3PT3B9R0S", "eff_01M6BFP5G0HYQG5R3PT3B9R0SWX", "eff_0IM6BFP5G0HYQG5R3PT3B9R0SW"} {
		if _, ok := idTime(bad); ok {
			t.Errorf("idTime(%q) is ok, want not an id", bad)
		}
	}
}
