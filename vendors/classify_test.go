package vendors_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// TestAnEncodedAnswerIsUnknownWhateverItsStatus: an Adyen answer still in
// a content coding is Unknown (its resultCode cannot be read); the same
// answer with no coding, or "identity", is classified by Adyen's rules.
func TestAnEncodedAnswerIsUnknownWhateverItsStatus(t *testing.T) {
	v, ok := all.Lookup("adyen")
	if !ok {
		t.Fatal("no adyen vendor")
	}
	refused := []byte(`{"pspReference":"P1","resultCode":"Refused","refusalReason":"Not enough balance"}`)
	got := map[string]vendors.Result{}
	for _, ce := range []string{"", "identity", "br", "gzip, gzip", "deflate"} {
		h := http.Header{"Content-Type": {"application/json"}}
		if ce != "" {
			h.Set("Content-Encoding", ce)
		}
		got[ce] = vendors.Classify(v, &vendors.Response{Status: 200, Header: h, Body: refused}).Result
	}
	want := map[string]vendors.Result{"": vendors.Failed, "identity": vendors.Failed,
		"br": vendors.Unknown, "gzip, gzip": vendors.Unknown, "deflate": vendors.Unknown}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("results by Content-Encoding (-want +got):\n%s", diff)
	}
}
