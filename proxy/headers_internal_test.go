package proxy

import (
	"net/http"
	"testing"
)

// TestHeadersDeletedByNameAreCanonical: the gate deletes Ratchet's own
// headers, Connection and Accept-Encoding from a request by map key,
// which is Header.Del only for a name already in canonical form.
func TestHeadersDeletedByNameAreCanonical(t *testing.T) {
	for _, h := range append(append([]string{}, ratchetHeaders...), "Connection", "Accept-Encoding") {
		if c := http.CanonicalHeaderKey(h); c != h {
			t.Errorf("%q is deleted by name, but its canonical form is %q: a request's header of that name would be forwarded", h, c)
		}
	}
}
