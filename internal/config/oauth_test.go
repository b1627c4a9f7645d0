package config

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestOAuthConfigIsCheckedWithLines: each mistake in auth.oauth is refused
// at load with its line and what to fix, above all an algorithm that is
// none or HMAC.
func TestOAuthConfigIsCheckedWithLines(t *testing.T) {
	const head = "auth:\n  oauth:\n    resource: https://ratchet.example.com/mcp\n    issuers:\n"
	good := "      - name: corp\n        issuer: https://idp.example.com\n        jwks_url: https://idp.example.com/jwks\n        namespace: payments\n"
	if probs := parseProblems(t, head+good); probs != nil {
		t.Fatalf("a good block refused: %+v", probs)
	}
	cases := []struct {
		name, issuer string
		line         int
		path, says   string
	}{
		{"alg none", good + "        algorithms: [none]\n", 9, "auth.oauth.issuers[0].algorithms[0]", "never none, never HMAC"},
		{"alg HS256", good + "        algorithms: [RS256, HS256]\n", 9, "auth.oauth.issuers[0].algorithms[1]", "never none, never HMAC"},
		{"no keys", "      - name: corp\n        issuer: https://idp.example.com\n        namespace: payments\n", 5, "auth.oauth.issuers[0]", "exactly one of discovery_url, jwks_url and jwks_file"},
		{"two key sources", good + "        jwks_file: /etc/keys.json\n", 5, "auth.oauth.issuers[0]", "exactly one of"},
		{"plain http beyond loopback", strings.Replace(good, "https://idp.example.com/jwks", "http://idp.example.com/jwks", 1), 7, "auth.oauth.issuers[0].jwks_url", "must be https"},
		{"no namespace", strings.Replace(good, "        namespace: payments\n", "", 1), 5, "auth.oauth.issuers[0].namespace", "is required"},
		{"bad name", strings.Replace(good, "name: corp", "name: Corp IdP", 1), 5, "auth.oauth.issuers[0].name", "must be 1-32 of a-z"},
		{"subject without agent", good + "        subjects:\n          - {subject: client-1, namespace: payments}\n", 10, "auth.oauth.issuers[0].subjects[0].agent_id", "is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			probs := parseProblems(t, head+c.issuer)
			if len(probs) != 1 {
				t.Fatalf("got %d problems, want 1: %+v", len(probs), probs)
			}
			got := fmt.Sprintf("%d %s", probs[0].Line, probs[0].Path)
			if diff := cmp.Diff(fmt.Sprintf("%d %s", c.line, c.path), got); diff != "" {
				t.Errorf("line and path (-want +got):\n%s", diff)
			}
			if !strings.Contains(probs[0].Message, c.says) {
				t.Errorf("message %q does not say %q", probs[0].Message, c.says)
			}
		})
	}
	same := "auth:\n  oauth:\n    resource: https://r.example.com/mcp\n    agent_scope: x\n    admin_scope: x\n    issuers:\n" + good
	if probs := parseProblems(t, same); len(probs) != 1 || probs[0].Path != "auth.oauth.admin_scope" || probs[0].Line != 5 {
		t.Errorf("one scope for both rights: %+v", probs)
	}
}

// TestTheExamplesOAuthBlockIsValid: the commented auth.oauth block of the
// example config, a corporate issuer and a Kubernetes cluster, loads as it
// is once uncommented.
func TestTheExamplesOAuthBlockIsValid(t *testing.T) {
	b, err := os.ReadFile("../../configs/ratchet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "  # oauth:")
	end := strings.Index(s[start:], "\n\n")
	if start < 0 || end < 0 {
		t.Fatal("no oauth block in the example")
	}
	out := []string{"auth:"}
	for _, l := range strings.Split(s[start:start+end], "\n") {
		l = strings.Replace(l, "# ", "", 1)
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	cfg, err := Parse(strings.NewReader(strings.Join(out, "\n")), "example")
	if err != nil {
		t.Fatalf("%v\n%s", err, strings.Join(out, "\n"))
	}
	var names []string
	for _, is := range cfg.Auth.OAuth.Issuers {
		names = append(names, fmt.Sprintf("%s kubernetes=%v audiences=%v", is.Name, is.Kubernetes, is.Audiences))
	}
	want := []string{"corp kubernetes=false audiences=[https://ratchet.example.com/mcp]", "cluster kubernetes=true audiences=[ratchet]"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("the example's issuers (-want +got):\n%s", diff)
	}
}

// TestAStaticAdminCannotBeNamedAsAnIssuersAdmin: an OAuth admin is
// recorded as "<issuer name>:<claim>"; a static admin named "corp:alice"
// beside issuer corp would be recorded as the same person as corp's
// alice (on approvals, where people are counted, and in the audit log),
// so the config refuses it at its line.
func TestAStaticAdminCannotBeNamedAsAnIssuersAdmin(t *testing.T) {
	cfg := func(name string) string {
		return "auth:\n  admins:\n    - {name: '" + name + "', token_sha256: " + strings.Repeat("ab", 32) + "}\n" +
			"  oauth:\n    resource: https://ratchet.example.com/mcp\n    issuers:\n" +
			"      - {name: corp, issuer: https://idp.example.com, jwks_url: https://idp.example.com/jwks, namespace: payments}\n"
	}
	if probs := parseProblems(t, cfg("ops-oncall")); probs != nil {
		t.Fatalf("a static admin of another name refused: %+v", probs)
	}
	probs := parseProblems(t, cfg("corp:alice"))
	if len(probs) != 1 {
		t.Fatalf("got %d problems, want 1: %+v", len(probs), probs)
	}
	if diff := cmp.Diff("3 auth.admins[0].name", fmt.Sprintf("%d %s", probs[0].Line, probs[0].Path)); diff != "" {
		t.Errorf("line and path (-want +got):\n%s", diff)
	}
	if !strings.Contains(probs[0].Message, "issuer corp's admins") {
		t.Errorf("message %q does not say it is named as issuer corp's admins", probs[0].Message)
	}
}
