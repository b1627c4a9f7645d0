package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
)

// TestAnswersAreReplayedOnlyToTheirOwner: where only an OAuth token says
// whose call it is, a stored answer goes to the token that made the call;
// one kept without an owner (before owners were kept) goes to nobody such:
// 409 naming the effect, not the answer or the vendor's object id. An
// answer kept with an owner goes to no caller without that owner.
func TestAnswersAreReplayedOnlyToTheirOwner(t *testing.T) {
	p := &Proxy{}
	a := ownerOf(vendors.Effect{Owner: "Bearer A21AA-app-A"})
	b := ownerOf(vendors.Effect{Owner: "Bearer A21AA-app-B"})
	answer := `{"id":"5O190127TN364715T","status":"CREATED"}`
	for _, c := range []struct {
		name, kept, caller string
		replayed           bool
	}{
		{"its owner", a, a, true},
		{"another token", a, b, false},
		{"no token", a, "", false},
		{"kept without an owner, a token-only caller", "", a, false},
		{"kept without an owner, a scoped caller", "", "", true},
	} {
		res := &ledger.BeginResult{EffectID: "eff_1", VendorReference: "5O190127TN364715T",
			Result: outbound.Keep(201, "application/json", []byte(answer), "5O190127TN364715T", c.kept)}
		w := httptest.NewRecorder()
		p.replay(w, paypal.Vendor{}, res, c.caller)
		body := w.Body.String()
		if replayed := w.Code == 201 && body == answer; replayed != c.replayed || (!c.replayed && strings.Contains(body, "5O190127TN364715T")) {
			t.Errorf("%s: %d %s", c.name, w.Code, body)
		}
	}
}
