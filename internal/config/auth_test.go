package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// parseProblems parses yaml and returns its problems (nil when valid).
func parseProblems(t *testing.T, yaml string) []Problem {
	t.Helper()
	_, err := Parse(strings.NewReader(yaml), "t.yaml")
	if err == nil {
		return nil
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a config error", err)
	}
	return ce.Problems
}

// An agent's namespace is checked against the engine's namespace format at
// load time: a token mapped to "Shop" would otherwise start fine and then
// have every call it makes refused.
func TestAgentNamespaceMustBeAValidNamespace(t *testing.T) {
	const tok = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7" // sha256("data")
	for _, ns := range []string{"Shop", "shop team", "-shop", strings.Repeat("a", 64), "shop/eu"} {
		t.Run(ns, func(t *testing.T) {
			probs := parseProblems(t, "auth:\n  agents:\n    - token_sha256: "+tok+"\n      namespace: '"+ns+"'\n")
			if len(probs) != 1 || probs[0].Line != 4 || probs[0].Path != "auth.agents[0].namespace" ||
				!strings.Contains(probs[0].Message, "lowercase letters, digits") {
				t.Fatalf("got %+v", probs)
			}
		})
	}
	for _, ns := range []string{"shop", "team-1", "eu.shop_2", strings.Repeat("a", 63)} {
		if probs := parseProblems(t, "auth:\n  agents:\n    - {token_sha256: "+tok+", namespace: '"+ns+"'}\n"); probs != nil {
			t.Errorf("%q refused: %+v", ns, probs)
		}
	}
	// The proxy's namespace is the tenant of every proxied request: the same format.
	if probs := parseProblems(t, "proxy:\n  namespace: Shop\n"); len(probs) != 1 || probs[0].Line != 2 || probs[0].Path != "proxy.namespace" {
		t.Fatalf("proxy.namespace: %+v", probs)
	}
}

// A token hash of a word that examples and tutorials use is refused: a
// copied example must not open Ratchet to anyone who guesses "test".
func TestWellKnownTokenHashesAreRefused(t *testing.T) {
	for word, hash := range map[string]string{
		"test":     "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"test2":    "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752",
		"password": "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
		"changeme": "057ba03d6c44104863dc7361fe4578965d1887360f90a0895882e58a6248fc86",
		"admin":    "8c6976e5b5410415bde908bd4dee15dfb167a9c873fc4bb8a81f6f2ab448a918",
		"secret":   "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b",
		"":         "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
	} {
		for _, list := range []string{"agents:\n    - {token_sha256: " + hash + ", namespace: shop}", "admins:\n    - {token_sha256: " + hash + ", name: alice}"} {
			probs := parseProblems(t, "auth:\n  "+list+"\n")
			if len(probs) != 1 || probs[0].Line != 3 || !strings.HasSuffix(probs[0].Path, ".token_sha256") ||
				!strings.Contains(probs[0].Message, "anyone can guess") || !strings.Contains(probs[0].Message, "ratchet token hash < token-file") {
				t.Errorf("%q in %s: %+v", word, strings.Fields(list)[0], probs)
			}
		}
	}
}

// One token is one identity: the same hash listed for an agent and an
// admin would let that agent approve its own actions.
func TestATokenCannotBeBothAgentAndAdmin(t *testing.T) {
	const tok = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"
	probs := parseProblems(t, "auth:\n  agents:\n    - {token_sha256: "+tok+", namespace: shop}\n  admins:\n    - {token_sha256: "+tok+", name: alice}\n")
	if len(probs) != 1 || probs[0].Line != 5 || probs[0].Path != "auth.admins[0].token_sha256" || !strings.Contains(probs[0].Message, "auth.agents[0]") {
		t.Fatalf("got %+v", probs)
	}
}

// placeholderRe finds the token hash placeholders of the shipped examples.
var placeholderRe = regexp.MustCompile(`token_sha256: "REPLACE[^"]*"`)

// The example config cannot be used as copied: its token hashes are
// placeholders that fail validation with the command that makes real ones;
// with real hashes filled in, it is valid.
func TestExampleConfigIsNotUsableAsIs(t *testing.T) {
	const file = "../../configs/ratchet.example.yaml"
	_, err := Load(file)
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 2 {
		t.Fatalf("the example as shipped: %v", err)
	}
	for _, p := range ce.Problems {
		if !strings.HasSuffix(p.Path, ".token_sha256") || !strings.Contains(p.Message, "ratchet token hash < token-file") {
			t.Errorf("problem %+v", p)
		}
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	filled := placeholderRe.ReplaceAllStringFunc(string(raw), func(string) string {
		n++
		sum := sha256.Sum256(fmt.Appendf(nil, "a long random token %d", n))
		return "token_sha256: " + hex.EncodeToString(sum[:])
	})
	if n != 2 {
		t.Fatalf("%d placeholders, want 2", n)
	}
	cfg, err := Parse(strings.NewReader(filled), file)
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 0 {
		t.Errorf("the example, filled in, warns: %+v", w)
	}
	if len(cfg.Policies) != 9 || cfg.Policies[8].Mode != "observe" || cfg.Auth.Agents[0].Namespace != "shop" || cfg.Auth.Admins[0].Name != "alice" || cfg.Proxy.CurrencyMicros["eur"] != 1_080_000 {
		t.Fatalf("example decoded wrongly: %+v", cfg)
	}
	if d := cfg.LedgerDefaults(); d.Retention != 720*time.Hour || d.ApprovalTTL != 24*time.Hour || d.MaxLeaseSeconds != 3600 {
		t.Fatalf("defaults: %+v", d)
	}
}

// Agents without admins close the admin API and the console: the config
// is valid, and its warning names the line of auth.agents and says what
// to add.
func TestAgentsWithoutAdminsWarnsAtTheAgentsLine(t *testing.T) {
	const tok = "3a6eb0790f39ac87c94f3856b2dd2c5d110e6811602261a9a923d3bb23adc8b7"
	cfg, err := Parse(strings.NewReader("data_dir: ./data\nauth:\n  agents:\n    - {token_sha256: "+tok+", namespace: shop}\n"+
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Warnings()
	if len(w) != 1 || w[0].Line != 3 || w[0].Path != "auth.agents" || !strings.Contains(w[0].Message, "answer no one") ||
		!strings.Contains(w[0].Message, "add auth.admins") || !strings.Contains(w[0].Message, "policies[0] (payment.*)") {
		t.Fatalf("warnings %+v", w)
	}
	for name, yaml := range map[string]string{
		"no auth":          "",
		"admins too":       "auth:\n  agents: [{token_sha256: " + tok + ", namespace: shop}]\n  admins: [{token_sha256: " + strings.Repeat("ab", 32) + ", name: alice}]\n",
		"admins, no agent": "auth:\n  admins: [{token_sha256: " + strings.Repeat("ab", 32) + ", name: alice}]\n",
	} {
		cfg, err := Parse(strings.NewReader(yaml), "t.yaml")
		if err != nil || len(cfg.Warnings()) != 0 {
			t.Errorf("%s: %v %+v", name, err, cfg.Warnings())
		}
	}
}

// Two admin names that read the same (case, full-width letters, spaces,
// an invisible character aside) are refused with the second's line: the
// approvals of one person holding both tokens would otherwise be told
// apart in the record while counting once toward approvers_required, and
// which one spoke would be unclear. The same name twice (a token rotated
// in beside the old one) is one person and loads.
func TestTwoAdminNamesThatReadTheSameAreRefused(t *testing.T) {
	tok := func(b string) string { return strings.Repeat(b, 32) }
	for _, name := range []string{"Alice", "ＡＬＩＣＥ", "\"ali\u200bce\"", "\" alice\""} {
		probs := parseProblems(t, "auth:\n  admins:\n    - {token_sha256: "+tok("ab")+", name: alice}\n    - {token_sha256: "+tok("cd")+", name: "+name+"}\n")
		if len(probs) != 1 {
			t.Errorf("%s beside alice: %d problems, want 1: %+v", name, len(probs), probs)
			continue
		}
		p := probs[0]
		if diff := cmp.Diff([]any{4, "auth.admins[1].name", true}, []any{p.Line, p.Path, strings.Contains(p.Message, "auth.admins[0]")}); diff != "" {
			t.Errorf("%s beside alice (-want +got line, path, names the first):\n%s", name, diff)
		}
	}
	if probs := parseProblems(t, "auth:\n  admins:\n    - {token_sha256: "+tok("ab")+", name: alice}\n    - {token_sha256: "+tok("cd")+", name: alice}\n"); len(probs) != 0 {
		t.Errorf("alice's two tokens: %+v, want none", probs)
	}
	if probs := parseProblems(t, "auth:\n  admins:\n    - {token_sha256: "+tok("ab")+", name: \"ali\\nce\"}\n"); len(probs) != 1 || probs[0].Path != "auth.admins[0].name" {
		t.Errorf("a name with a newline: %+v, want one problem at auth.admins[0].name", probs)
	}
}
