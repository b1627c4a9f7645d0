package jwtauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
)

const aud = "http://ratchet.test/mcp"

func newVerifier(t *testing.T, is *jwtauthtest.Issuer, counted map[string]int) *jwtauth.Verifier {
	t.Helper()
	v, err := jwtauth.New(jwtauth.Options{
		Issuers: []jwtauth.Issuer{{Name: "corp", Issuer: is.URL, DiscoveryURL: is.DiscoveryURL(), Audiences: []string{aud},
			Algorithms: []string{"RS256"}, Namespace: "payments", AgentIDClaim: "sub"}},
		ClockSkew: 30 * time.Second, AgentScope: "ratchet:agent", AdminScope: "ratchet:admin",
		Count: func(issuer, result string) { counted[issuer+" "+result]++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAValidAgentTokenNamesItsNamespaceAndAgent(t *testing.T) {
	is := jwtauthtest.New(t)
	counted := map[string]int{}
	v := newVerifier(t, is, counted)
	p, err := v.Verify(context.Background(), is.Sign(t, is.Std("bot-7", aud, "ratchet:agent")), jwtauth.RightAgent)
	if err != nil {
		t.Fatal(err)
	}
	want := &jwtauth.Principal{IssuerName: "corp", Issuer: is.URL, Subject: "bot-7", KeyID: "k1", Namespace: "payments", AgentID: "bot-7"}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Errorf("principal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"corp accepted": 1}, counted); diff != "" {
		t.Errorf("counted (-want +got):\n%s", diff)
	}
}

func TestHostileTokensAreRefused(t *testing.T) {
	is := jwtauthtest.New(t)
	other := jwtauthtest.New(t)
	v := newVerifier(t, is, map[string]int{})
	with := func(c jwtauthtest.Claims, k string, val any) jwtauthtest.Claims {
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	agent := func() jwtauthtest.Claims { return is.Std("bot", aud, "ratchet:agent") }
	now := time.Now()
	cases := []struct {
		name       string
		token      string
		right      jwtauth.Right
		status     int
		code       string
		reason     string
		wantScope  string
		wantInText string
	}{
		{"wrong audience", is.Sign(t, is.Std("bot", "http://other.test/mcp", "ratchet:agent")), jwtauth.RightAgent, 401, "invalid_token", "audience", "", ""},
		{"wrong issuer", other.Sign(t, other.Std("bot", aud, "ratchet:agent")), jwtauth.RightAgent, 401, "invalid_token", "issuer", "", ""},
		{"issuer claimed, signed by another key", other.Sign(t, with(other.Std("bot", aud, "ratchet:agent"), "iss", is.URL)), jwtauth.RightAgent, 401, "invalid_token", "signature", "", ""},
		{"expired", is.Sign(t, with(agent(), "exp", now.Add(-2*time.Minute).Unix())), jwtauth.RightAgent, 401, "invalid_token", "expired", "", ""},
		{"no expiry", is.Sign(t, with(agent(), "exp", nil)), jwtauth.RightAgent, 401, "invalid_token", "no_expiry", "", ""},
		{"not yet valid", is.Sign(t, with(agent(), "nbf", now.Add(5*time.Minute).Unix())), jwtauth.RightAgent, 401, "invalid_token", "not_yet_valid", "", ""},
		{"issued in the future", is.Sign(t, with(agent(), "iat", now.Add(5*time.Minute).Unix())), jwtauth.RightAgent, 401, "invalid_token", "issued_in_future", "", ""},
		{"alg none", is.SignNone(agent()), jwtauth.RightAgent, 401, "invalid_token", "algorithm", "", ""},
		{"HS256 keyed with the public key", is.SignHS256WithPublicKey(agent()), jwtauth.RightAgent, 401, "invalid_token", "algorithm", "", ""},
		{"not a JWT", "abc.def.ghi", jwtauth.RightAgent, 401, "invalid_token", "malformed", "", ""},
		{"admin scope on the agent tools", is.Sign(t, is.Std("alice", aud, "ratchet:admin")), jwtauth.RightAgent, 403, "insufficient_scope", "scope", "ratchet:agent", ""},
		{"agent scope on the admin API", is.Sign(t, agent()), jwtauth.RightAdmin, 403, "insufficient_scope", "scope", "ratchet:admin", ""},
		{"no scope", is.Sign(t, is.Std("bot", aud, "")), jwtauth.RightAgent, 403, "insufficient_scope", "scope", "ratchet:agent", ""},
		{"both scopes", is.Sign(t, is.Std("bot", aud, "ratchet:agent ratchet:admin")), jwtauth.RightAgent, 401, "invalid_token", "both_scopes", "", ""},
		{"both scopes, as admin", is.Sign(t, is.Std("bot", aud, "ratchet:admin ratchet:agent")), jwtauth.RightAdmin, 401, "invalid_token", "both_scopes", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := v.Verify(context.Background(), c.token, c.right)
			if p != nil {
				t.Errorf("principal %+v, want none", p)
			}
			var e *jwtauth.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want a *jwtauth.Error", err)
			}
			got := []any{e.Status, e.Code, e.Reason, e.Scope}
			if diff := cmp.Diff([]any{c.status, c.code, c.reason, c.wantScope}, got); diff != "" {
				t.Errorf("status, code, reason, scope (-want +got):\n%s\nmessage: %s", diff, e.Message)
			}
			if e.Message == "" {
				t.Error("no message")
			}
		})
	}
}

func TestAnUnknownKidCostsOneFetchThenIsRefused(t *testing.T) {
	is := jwtauthtest.New(t)
	// The verifier's clock runs with the wall clock the tokens are signed
	// by (a clock stopped at the start refused a token signed a second
	// later as not yet valid), ahead by what the test moves it on.
	var ahead time.Duration
	v, err := jwtauth.New(jwtauth.Options{
		Issuers: []jwtauth.Issuer{{Name: "corp", Issuer: is.URL, JWKSURL: is.URL + "/jwks", Audiences: []string{aud},
			Algorithms: []string{"RS256"}, Namespace: "payments"}},
		AgentScope: "ratchet:agent", AdminScope: "ratchet:admin", Now: func() time.Time { return time.Now().Add(ahead) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	unknown := func(kid string) {
		t.Helper()
		_, err := v.Verify(ctx, is.SignKID(t, is.Std("bot", aud, "ratchet:agent"), kid), jwtauth.RightAgent)
		var e *jwtauth.Error
		if !errors.As(err, &e) || e.Reason != "unknown_kid" {
			t.Errorf("kid %s: err = %v, want unknown_kid", kid, err)
		}
	}
	if _, err := v.Verify(ctx, is.Sign(t, is.Std("bot", aud, "ratchet:agent")), jwtauth.RightAgent); err != nil {
		t.Fatal(err)
	}
	if got := is.Fetches(); got != 1 {
		t.Fatalf("fetches after the first token = %d, want 1", got)
	}
	for _, kid := range []string{"made-up-1", "made-up-2", "made-up-3"} {
		unknown(kid)
	}
	if got := is.Fetches(); got != 2 {
		t.Errorf("fetches after three unknown kids = %d, want 2 (the first token's, then one for the unknown kids)", got)
	}
	if _, err := v.Verify(ctx, is.Sign(t, is.Std("bot", aud, "ratchet:agent")), jwtauth.RightAgent); err != nil {
		t.Errorf("the known kid after the unknown ones: %v", err)
	}
	ahead = jwtauth.DefaultMinRefresh
	unknown("made-up-4")
	if got := is.Fetches(); got != 3 {
		t.Errorf("fetches after a minute and another unknown kid = %d, want 3", got)
	}
}

// TestAServiceAccountTokenIsAnAgentOfItsNamespace: a projected service
// account token of a Kubernetes issuer names the service account's
// namespace and name (or a subjects entry renames it), and never opens the
// admin API, whatever scope it carries.
func TestAServiceAccountTokenIsAnAgentOfItsNamespace(t *testing.T) {
	is := jwtauthtest.New(t)
	v, err := jwtauth.New(jwtauth.Options{
		Issuers: []jwtauth.Issuer{{Name: "cluster", Issuer: is.URL, DiscoveryURL: is.DiscoveryURL(), Audiences: []string{"ratchet"},
			Algorithms: []string{"RS256"}, Kubernetes: true,
			Subjects: map[string]jwtauth.Subject{"system:serviceaccount:ops:legacy": {Namespace: "billing", AgentID: "legacy-billing"}}}},
		AgentScope: "ratchet:agent", AdminScope: "ratchet:admin",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var got []string
	for _, sa := range [][2]string{{"payments", "checkout-agent"}, {"ops", "legacy"}} {
		p, err := v.Verify(ctx, is.Sign(t, is.ServiceAccount(sa[0], sa[1], "ratchet", time.Hour)), jwtauth.RightAgent)
		if err != nil {
			t.Fatalf("%v: %v", sa, err)
		}
		got = append(got, p.Namespace+"/"+p.AgentID)
	}
	if diff := cmp.Diff([]string{"payments/checkout-agent", "billing/legacy-billing"}, got); diff != "" {
		t.Errorf("identities (-want +got):\n%s", diff)
	}
	admin := is.ServiceAccount("payments", "checkout-agent", "ratchet", time.Hour)
	admin["scope"] = "ratchet:admin"
	_, err = v.Verify(ctx, is.Sign(t, admin), jwtauth.RightAdmin)
	if e, ok := errors.AsType[*jwtauth.Error](err); !ok || e.Status != 403 {
		t.Errorf("a service account token with the admin scope on the admin API: %v, want 403", err)
	}
	_, err = v.Verify(ctx, is.Sign(t, is.ServiceAccount("payments", "checkout-agent", "https://kubernetes.default.svc", time.Hour)), jwtauth.RightAgent)
	if e, ok := errors.AsType[*jwtauth.Error](err); !ok || e.Reason != "audience" {
		t.Errorf("the pod's API server token (another audience): %v, want refused for its audience", err)
	}
}
