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
