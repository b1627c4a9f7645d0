package proxy_test

import (
	"net/http"
	"testing"
)

// TestAConnectionHeaderCannotStripTheStampedKey: a caller that names the
// vendor's idempotency header in Connection (RFC 9110 7.6.1: the fields it
// names are hop-by-hop, dropped by a proxy) still has Ratchet's key reach
// the vendor, for every vendor whose key is a header. The proxy used to
// stamp the key and then drop it as a hop-by-hop field: Ratchet recorded
// an attempt under a key the vendor never saw, so a retry the vendor should
// have deduplicated could be performed twice.
func TestAConnectionHeaderCannotStripTheStampedKey(t *testing.T) {
	forEachShape(t, func(t *testing.T, s shape, fake *vendorFake, e *env) {
		h, body := s.request("", "merchant-1", "cred-1", "hop-by-hop")
		h.Set("Connection", "Idempotency-Key, Paypal-Request-Id, Cko-Idempotency-Key")
		resp, got := sendTo(t, e.url+"/"+s.vendor+s.path, body, h)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, got)
		}
		stamped := resp.Header.Get("Ratchet-Vendor-Key")
		if stamped == "" {
			t.Fatal("no Ratchet-Vendor-Key in the answer")
		}
		fake.mu.Lock()
		defer fake.mu.Unlock()
		if len(fake.keys) != 1 {
			t.Errorf("len(fake.keys) != 1: the vendor got keys %q; want the stamped %q", fake.keys, stamped)
		} else if fake.keys[0] != stamped {
			t.Errorf("fake.keys[0] != stamped: the vendor got keys %q; want the stamped %q", fake.keys, stamped)
		}
	})
}
