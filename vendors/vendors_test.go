package vendors_test

import (
	"crypto/sha256"
	"regexp"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestShapeKey(t *testing.T) {
	d1 := sha256.Sum256([]byte("attempt 1"))
	d2 := sha256.Sum256([]byte("attempt 2"))
	cases := []struct {
		vendor   string
		loc      vendors.Location
		name     string
		enforced bool
		hours    int
	}{
		{"stripe", vendors.InHeader, "Idempotency-Key", true, 24},
		{"Stripe", vendors.InHeader, "Idempotency-Key", true, 24},
		{"square", vendors.InBody, "idempotency_key", true, 0},
		{"adyen", vendors.InHeader, "idempotency-key", true, 168},
		{"acme", vendors.InHeader, "Idempotency-Key", false, 0},
		{"", vendors.InHeader, "Idempotency-Key", false, 0},
	}
	for _, c := range cases {
		t.Run(c.vendor, func(t *testing.T) {
			k := all.Registry().ShapeKey(c.vendor, d1[:])
			if k.Location != c.loc || k.Name != c.name || k.Enforced != c.enforced || k.RetentionHours != c.hours {
				t.Fatalf("key %+v", k)
			}
			if !uuidRe.MatchString(k.Value) {
				t.Fatalf("value %q is not a version 8 UUID", k.Value)
			}
			v, _ := all.Lookup(c.vendor)
			if len(k.Value) > v.KeyRule().MaxLen {
				t.Fatalf("value longer than %d", v.KeyRule().MaxLen)
			}
			if all.Registry().ShapeKey(c.vendor, d1[:]).Value != k.Value {
				t.Fatal("not deterministic")
			}
			if all.Registry().ShapeKey(c.vendor, d2[:]).Value == k.Value {
				t.Fatal("different digests gave the same key")
			}
		})
	}
	if _, ok := all.Lookup("acme"); ok {
		t.Fatal("unknown vendor reported as known")
	}
}

func TestForHost(t *testing.T) {
	for host, want := range map[string]string{"api.stripe.com": "stripe", "API.Stripe.com": "stripe",
		"connect.squareupsandbox.com": "square", "checkout-test.adyen.com": "adyen", "api-m.paypal.com": "paypal",
		"api.checkout.com": "checkout"} {
		if v, ok := all.Registry().ForHost(host); !ok || v.Name() != want {
			t.Errorf("all.Registry().ForHost(%s) = %v", host, v)
		}
	}
	if _, ok := all.Registry().ForHost("example.com"); ok {
		t.Error("example.com is no vendor")
	}
	for h, want := range map[string]bool{"acme-checkout-live.adyenpayments.com": true, "api.stripe.com": true,
		"*.adyenpayments.com": false, "api.stripe.com:443": false, "https://api.stripe.com": false, "API.stripe.com": false,
		"-bad.example.com": false, "localhost": false, "": false} {
		if vendors.IsHostName(h) != want {
			t.Errorf("IsHostName(%q) = %v", h, !want)
		}
	}
}
