// Package all lists the built-in vendors, once: adding a built-in vendor
// is its package under vendors/ and one line here.
package all

import (
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/adyen"
	"github.com/ratchet-mcp/ratchet/vendors/checkout"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
	"github.com/ratchet-mcp/ratchet/vendors/square"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
)

// List returns the built-in vendors. Generic is the fallback and is not
// listed.
func List() []vendors.Vendor {
	return []vendors.Vendor{stripe.Vendor{}, square.Vendor{}, adyen.Vendor{}, paypal.Vendor{}, checkout.Vendor{}}
}

// builtin is the registry of List.
var builtin = func() *vendors.Registry {
	r, err := vendors.NewRegistry(List()...)
	if err != nil {
		panic(err) // the list is fixed: every test that imports this package fails first
	}
	return r
}()

// Registry returns the registry of the built-in vendors.
func Registry() *vendors.Registry { return builtin }

// With returns a registry of the built-in vendors and declared ones.
func With(declared ...vendors.Vendor) (*vendors.Registry, error) {
	return vendors.NewRegistry(append(List(), declared...)...)
}

// Lookup is Registry().Lookup.
func Lookup(name string) (vendors.Vendor, bool) { return builtin.Lookup(name) }
