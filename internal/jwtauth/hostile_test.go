package jwtauth_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth/jwtauthtest"
)

// fileIssuer is an issuer whose key set (an RSA key for RS256 and a P-256
// key for ES256, each with its alg as RFC 7517 section 4.4 says) is a
// jwks_file, accepting every algorithm the keys could verify.
type fileIssuer struct {
	rsa *rsa.PrivateKey
	ec  *ecdsa.PrivateKey
	v   *jwtauth.Verifier
	log *bytes.Buffer
}

func newFileIssuer(t *testing.T, edit func(*jwtauth.Issuer)) *fileIssuer {
	t.Helper()
	fi := &fileIssuer{log: &bytes.Buffer{}}
	fi.rsa, _ = rsa.GenerateKey(rand.Reader, 2048)
	fi.ec, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &fi.rsa.PublicKey, KeyID: "r1", Algorithm: "RS256", Use: "sig"},
		{Key: &fi.ec.PublicKey, KeyID: "e1", Algorithm: "ES256", Use: "sig"},
	}})
	f := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(f, set, 0o600); err != nil {
		t.Fatal(err)
	}
	is := jwtauth.Issuer{Name: "corp", Issuer: "https://idp.test", JWKSFile: f, Audiences: []string{aud},
		Algorithms: []string{"RS256", "PS256", "ES256", "ES384"}, Namespace: "payments"}
	if edit != nil {
		edit(&is)
	}
	v, err := jwtauth.New(jwtauth.Options{Issuers: []jwtauth.Issuer{is}, AgentScope: "ratchet:agent", AdminScope: "ratchet:admin",
		Logger: slog.New(slog.NewJSONHandler(fi.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fi.v = v
	return fi
}

func (fi *fileIssuer) claims(sub, scope string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": "https://idp.test", "sub": sub, "aud": aud, "scope": scope, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
}

func sign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := json.Marshal(claims)
	o, err := s.Sign(p)
	if err != nil {
		t.Fatal(err)
	}
	c, err := o.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func reasonOf(err error) string {
	if e, ok := errors.AsType[*jwtauth.Error](err); ok {
		return e.Reason
	}
	if err != nil {
		return "not a *jwtauth.Error: " + err.Error()
	}
	return "accepted"
}

// TestATokenMustUseTheAlgorithmItsKeyNames: a key whose JWK says alg RS256
// verifies RS256 only, though the issuer is trusted for PS256 too and an
// RSA key could verify it (RFC 8725 section 3.1: a key is used with one
// algorithm). (ES384 on a P-256 key go-jose refuses itself: it checks the
// curve's size against the algorithm.)
func TestATokenMustUseTheAlgorithmItsKeyNames(t *testing.T) {
	fi := newFileIssuer(t, nil)
	ctx := context.Background()
	got := map[string]string{}
	for name, tok := range map[string]string{
		"RS256 with the RS256 key": sign(t, jose.RS256, fi.rsa, "r1", fi.claims("bot", "ratchet:agent")),
		"PS256 with the RS256 key": sign(t, jose.PS256, fi.rsa, "r1", fi.claims("bot", "ratchet:agent")),
		"ES256 with the ES256 key": sign(t, jose.ES256, fi.ec, "e1", fi.claims("bot", "ratchet:agent")),
	} {
		_, err := fi.v.Verify(ctx, tok, jwtauth.RightAgent)
		got[name] = reasonOf(err)
	}
	want := map[string]string{"RS256 with the RS256 key": "accepted", "PS256 with the RS256 key": "algorithm",
		"ES256 with the ES256 key": "accepted"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
}

// TestAnIdentityFromClaimsMustBeOneTheLedgerAccepts: a namespace, agent_id
// or admin name read from a token's claims is held to the rules the
// config holds a static token's to (a namespace of lowercase letters,
// digits, '.', '_' and '-'; ids of valid NFC UTF-8 without control or
// invisible characters, at most 255), and refused at the door with what is
// wrong, not let in to fail on every call or to put a name into the audit
// log that looks like another.
func TestAnIdentityFromClaimsMustBeOneTheLedgerAccepts(t *testing.T) {
	fi := newFileIssuer(t, func(is *jwtauth.Issuer) {
		is.Namespace, is.NamespaceClaim, is.AdminNameClaim = "", "tenant", "email"
	})
	ctx := context.Background()
	agent := func(tenant, sub string) string {
		c := fi.claims(sub, "ratchet:agent")
		c["tenant"] = tenant
		return sign(t, jose.RS256, fi.rsa, "r1", c)
	}
	admin := func(email string) string {
		c := fi.claims("u-1", "ratchet:admin")
		c["email"] = email
		return sign(t, jose.RS256, fi.rsa, "r1", c)
	}
	cases := []struct {
		name, token string
		right       jwtauth.Right
		want        string
	}{
		{"a namespace with dots", agent("shop.eu", "bot"), jwtauth.RightAgent, "accepted"},
		{"an agent_id in NFC", agent("shop", "b\u00f6t"), jwtauth.RightAgent, "accepted"},
		{"an upper-case namespace", agent("Shop", "bot"), jwtauth.RightAgent, "bad_identity"},
		{"a namespace with a slash", agent("shop/../billing", "bot"), jwtauth.RightAgent, "bad_identity"},
		{"a namespace with a zero-width space", agent("sh\u200bop", "bot"), jwtauth.RightAgent, "bad_identity"},
		{"an agent_id with a newline", agent("shop", "bot\nadmin"), jwtauth.RightAgent, "bad_identity"},
		{"an agent_id with a zero-width space", agent("shop", "b\u200bot"), jwtauth.RightAgent, "bad_identity"},
		{"an agent_id not in NFC", agent("shop", "bo\u0308t"), jwtauth.RightAgent, "bad_identity"},
		{"an agent_id of 300 characters", agent("shop", strings.Repeat("b", 300)), jwtauth.RightAgent, "bad_identity"},
		{"an admin name", admin("alice@example.com"), jwtauth.RightAdmin, "accepted"},
		{"an admin name with a right-to-left override", admin("alice\u202emoc.elpmaxe@bob"), jwtauth.RightAdmin, "bad_identity"},
		{"an admin name with a newline", admin("alice\nbob"), jwtauth.RightAdmin, "bad_identity"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := fi.v.Verify(ctx, c.token, c.right)
			if got := reasonOf(err); got != c.want {
				t.Errorf("decision = %s, want %s (principal %+v)", got, c.want, p)
			}
			if e, ok := errors.AsType[*jwtauth.Error](err); ok && e.Status != 401 {
				t.Errorf("status = %d, want 401", e.Status)
			}
		})
	}
}

// TestARefusalsLogLineIsBoundedAndHoldsNoToken: the kid and subject a
// token carries are attacker's text; the log gets a bounded prefix, and
// never the token.
func TestARefusalsLogLineIsBoundedAndHoldsNoToken(t *testing.T) {
	fi := newFileIssuer(t, nil)
	tok := sign(t, jose.RS256, fi.rsa, strings.Repeat("K", 8000), fi.claims("bot", "ratchet:agent"))
	if _, err := fi.v.Verify(context.Background(), tok, jwtauth.RightAgent); reasonOf(err) != "unknown_kid" {
		t.Fatalf("decision = %s, want unknown_kid", reasonOf(err))
	}
	line := fi.log.String()
	if len(line) > 1000 {
		t.Errorf("the refusal's log line is %d bytes, want at most 1000: %.300s…", len(line), line)
	}
	if sig := tok[strings.LastIndex(tok, ".")+1:]; strings.Contains(line, sig) {
		t.Error("the log holds the token's signature")
	}
}

// TestAnIssuerOfSubjectsOnlyAdmitsThoseSubjects: an issuer configured
// with subjects and no namespace or namespace_claim names its agents one
// by one; a token of another subject (with the agent scope) is refused,
// not let in to the default namespace under its sub.
func TestAnIssuerOfSubjectsOnlyAdmitsThoseSubjects(t *testing.T) {
	fi := newFileIssuer(t, func(is *jwtauth.Issuer) {
		is.Namespace = ""
		is.Subjects = map[string]jwtauth.Subject{"client-7": {Namespace: "shop", AgentID: "checkout-bot"}}
	})
	ctx := context.Background()
	p, err := fi.v.Verify(ctx, sign(t, jose.RS256, fi.rsa, "r1", fi.claims("client-7", "ratchet:agent")), jwtauth.RightAgent)
	if err != nil {
		t.Fatalf("the listed subject: %v", err)
	}
	if got := p.Namespace + "/" + p.AgentID; got != "shop/checkout-bot" {
		t.Errorf("the listed subject is %s, want shop/checkout-bot", got)
	}
	p, err = fi.v.Verify(ctx, sign(t, jose.RS256, fi.rsa, "r1", fi.claims("stranger", "ratchet:agent")), jwtauth.RightAgent)
	if got := reasonOf(err); got != "unknown_subject" {
		t.Errorf("another subject: decision = %s, want unknown_subject (principal %+v)", got, p)
	}
}

// TestACallerWhoHangsUpDoesNotSpoilTheKeysForOthers: the first token
// loads the issuer's keys; a caller that sends one and hangs up at once
// (its request's context cancelled) must not leave the issuer's keys
// unread for a minute, refusing every good token meanwhile (once a minute,
// that kept an issuer's tokens out for good).
func TestACallerWhoHangsUpDoesNotSpoilTheKeysForOthers(t *testing.T) {
	is := jwtauthtest.New(t)
	v := newVerifier(t, is, map[string]int{})
	tok := is.Sign(t, is.Std("bot", aud, "ratchet:agent"))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	v.Verify(gone, is.SignKID(t, is.Std("bot", aud, "ratchet:agent"), "made-up"), jwtauth.RightAgent)
	if _, err := v.Verify(context.Background(), tok, jwtauth.RightAgent); err != nil {
		t.Errorf("a good token after a caller hung up: %v", err)
	}
}

// TestAnIssuerWhoseKeysCannotBeReadIsNotDescribedToTheCaller: the
// refusal says to try again later; where the keys were looked for (a URL
// inside the cluster) and why it failed go to the log only.
func TestAnIssuerWhoseKeysCannotBeReadIsNotDescribedToTheCaller(t *testing.T) {
	is := jwtauthtest.New(t)
	var log bytes.Buffer
	v, err := jwtauth.New(jwtauth.Options{
		Issuers: []jwtauth.Issuer{{Name: "cluster", Issuer: is.URL, JWKSURL: is.URL + "/no-such-jwks", Audiences: []string{aud},
			Algorithms: []string{"RS256"}, Namespace: "payments"}},
		AgentScope: "ratchet:agent", AdminScope: "ratchet:admin", Logger: slog.New(slog.NewTextHandler(&log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v.Verify(context.Background(), is.Sign(t, is.Std("bot", aud, "ratchet:agent")), jwtauth.RightAgent)
	e, ok := errors.AsType[*jwtauth.Error](err)
	if !ok || e.Reason != "keys_unavailable" {
		t.Fatalf("err = %v, want keys_unavailable", err)
	}
	if strings.Contains(e.Message, "no-such-jwks") {
		t.Errorf("the refusal names where the keys are: %s", e.Message)
	}
	if !strings.Contains(log.String(), "no-such-jwks") {
		t.Errorf("the log does not say what failed:\n%s", log.String())
	}
}

// TestNothingIsFetchedThatTheConfigDoesNotName: a hostile or compromised
// discovery endpoint cannot send Ratchet elsewhere: a redirect is not
// followed, a jwks_uri on another host is not fetched, and a token's jku
// or x5u header is never fetched; each refusal is keys_unavailable (or
// unknown_kid) and the other host sees no request.
func TestNothingIsFetchedThatTheConfigDoesNotName(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	var issuerURL string
	mux := http.NewServeMux()
	mux.HandleFunc("/redirect/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/.well-known/openid-configuration", http.StatusFound)
	})
	mux.HandleFunc("/offsite/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": issuerURL + "/offsite", "jwks_uri": other.URL + "/jwks"})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	issuerURL = srv.URL
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	for _, name := range []string{"redirect", "offsite"} {
		t.Run(name, func(t *testing.T) {
			iss := srv.URL + "/" + name
			v, err := jwtauth.New(jwtauth.Options{
				Issuers: []jwtauth.Issuer{{Name: "corp", Issuer: iss, DiscoveryURL: iss + "/.well-known/openid-configuration",
					Audiences: []string{aud}, Algorithms: []string{"RS256"}, Namespace: "payments"}},
				AgentScope: "ratchet:agent", AdminScope: "ratchet:admin",
			})
			if err != nil {
				t.Fatal(err)
			}
			c := map[string]any{"iss": iss, "sub": "bot", "aud": aud, "scope": "ratchet:agent", "exp": time.Now().Add(time.Minute).Unix()}
			s, _ := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key},
				(&jose.SignerOptions{}).WithHeader("kid", "k1").WithHeader("jku", other.URL+"/jwks").WithHeader("x5u", other.URL+"/cert"))
			p, _ := json.Marshal(c)
			o, _ := s.Sign(p)
			tok, _ := o.CompactSerialize()
			if _, err := v.Verify(context.Background(), tok, jwtauth.RightAgent); reasonOf(err) != "keys_unavailable" {
				t.Errorf("decision = %s, want keys_unavailable", reasonOf(err))
			}
		})
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the host the config does not name got %d requests", n)
	}
}
