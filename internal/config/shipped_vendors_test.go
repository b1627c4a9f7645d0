package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// TestTheShippedVendorDefinitionsAreValid: every file in configs/vendors/
// loads as it ships (pasted under a config's other keys), declares the
// vendor its file is named for, cites the vendor's API reference at its
// top, and together they cover at least three APIs, one of them not a
// payment API. interop/vendors drives each with the vendor's own SDK.
func TestTheShippedVendorDefinitionsAreValid(t *testing.T) {
	files, err := filepath.Glob("../../configs/vendors/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("configs/vendors/ has %d definitions, want at least 3", len(files))
	}
	cited := regexp.MustCompile(`(?m)^#\s+https://\S+`)
	var types []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			head, _, _ := strings.Cut(string(b), "\nvendors:")
			if !cited.MatchString(head) {
				t.Errorf("%s cites no API reference (a '#   https://...' line) above vendors:", f)
			}
			cfg, err := Parse(strings.NewReader("proxy: {namespace: shop}\n"+string(b)), f)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Vendors) != 1 || cfg.Vendors[0].Name != name {
				t.Fatalf("%s declares %d vendors (first %q), want one named %q", f, len(cfg.Vendors), firstName(cfg), name)
			}
			if _, ok := cfg.Registry().Lookup(name); !ok {
				t.Errorf("%s is not in the registry", name)
			}
			for _, r := range cfg.Vendors[0].Routes {
				types = append(types, r.EffectType)
			}
		})
	}
	if !slices.ContainsFunc(types, func(s string) bool { return !strings.HasPrefix(s, "payment.") }) {
		t.Errorf("every shipped route is a payment (%v): want one API that is not", types)
	}
}

func firstName(c *Config) string {
	if len(c.Vendors) == 0 {
		return ""
	}
	return c.Vendors[0].Name
}

// TestARuleForADeclaredVendorsPaymentsIsNoPolicyGap: a rule that governs a
// declared vendor's money-moving routes (match: "payment.*", vendor:
// mollie) covers proxied money, so the config does not warn that no rule
// matches any money-moving call the proxy gates (it did: the check knew
// only the built-in vendors' operations). A rule that meets none of them
// still gets the warning.
func TestARuleForADeclaredVendorsPaymentsIsNoPolicyGap(t *testing.T) {
	def, err := os.ReadFile("../../configs/vendors/mollie.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, rule string
		warned     bool
	}{
		{"a rule for the declared vendor's payments", "  - match: \"payment.*\"\n    vendor: mollie\n", false},
		{"a rule for its charges by operation", "  - match: \"*\"\n    operation: mollie.payments.create\n", false},
		{"a rule that meets no money-moving call", "  - match: \"email.send\"\n", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse(strings.NewReader("policies:\n"+c.rule+string(def)), "gap.yaml")
			if err != nil {
				t.Fatal(err)
			}
			warned := false
			for _, w := range cfg.Warnings() {
				if w.Path == "policies" && strings.Contains(w.Message, "no rule matches any money-moving call") {
					warned = true
				}
			}
			if warned != c.warned {
				t.Errorf("warned that no rule matches proxied money = %v, want %v (%+v)", warned, c.warned, cfg.Warnings())
			}
		})
	}
}

// TestModernTreasurysConflictIsAnUnknownOutcome: Modern Treasury answers
// 409 to a request whose key it is still storing
// (https://docs.moderntreasury.com/reference/idempotent-requests), and
// Ratchet's key is new for every attempt, so that request is this attempt
// arriving twice (a transport's resend) while the first may be moving the
// money: the outcome is unknown, never failed, which would let a retry
// with a new key pay again.
func TestModernTreasurysConflictIsAnUnknownOutcome(t *testing.T) {
	b, err := os.ReadFile("../../configs/vendors/moderntreasury.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(strings.NewReader(string(b)), "moderntreasury.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := cfg.Registry().Lookup("moderntreasury")
	if got := v.Outcome(&vendors.Response{Status: 409, Body: []byte(`{"errors": {"code": "conflict"}}`)}).Result; got != vendors.Unknown {
		t.Errorf("a 409 reads %s, want unknown", got)
	}
}
