package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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
