// Package jwtauthtest is a token issuer for tests: an RSA key, its JSON Web
// Key Set and OIDC discovery document served over HTTP (counting the key
// set's fetches), and tokens minted with any claims, including the hostile
// ones (alg none, HS256 keyed with the public key, unknown kid).
package jwtauthtest

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// Issuer is a running test issuer.
type Issuer struct {
	// URL is the issuer's iss (the server's URL).
	URL string
	// KID is the id of the key it signs with.
	KID string
	key *rsa.PrivateKey
	srv *httptest.Server
	// fetches counts GETs of the key set.
	fetches atomic.Int64
}

// New starts an issuer; it stops when the test ends.
func New(t testing.TB) *Issuer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is := &Issuer{KID: "k1", key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"issuer": is.URL, "jwks_uri": is.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		is.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write(is.JWKS())
	})
	is.srv = httptest.NewServer(mux)
	is.URL = is.srv.URL
	t.Cleanup(is.srv.Close)
	return is
}

// JWKS is the issuer's public key set.
func (is *Issuer) JWKS() []byte {
	b, _ := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &is.key.PublicKey, KeyID: is.KID, Algorithm: "RS256", Use: "sig"}}})
	return b
}

// Fetches is how many times the key set was fetched.
func (is *Issuer) Fetches() int64 { return is.fetches.Load() }

// DiscoveryURL is the issuer's OIDC discovery document.
func (is *Issuer) DiscoveryURL() string { return is.URL + "/.well-known/openid-configuration" }

// Claims are a token's claims; Std fills iss, iat, nbf and exp around now
// unless they are set.
type Claims map[string]any

// Std returns claims for sub and aud, issued now and valid for 5 minutes,
// with scope, plus extra.
func (is *Issuer) Std(sub, aud, scope string) Claims {
	now := time.Now()
	c := Claims{"iss": is.URL, "sub": sub, "aud": aud, "iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
	if scope != "" {
		c["scope"] = scope
	}
	return c
}

// Sign mints an RS256 token with the issuer's key and kid.
func (is *Issuer) Sign(t testing.TB, c Claims) string { return is.SignKID(t, c, is.KID) }

// SignKID mints an RS256 token with the issuer's key under another kid.
func (is *Issuer) SignKID(t testing.TB, c Claims, kid string) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", kid)
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: is.key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(c)
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SignNone is a token with alg none and no signature.
func (is *Issuer) SignNone(c Claims) string {
	return raw(map[string]any{"alg": "none", "typ": "JWT", "kid": is.KID}, c) + "."
}

// SignHS256WithPublicKey is a token whose HMAC is keyed with the issuer's
// public key (PEM), the algorithm confusion of a verifier that lets the
// header choose.
func (is *Issuer) SignHS256WithPublicKey(c Claims) string {
	der, _ := x509.MarshalPKIXPublicKey(&is.key.PublicKey)
	pub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	in := raw(map[string]any{"alg": "HS256", "typ": "JWT", "kid": is.KID}, c)
	m := hmac.New(sha256.New, pub)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func raw(hdr map[string]any, c Claims) string {
	h, _ := json.Marshal(hdr)
	p, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p)
}

// ServiceAccount returns the claims of a projected service account token
// as the Kubernetes docs show one ("Service account tokens", the
// TokenRequest API's JWT): sub system:serviceaccount:<ns>:<name>, the
// audience asked for, and the pod, node and service account under
// kubernetes.io; valid for ttl from now.
func (is *Issuer) ServiceAccount(ns, name, aud string, ttl time.Duration) Claims {
	now := time.Now()
	return Claims{"iss": is.URL, "sub": "system:serviceaccount:" + ns + ":" + name, "aud": []string{aud},
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(), "jti": "jti-" + name,
		"kubernetes.io": map[string]any{
			"namespace":      ns,
			"node":           map[string]any{"name": "node-1", "uid": "0a1b2c3d-0000-4000-8000-000000000001"},
			"pod":            map[string]any{"name": name + "-7d9f8b6c5-x2k4q", "uid": "0a1b2c3d-0000-4000-8000-000000000002"},
			"serviceaccount": map[string]any{"name": name, "uid": "0a1b2c3d-0000-4000-8000-000000000003"},
		}}
}
