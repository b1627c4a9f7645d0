package ledger

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// getBytes answers as get does, from either generation, and moves what
// it finds in the older one into the newer, as get does: the same cache
// after the same lookups, by bytes or by string.
func TestAGenCacheFindsByBytesWhatItFindsByString(t *testing.T) {
	byString, byBytes := newGenCache[[]byte](8), newGenCache[[]byte](8)
	for i := range 10 { // 0-5 rotated into prev, or out of it
		for _, c := range []*genCache[[]byte]{byString, byBytes} {
			c.put(fmt.Sprint("k", i), fmt.Appendf(nil, "v%d", i))
		}
	}
	byString.put("absent", nil)
	byBytes.put("absent", nil)
	for _, k := range []string{"k9", "k5", "k4", "k1", "absent", "nowhere", "k5", "k0"} {
		wv, wok := byString.get(k)
		gv, gok := byBytes.getBytes([]byte(k))
		if diff := cmp.Diff(fmt.Sprint(wv, wok), fmt.Sprint(gv, gok)); diff != "" {
			t.Errorf("lookup of %q (-get +getBytes):\n%s", k, diff)
		}
	}
	if diff := cmp.Diff(fmt.Sprint(byString.cur, byString.prev), fmt.Sprint(byBytes.cur, byBytes.prev)); diff != "" {
		t.Errorf("the generations after the lookups (-get +getBytes):\n%s", diff)
	}
}
