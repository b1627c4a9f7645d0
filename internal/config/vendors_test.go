package config

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// TestADeclaredVendorLoadsIntoTheRegistry: a vendors: section compiles
// into vendors the registry knows by name and host, its upstream becomes
// the proxy's default for it, and proxy.upstreams overrides it.
func TestADeclaredVendorLoadsIntoTheRegistry(t *testing.T) {
	cfg, err := Load("testdata/vendors.yaml")
	if err != nil {
		t.Fatal(err)
	}
	reg := cfg.Registry()
	v, known := reg.Lookup("mollie")
	if !known {
		t.Fatal("mollie is not in the registry")
	}
	if h, ok := reg.ForHost("api.mollie.com"); !ok || h.Name() != "mollie" {
		t.Errorf("ForHost(api.mollie.com) = %v, %v; want mollie", h, ok)
	}
	if _, ok := reg.Lookup("stripe"); !ok {
		t.Error("the built-in vendors are not in the registry")
	}
	want := vendors.KeyRule{Location: vendors.InHeader, Name: "Idempotency-Key", MaxLen: 64, Enforced: true, RetentionHours: 1}
	if diff := cmp.Diff(want, v.KeyRule()); diff != "" {
		t.Errorf("mollie's key rule (-want +got):\n%s", diff)
	}
	wantUp := map[string]string{"mollie": "https://api.mollie.com", "resend": "http://127.0.0.1:9999"}
	for name, u := range wantUp {
		if got := cfg.Proxy.Upstreams[name]; got != u {
			t.Errorf("proxy.upstreams.%s = %q, want %q", name, got, u)
		}
	}
}

// TestDeclaredVendorProblemsNameTheLine: every kind of bad definition is
// refused with its line and field path, all at once.
func TestDeclaredVendorProblemsNameTheLine(t *testing.T) {
	probs := problems(t, "testdata/vendors_broken.yaml")
	want := []wantProblem{
		{2, "vendors[0].name", "built-in vendor's name"},
		{3, "vendors[0].hosts[0]", "stripe's host already"},
		{3, "vendors[0].hosts[1]", "not a lowercase host name"},
		{4, "vendors[0].upstream", "not an http(s) URL"},
		{6, "vendors[0].key.in", "must be header or body"},
		{8, "vendors[0].key.max_length", "between 32 and 4096"},
		{9, "vendors[0].key.alphabet", "must allow the digits"},
		{10, "vendors[0].key.retention", "whole number of hours"},
		{12, "vendors[0].routes[0].method", "must be POST, PUT, PATCH or DELETE"},
		{13, "vendors[0].routes[0].path", "must start with /"},
		{14, "vendors[0].routes[0].effect_type", "dot-separated lowercase words"},
		{15, "vendors[0].routes[1].currency", "is required with amount"},
		{16, "vendors[0].routes[1].path", `the segment "{Id}"`},
		{18, "vendors[0].routes[1].amount.unit", "must be major"},
		{22, "vendors[0].routes[2].cost_micros", "must be >= 0"},
		{24, "vendors[0].routes[3].path", "routes[2]'s already"},
		{27, "vendors[0].outcome.succeeded[1]", "not a status"},
		{28, "vendors[0].outcome.failed[0]", "listed under succeeded already"},
		{30, "vendors[0].refusal.body", "not valid JSON once filled in"},
		{36, "vendors[1].refusal.body", "{{effect_id}} is not a placeholder"},
		{37, "vendors[2].name", "vendors[1]'s name already"},
		{40, "vendors[2].key.name", "not a top-level JSON field name"},
		{45, "", `unknown field "unknown_field"`},
		{47, "vendors[3].hosts[0]", "acme's host already"},
	}
	wantProblems(t, probs, want)
}

// TestTheExamplesVendorsBlockIsValid: the commented vendors block of the
// example config loads as it is once uncommented.
func TestTheExamplesVendorsBlockIsValid(t *testing.T) {
	b, err := os.ReadFile("../../configs/ratchet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start, end := strings.Index(s, "# vendors:"), strings.Index(s, "\nledger:")
	if start < 0 || end < start {
		t.Fatal("no vendors block in the example")
	}
	var out []string
	for _, l := range strings.Split(s[start:end], "\n") {
		if rest, ok := strings.CutPrefix(l, "# "); ok {
			out = append(out, rest)
		}
	}
	cfg, err := Parse(strings.NewReader(strings.Join(out, "\n")), "example")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Registry().Lookup("mollie"); !ok {
		t.Fatal("the example's vendor is not in the registry")
	}
}
