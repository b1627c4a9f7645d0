package config

import (
	"strings"
	"testing"
)

// policyWarnings parses a config and returns its warnings about policies.
func policyWarnings(t *testing.T, yaml string) []Problem {
	t.Helper()
	cfg, err := Parse(strings.NewReader(yaml), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []Problem
	for _, w := range cfg.Warnings() {
		if strings.HasPrefix(w.Path, "policies") {
			out = append(out, w)
		}
	}
	return out
}

// A config whose rules were written for MCP agents' types only (as the
// README's first example was) and that proxies Stripe is warned: a $150
// PaymentIntent through the proxy would meet no limit.
func TestValidateWarnsWhenNoRuleGovernsProxiedPayments(t *testing.T) {
	w := policyWarnings(t, "proxy:\n  upstreams: {stripe: https://api.stripe.com}\npolicies:\n  - match: email.send\n    ceilings: [{name: e, limit_count: 1, window: 1h, per: agent}]\n")
	if len(w) != 1 {
		t.Fatalf("warnings %+v, want one at policies", w)
	}
	if w[0].Path != "policies" || w[0].Line != 3 {
		t.Errorf("warning at %s line %d, want policies line 3", w[0].Path, w[0].Line)
	}
	if !strings.Contains(w[0].Message, `match: "payment.*"`) {
		t.Errorf("the warning does not say what to add: %s", w[0].Message)
	}
	// With a rule that covers one of them, or no rules at all, nothing.
	for name, yaml := range map[string]string{
		"payment.*":   "proxy:\n  upstreams: {stripe: https://api.stripe.com}\npolicies:\n  - {match: 'payment.*', deny: true}\n",
		"one type":    "proxy:\n  upstreams: {adyen: https://checkout-test.adyen.com}\npolicies:\n  - {match: payment.refund, deny: true}\n",
		"no policies": "proxy:\n  upstreams: {stripe: https://api.stripe.com}\n",
	} {
		if w := policyWarnings(t, yaml); len(w) != 0 {
			t.Errorf("%s: warnings %+v", name, w)
		}
	}
}

// A rule written for the proxy's old names (match: "stripe.*") still
// governs proxied Stripe payments, and validate names the new types.
func TestValidateNamesTheNewTypeForARuleOnOldNames(t *testing.T) {
	w := policyWarnings(t, "proxy:\n  upstreams: {stripe: https://api.stripe.com}\npolicies:\n  - match: 'stripe.*'\n    max_lease_seconds: 120\n")
	if len(w) != 1 {
		t.Fatalf("warnings %+v, want one at policies[0].match", w)
	}
	if w[0].Path != "policies[0].match" {
		t.Errorf("warning at %s, want policies[0].match", w[0].Path)
	}
	for _, typ := range []string{"payment.charge", "payment.refund", "payment.payout"} {
		if !strings.Contains(w[0].Message, typ) {
			t.Errorf("the warning does not name %s: %s", typ, w[0].Message)
		}
	}
}

// proxy.dedupe_windows takes a window per known vendor.
func TestDedupeWindowsPerVendor(t *testing.T) {
	cfg, err := Parse(strings.NewReader("proxy:\n  dedupe_windows: {stripe: 1h}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Proxy.DedupeWindowsValue()["stripe"].String(); got != "1h0m0s" {
		t.Errorf("stripe's window %s, want 1h0m0s", got)
	}
	if got := cfg.Proxy.DedupeWindow.Value().String(); got != "10m0s" {
		t.Errorf("the default window %s, want 10m0s", got)
	}
	_, err = Parse(strings.NewReader("proxy:\n  dedupe_windows: {strype: 1h, square: -1s}\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), `proxy.dedupe_windows.strype: "strype" is not a vendor`) ||
		!strings.Contains(err.Error(), "proxy.dedupe_windows.square") {
		t.Errorf("bad windows: %v", err)
	}
}
