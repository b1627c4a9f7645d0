package vendors_test

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// tableRow is one row of the effect-type table in docs/proxy.md.
var tableRow = regexp.MustCompile("^\\| `([a-z._]+)` \\| ([a-z]+) \\| `([A-Z]+) ([^`]+)` \\| `([a-z0-9._]+)` \\| ([a-z ]+) \\|$")

// TestEffectTypeTable classifies the request of every row of the
// effect-type table that starts docs/proxy.md as the vendor's SDK sends it and wants the
// row's operation, type and counting; and wants every money-moving
// operation of the code in the table. The page and the code cannot
// disagree.
func TestEffectTypeTable(t *testing.T) {
	b, err := os.ReadFile("../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		m := tableRow.FindStringSubmatch(line)
		if m == nil {
			if strings.HasPrefix(line, "| `payment.") {
				t.Errorf("a table row this test cannot read: %s", line)
			}
			continue
		}
		typ, vendor, method, path, op, counts := m[1], m[2], m[3], strings.ReplaceAll(m[4], "{id}", "id_1"), m[5], m[6]
		documented[op] = true
		v, ok := all.Lookup(vendor)
		if !ok {
			t.Errorf("%s: no vendor %q", op, vendor)
			continue
		}
		body := []byte("{}")
		if vendor == "stripe" && !strings.HasPrefix(path, "/v2/") {
			body = []byte("amount=100&currency=usd")
		}
		e, isEffect := v.Classify(&vendors.Request{Method: method, Path: path, Header: http.Header{}, Body: body})
		if !isEffect {
			t.Errorf("%s %s (%s): not an effect", method, path, vendor)
			continue
		}
		if e.Operation != op {
			t.Errorf("%s %s (%s): operation %s, the table says %s", method, path, vendor, e.Operation, op)
		}
		if e.EffectType != typ {
			t.Errorf("%s %s (%s): type %s, the table says %s", method, path, vendor, e.EffectType, typ)
		}
		if want := counts == "zero"; e.FollowUp != want {
			t.Errorf("%s: counts zero %v, the table says %q", op, e.FollowUp, counts)
		}
	}
	for op := range vendors.Operations() {
		if !documented[op] {
			t.Errorf("%s is a money-moving operation the table does not list", op)
		}
	}
	if len(documented) < 50 {
		t.Errorf("read %d rows of the table; it has more", len(documented))
	}
}

// TestNonMoneyCallsStayOutsidePayment: calls that move no money keep
// their operation as their type, outside payment.*.
func TestNonMoneyCallsStayOutsidePayment(t *testing.T) {
	for _, c := range []struct{ vendor, method, path, want string }{
		{"stripe", "POST", "/v1/customers", "stripe.customers.create"},
		{"stripe", "POST", "/v1/webhook_endpoints", "stripe.webhook_endpoints.create"},
		{"stripe", "POST", "/v1/products", "stripe.products.create"},
		{"stripe", "POST", "/v1/checkout/sessions", "stripe.checkout_sessions.create"},
		{"square", "POST", "/v2/customers", "square.customers.create"},
		{"adyen", "POST", "/v71/paymentLinks", "adyen.payment_links.create"},
		{"checkout", "POST", "/customers", "checkout.customers.create"},
	} {
		v, _ := all.Lookup(c.vendor)
		e, ok := v.Classify(&vendors.Request{Method: c.method, Path: c.path, Header: http.Header{}, Body: []byte("{}")})
		if !ok || e.EffectType != c.want || e.Operation != c.want {
			t.Errorf("%s %s: type %q operation %q (effect %v), want both %q", c.vendor, c.path, e.EffectType, e.Operation, ok, c.want)
		}
	}
}
