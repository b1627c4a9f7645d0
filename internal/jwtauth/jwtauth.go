// Package jwtauth makes Ratchet an OAuth 2.1 resource server: it verifies
// access tokens that are JWTs (RFC 9068, and Kubernetes' projected service
// account tokens) issued by the issuers the config trusts, and maps their
// claims to who is calling: an agent (namespace and agent_id) or an admin
// (a name), never both from one token.
//
// The JOSE library is github.com/go-jose/go-jose/v4: parsing takes the list
// of accepted algorithms, so a token whose header says "none" or HS256 (an
// HMAC keyed with the public key, the classic confusion) is refused before
// any key is looked at; it is small, has no dependencies beyond the
// standard library, and is what coreos/go-oidc and the Kubernetes API
// server verify tokens with. lestrrat-go/jwx/v3 does more than needed
// (JWE, its own HTTP cache), and golang-jwt/jwt/v5 leaves JWKS handling to
// the caller.
//
// Keys: each issuer's JSON Web Key Set is read from a file, fetched from a
// configured URL, or from the jwks_uri of its OIDC discovery document,
// which must then be on the discovery URL's own origin: Ratchet fetches
// nothing that the config does not name. A token whose kid is not in the
// cached set makes one fetch, and no other fetch of that issuer happens
// for MinRefresh (a stream of tokens with made-up kids costs one request a
// minute, not one each).
package jwtauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Right is what a caller asks to do.
type Right int

const (
	// RightAgent calls the MCP tools.
	RightAgent Right = iota + 1
	// RightAdmin uses the admin API.
	RightAdmin
)

// Issuer is one trusted token issuer.
type Issuer struct {
	// Name is the issuer's short name, recorded with the subject as the
	// identity of whoever acted ("<name>:<sub>").
	Name string
	// Issuer is the iss a token must carry.
	Issuer string
	// Exactly one of DiscoveryURL (an OIDC discovery document, whose
	// jwks_uri is fetched), JWKSURL and JWKSFile gives the keys.
	DiscoveryURL, JWKSURL, JWKSFile string
	// CAFile, when set, is the PEM bundle that the issuer's TLS
	// certificate must chain to (a cluster's CA); empty: the system roots.
	CAFile string
	// BearerTokenFile, when set, holds a token sent with each fetch of the
	// keys, read anew each time: a Kubernetes API server serves its
	// discovery document and keys to authenticated service accounts only
	// (the system:service-account-issuer-discovery role), so Ratchet sends
	// its own service account token.
	BearerTokenFile string
	// TokenReviewURL, for a Kubernetes issuer whose keys Ratchet cannot
	// fetch, is the API server's TokenReview endpoint, which decides each
	// token instead of a signature check here (review.go).
	TokenReviewURL string
	// Audiences: a token's aud must hold one of them.
	Audiences []string
	// Algorithms are the accepted JWS algorithms (asymmetric only).
	Algorithms []string
	// Kubernetes marks a cluster's service account token issuer: its
	// tokens carry no scope and grant agent rights only; the namespace and
	// agent_id default to the service account's namespace and name.
	Kubernetes bool
	// NamespaceClaim and AgentIDClaim name the claims (top level, string)
	// that give an agent's namespace and agent_id; Namespace is a fixed
	// namespace used when NamespaceClaim is empty.
	NamespaceClaim, AgentIDClaim, Namespace string
	// Subjects fix the identity of a subject or client id (the sub,
	// client_id or azp claim; for Kubernetes also
	// system:serviceaccount:<ns>:<name>), before any claim mapping.
	Subjects map[string]Subject
	// AdminNameClaim is the claim whose value names an admin (default
	// sub); the name recorded is "<Name>:<value>".
	AdminNameClaim string
}

// Subject is a fixed identity for one subject or client id.
type Subject struct {
	Namespace, AgentID string
}

// Options configures a Verifier.
type Options struct {
	Issuers []Issuer
	// ClockSkew is allowed on exp, nbf and iat.
	ClockSkew time.Duration
	// AgentScope and AdminScope are the scopes that grant agent tools
	// and the admin API (Kubernetes tokens grant agent rights without
	// one).
	AgentScope, AdminScope string
	// MinRefresh is the least time between two fetches of one issuer's
	// keys (default DefaultMinRefresh); MaxAge is how long fetched keys are
	// used before they are fetched again (default DefaultMaxAge).
	MinRefresh, MaxAge time.Duration
	// Client fetches keys; nil: a client with a 10 s timeout and the
	// issuer's CAFile.
	Client *http.Client
	// Now is the clock; nil: time.Now.
	Now func() time.Time
	// Logger gets every decision (issuer, subject, kid, reason; never the
	// token): refusals at Warn, acceptances at Debug.
	Logger *slog.Logger
	// Count, when set, is called once per decision with the issuer's name
	// ("unknown" when none matched) and the result: "accepted" or a
	// refusal's Reason.
	Count func(issuer, result string)
}

// Defaults of Options.
const (
	DefaultMinRefresh = time.Minute
	DefaultMaxAge     = time.Hour
	DefaultClockSkew  = time.Minute
)

// Principal is who a verified token names.
type Principal struct {
	// IssuerName and Issuer are the issuer's config name and iss.
	IssuerName, Issuer string
	Subject            string
	KeyID              string
	// Admin is set for a token with the admin scope; Name is then the
	// admin's recorded name ("<issuer name>:<claim>").
	Admin bool
	Name  string
	// Namespace and AgentID are an agent's identity.
	Namespace, AgentID string
}

// Error is a refused token. Status is 401 (the token is not good) or 403
// (good, but without the right asked for); Code is the RFC 6750 error
// (invalid_token, insufficient_scope); Reason is a stable word for logs
// and metrics; Message says what to fix.
type Error struct {
	Status  int
	Code    string
	Reason  string
	Message string
	// Scope is the scope that would grant the right (insufficient_scope).
	Scope string
}

func (e *Error) Error() string { return e.Message }

// Verifier verifies tokens. It is safe for concurrent use.
type Verifier struct {
	opts    Options
	issuers []*issuerKeys
	log     *slog.Logger
}

type issuerKeys struct {
	cfg    Issuer
	algs   []jose.SignatureAlgorithm
	client *http.Client

	mu        sync.Mutex
	keys      *jose.JSONWebKeySet
	loaded    time.Time // when keys were loaded
	tried     time.Time // of the last load, successful or not
	refreshed time.Time // of the last load for an unknown kid
	lastError error

	reviewed map[[32]byte]review // TokenReview answers, by the token's SHA-256
	// reviewWindow is the start of the second in which reviewsInWindow
	// new reviews were asked (at most MaxReviewsPerSecond).
	reviewWindow    time.Time
	reviewsInWindow int
}

// New returns a Verifier. It reads CA files now (an error names the file)
// but fetches no keys until a token needs them, so that serve starts while
// an issuer is down.
func New(opts Options) (*Verifier, error) {
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = DefaultMinRefresh
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	v := &Verifier{opts: opts, log: opts.Logger}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	for _, is := range opts.Issuers {
		k := &issuerKeys{cfg: is, client: opts.Client}
		for _, a := range is.Algorithms {
			k.algs = append(k.algs, jose.SignatureAlgorithm(a))
		}
		if k.client == nil {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			if is.CAFile != "" {
				pem, err := os.ReadFile(is.CAFile)
				if err != nil {
					return nil, fmt.Errorf("issuer %s: reading ca_file: %w", is.Name, err)
				}
				pool := x509.NewCertPool()
				if !pool.AppendCertsFromPEM(pem) {
					return nil, fmt.Errorf("issuer %s: ca_file %s holds no PEM certificate", is.Name, is.CAFile)
				}
				tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
			}
			// Redirects are not followed: a fetch goes to the URL
			// configured, nowhere else.
			k.client = &http.Client{Transport: tr, Timeout: 10 * time.Second,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		}
		v.issuers = append(v.issuers, k)
	}
	return v, nil
}

// LooksLikeJWT reports whether a bearer token has a JWT's shape (three
// base64url parts), so that a static token is not sent to the issuers.
func LooksLikeJWT(token string) bool {
	return strings.Count(token, ".") == 2 && !strings.ContainsAny(token, " \t")
}

// Scopes are the scopes the config names, for the protected resource
// metadata.
func (v *Verifier) Scopes() []string {
	var out []string
	for _, s := range []string{v.opts.AgentScope, v.opts.AdminScope} {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// IssuerURLs are the configured issuers' iss values that are not
// Kubernetes clusters (the authorization servers of the metadata).
func (v *Verifier) IssuerURLs() []string {
	var out []string
	for _, k := range v.issuers {
		if !k.cfg.Kubernetes {
			out = append(out, k.cfg.Issuer)
		}
	}
	return out
}

// ScopeFor is the scope that grants r.
func (v *Verifier) ScopeFor(r Right) string {
	if r == RightAdmin {
		return v.opts.AdminScope
	}
	return v.opts.AgentScope
}

// Verify checks token and that it grants want. The decision is logged and
// counted.
func (v *Verifier) Verify(ctx context.Context, token string, want Right) (*Principal, error) {
	p, issuer, err := v.verify(ctx, token, want)
	var e *Error
	if err != nil && !errors.As(err, &e) {
		e = &Error{Status: 401, Code: "invalid_token", Reason: "invalid", Message: err.Error()}
		err = e
	}
	name := "unknown"
	if issuer != nil {
		name = issuer.cfg.Name
	}
	attrs := []any{"issuer", name, "right", rightName(want)}
	if p != nil {
		// The kid is the sender's text before any signature held, and a
		// subject is an issuer's: the log gets bounded prefixes.
		attrs = append(attrs, "subject", truncate(p.Subject, 200), "kid", truncate(p.KeyID, 100))
	}
	if e != nil {
		v.log.Warn("token refused", append(attrs, "reason", e.Reason)...)
		if v.opts.Count != nil {
			v.opts.Count(name, e.Reason)
		}
		return nil, e
	}
	v.log.Debug("token accepted", attrs...)
	if v.opts.Count != nil {
		v.opts.Count(name, "accepted")
	}
	return p, nil
}

func rightName(r Right) string {
	if r == RightAdmin {
		return "admin"
	}
	return "agent"
}

func refuse(reason, format string, args ...any) *Error {
	return &Error{Status: 401, Code: "invalid_token", Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// verify returns, with a refusal, what was learnt of the token (its
// issuer and, once the signature held, its subject) for the log.
func (v *Verifier) verify(ctx context.Context, token string, want Right) (*Principal, *issuerKeys, error) {
	var allAlgs []jose.SignatureAlgorithm
	for _, k := range v.issuers {
		allAlgs = append(allAlgs, k.algs...)
	}
	tok, err := jwt.ParseSigned(token, allAlgs)
	if err != nil {
		if alg := headerAlg(token); alg != "" && !slices.Contains(allAlgs, jose.SignatureAlgorithm(alg)) {
			return nil, nil, refuse("algorithm", "the token is signed with %q, which no trusted issuer is configured for (accepted: %s)", alg, algList(allAlgs))
		}
		return nil, nil, refuse("malformed", "the bearer token is not a signed JWT (%v): send an access token from a trusted issuer", err)
	}
	// The issuer is read from the unverified claims only to pick its
	// keys; the verified claims are checked below.
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, nil, refuse("malformed", "the token's claims are not JSON: %v", err)
	}
	var k *issuerKeys
	for _, c := range v.issuers {
		if c.cfg.Issuer == unverified.Issuer {
			k = c
			break
		}
	}
	if k == nil {
		return nil, nil, refuse("issuer", "the token's issuer %q is not one Ratchet trusts (auth.oauth.issuers): get a token from %s",
			truncate(unverified.Issuer, 200), strings.Join(v.issuerList(), ", "))
	}
	hdr := tok.Headers[0]
	kid := truncate(hdr.KeyID, 100) // for the log and the Principal; the lookup uses the whole kid
	if !slices.Contains(k.algs, jose.SignatureAlgorithm(hdr.Algorithm)) {
		return nil, k, refuse("algorithm", "the token is signed with %q; issuer %s is configured for %s", hdr.Algorithm, k.cfg.Name, algList(k.algs))
	}
	if k.cfg.TokenReviewURL != "" {
		return v.review(ctx, token, k, kid, unverified, want) // review.go
	}
	key, err := k.key(ctx, hdr.KeyID, v.opts)
	if err != nil {
		return &Principal{KeyID: kid}, k, err
	}
	if key.Algorithm != "" && key.Algorithm != hdr.Algorithm {
		// A key is used with the one algorithm its JWK names (RFC 7517
		// section 4.4, RFC 8725 section 3.1): an RS256 key verifies no
		// PS256 token, though the issuer is trusted for both and RSA
		// verifies either.
		return &Principal{KeyID: hdr.KeyID}, k, refuse("algorithm", "the token is signed with %q, but issuer %s's key %q is for %s only",
			hdr.Algorithm, k.cfg.Name, truncate(hdr.KeyID, 100), truncate(key.Algorithm, 20))
	}
	var claims jwt.Claims
	var extra map[string]any
	if err := tok.Claims(key, &claims, &extra); err != nil {
		return &Principal{KeyID: kid}, k, refuse("signature", "the token's signature does not verify with issuer %s's key %q", k.cfg.Name, kid)
	}
	p := &Principal{IssuerName: k.cfg.Name, Issuer: claims.Issuer, Subject: truncate(claims.Subject, 256), KeyID: kid}
	now := v.opts.Now()
	skew := v.opts.ClockSkew
	switch {
	case claims.Expiry == nil:
		return p, k, refuse("no_expiry", "the token has no exp claim: Ratchet accepts only tokens that expire")
	case now.After(claims.Expiry.Time().Add(skew)):
		return p, k, refuse("expired", "the token expired at %s: get a new one from %s", claims.Expiry.Time().UTC().Format(time.RFC3339), k.cfg.Issuer)
	case claims.NotBefore != nil && now.Add(skew).Before(claims.NotBefore.Time()):
		return p, k, refuse("not_yet_valid", "the token is not valid before %s (nbf): check the clocks of the issuer and of this host", claims.NotBefore.Time().UTC().Format(time.RFC3339))
	case claims.IssuedAt != nil && now.Add(skew).Before(claims.IssuedAt.Time()):
		return p, k, refuse("issued_in_future", "the token was issued at %s, in the future (iat): check the clocks of the issuer and of this host", claims.IssuedAt.Time().UTC().Format(time.RFC3339))
	case claims.Subject == "":
		return p, k, refuse("no_subject", "the token has no sub claim")
	}
	if !slices.ContainsFunc(k.cfg.Audiences, func(a string) bool { return oauthex.MatchesResource(claims.Audience, a) }) {
		return p, k, refuse("audience", "the token's audience %q is not Ratchet's (%s): ask the authorization server for a token for resource %s (RFC 8707)",
			truncate(strings.Join(claims.Audience, " "), 200), strings.Join(k.cfg.Audiences, ", "), k.cfg.Audiences[0])
	}
	return v.grant(p, k, extra, want)
}

// grant maps a verified token's claims to a right.
func (v *Verifier) grant(p *Principal, k *issuerKeys, extra map[string]any, want Right) (*Principal, *issuerKeys, error) {
	scopes := scopesOf(extra)
	agent := k.cfg.Kubernetes || (v.opts.AgentScope != "" && slices.Contains(scopes, v.opts.AgentScope))
	admin := !k.cfg.Kubernetes && v.opts.AdminScope != "" && slices.Contains(scopes, v.opts.AdminScope)
	if agent && admin {
		return p, k, refuse("both_scopes", "the token carries both %s and %s: admin and agent rights never come from one token; ask for one scope",
			v.opts.AgentScope, v.opts.AdminScope)
	}
	switch {
	case want == RightAdmin && !admin:
		msg := fmt.Sprintf("the token lacks the scope %s that the admin API requires", v.opts.AdminScope)
		if agent {
			msg = "an agent's token cannot use the admin API: an admin needs a token of their own with the scope " + v.opts.AdminScope
		}
		return p, k, &Error{Status: 403, Code: "insufficient_scope", Reason: "scope", Message: msg, Scope: v.opts.AdminScope}
	case want == RightAgent && !agent:
		msg := fmt.Sprintf("the token lacks the scope %s that the MCP tools require", v.opts.AgentScope)
		if admin {
			msg = "an admin's token cannot call the agent tools: an agent needs a token of its own with the scope " + v.opts.AgentScope
		}
		return p, k, &Error{Status: 403, Code: "insufficient_scope", Reason: "scope", Message: msg, Scope: v.opts.AgentScope}
	}
	if admin {
		claim := k.cfg.AdminNameClaim
		if claim == "" {
			claim = "sub"
		}
		name, _ := extra[claim].(string)
		if name == "" {
			return p, k, refuse("no_name", "the admin token has no %s claim to name the admin by", claim)
		}
		if msg := ledger.CheckID(name); msg != "" {
			return p, k, refuse("bad_identity", "the admin token's %s claim cannot name an admin: it %s", claim, msg)
		}
		p.Admin = true
		p.Name = k.cfg.Name + ":" + name
		return p, k, nil
	}
	p, k, err := v.agent(p, k, extra)
	if err != nil {
		return p, k, err
	}
	// A namespace or agent_id read from claims is held to the rules the
	// config holds a static token's to: refused here with what is wrong,
	// not let in to fail on every call, nor to show in a listing as
	// another agent (an invisible or decomposed character).
	if err := ledger.CheckNamespace(p.Namespace); err != nil {
		return p, k, refuse("bad_identity", "the token's namespace %q is not one Ratchet accepts: 1-63 lowercase letters, digits, '.', '_' or '-'", truncate(p.Namespace, 70))
	}
	if msg := ledger.CheckID(p.AgentID); msg != "" {
		return p, k, refuse("bad_identity", "the token's agent_id cannot name an agent: it %s", msg)
	}
	return p, k, nil
}

// agent fixes an agent token's namespace and agent_id.
func (v *Verifier) agent(p *Principal, k *issuerKeys, extra map[string]any) (*Principal, *issuerKeys, error) {
	cfg := k.cfg
	var ids []string // what a Subjects entry may be keyed by
	ids = append(ids, p.Subject)
	for _, c := range []string{"client_id", "azp"} {
		if s, _ := extra[c].(string); s != "" {
			ids = append(ids, s)
		}
	}
	for _, id := range ids {
		if s, ok := cfg.Subjects[id]; ok {
			p.Namespace, p.AgentID = s.Namespace, s.AgentID
			return p, k, nil
		}
	}
	if cfg.Kubernetes {
		ns, sa := kubernetesAccount(extra)
		if ns == "" || sa == "" {
			return p, k, refuse("no_service_account", "the token has no kubernetes.io namespace and serviceaccount claims: mount a projected service account token with audience %s", cfg.Audiences[0])
		}
		p.Namespace, p.AgentID = ns, sa
		if cfg.Namespace != "" {
			p.Namespace = cfg.Namespace
		}
		return p, k, nil
	}
	if cfg.Namespace == "" && cfg.NamespaceClaim == "" {
		// An issuer of subjects alone names its agents one by one (the
		// config asks for namespace, namespace_claim or subjects): any
		// other of its subjects is no agent, not one of the default
		// namespace.
		return p, k, refuse("unknown_subject", "the token's subject %q (and client_id, azp) is not one of issuer %s's subjects: only those act as agents", truncate(p.Subject, 100), cfg.Name)
	}
	p.Namespace = cfg.Namespace
	if cfg.NamespaceClaim != "" {
		p.Namespace, _ = extra[cfg.NamespaceClaim].(string)
		if p.Namespace == "" {
			return p, k, refuse("no_namespace", "the token has no %s claim, which names the agent's namespace", cfg.NamespaceClaim)
		}
	}
	claim := cfg.AgentIDClaim
	if claim == "" {
		claim = "sub"
	}
	p.AgentID, _ = extra[claim].(string)
	if p.AgentID == "" {
		return p, k, refuse("no_agent_id", "the token has no %s claim, which names the agent", claim)
	}
	return p, k, nil
}

// kubernetesAccount reads the service account's namespace and name from a
// projected token's claims, as the Kubernetes docs show them:
// {"kubernetes.io": {"namespace": "...", "serviceaccount": {"name": "...",
// "uid": "..."}, "pod": {...}}}.
func kubernetesAccount(extra map[string]any) (ns, name string) {
	k8s, _ := extra["kubernetes.io"].(map[string]any)
	ns, _ = k8s["namespace"].(string)
	sa, _ := k8s["serviceaccount"].(map[string]any)
	name, _ = sa["name"].(string)
	return ns, name
}

// scopesOf reads scope (a space-separated string, RFC 9068 and RFC 8693)
// or scp (a list, as some issuers send it).
func scopesOf(extra map[string]any) []string {
	if s, ok := extra["scope"].(string); ok {
		return strings.Fields(s)
	}
	var out []string
	if l, ok := extra["scp"].([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func (v *Verifier) issuerList() []string {
	var out []string
	for _, k := range v.issuers {
		out = append(out, k.cfg.Issuer)
	}
	return out
}

func algList(algs []jose.SignatureAlgorithm) string {
	var s []string
	for _, a := range algs {
		if !slices.Contains(s, string(a)) {
			s = append(s, string(a))
		}
	}
	return strings.Join(s, ", ")
}

// headerAlg is the alg of a token's header, read without trusting it, for
// the message of a refused algorithm.
func headerAlg(token string) string {
	h, _, _ := strings.Cut(token, ".")
	raw, err := base64URLDecode(h)
	if err != nil {
		return ""
	}
	var hdr struct {
		Alg string `json:"alg"`
	}
	if json.Unmarshal(raw, &hdr) != nil {
		return ""
	}
	return truncate(hdr.Alg, 20)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// key returns the issuer's key kid. The key set is loaded when there is
// none or it is older than MaxAge, and loaded again for a kid it lacks (a
// rotated key); each of the two at most once per MinRefresh, so that a
// failing issuer or a stream of made-up kids costs one fetch a minute.
func (k *issuerKeys) key(ctx context.Context, kid string, opts Options) (*jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := opts.Now()
	stale := k.keys == nil || now.Sub(k.loaded) >= opts.MaxAge
	load := func() {
		k.tried = now
		// Not the caller's context: one who hangs up at once would leave
		// the keys unread, and every good token refused, until the next
		// load a minute later (get bounds the fetch to 10 s).
		keys, err := k.load(context.WithoutCancel(ctx))
		k.lastError = err
		if err == nil {
			k.keys, k.loaded = keys, now
		} else if opts.Logger != nil {
			opts.Logger.Warn("token issuer's keys not read", "issuer", k.cfg.Name, "err", err)
		}
	}
	if stale && (k.tried.IsZero() || now.Sub(k.tried) >= opts.MinRefresh) {
		load()
	}
	if k.keys != nil {
		if key := findKey(k.keys, kid); key != nil {
			return key, nil
		}
		if k.refreshed.IsZero() || now.Sub(k.refreshed) >= opts.MinRefresh {
			k.refreshed = now
			load()
			if key := findKey(k.keys, kid); key != nil {
				return key, nil
			}
		}
	}
	if k.keys == nil && k.lastError != nil {
		return nil, &Error{Status: 401, Code: "invalid_token", Reason: "keys_unavailable",
			// What failed (a URL inside the cluster, a file) is in the
			// log, not told to whoever sent a token.
			Message: fmt.Sprintf("issuer %s's keys could not be read, so the token cannot be verified: try again later", k.cfg.Name)}
	}
	return nil, refuse("unknown_kid", "issuer %s has no key %q (its key set was read again): the token was not signed by that issuer's current keys", k.cfg.Name, truncate(kid, 100))
}

// findKey is the public signing key kid of set; with no kid, the set's only
// key.
func findKey(set *jose.JSONWebKeySet, kid string) *jose.JSONWebKey {
	var found []jose.JSONWebKey
	if kid == "" {
		found = set.Keys
	} else {
		found = set.Key(kid)
	}
	var usable []jose.JSONWebKey
	for _, key := range found {
		if key.IsPublic() && (key.Use == "" || key.Use == "sig") {
			usable = append(usable, key)
		}
	}
	if len(usable) != 1 {
		return nil
	}
	return &usable[0]
}

// maxKeySetBytes bounds a key set or discovery document.
const maxKeySetBytes = 1 << 20

func (k *issuerKeys) load(ctx context.Context) (*jose.JSONWebKeySet, error) {
	var data []byte
	var err error
	switch {
	case k.cfg.JWKSFile != "":
		data, err = os.ReadFile(k.cfg.JWKSFile)
	case k.cfg.JWKSURL != "":
		data, err = k.get(ctx, k.cfg.JWKSURL)
	default:
		data, err = k.discover(ctx)
	}
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(data, &set); err != nil {
		return nil, fmt.Errorf("the key set is not a JWKS: %w", err)
	}
	for _, key := range set.Keys {
		if !key.IsPublic() {
			// A symmetric or private key in a published set is a
			// misconfiguration; none of it is used.
			return nil, errors.New("the key set holds a key that is not a public key")
		}
	}
	return &set, nil
}

// discover reads the OIDC discovery document and then its jwks_uri, which
// must be on the discovery URL's origin.
func (k *issuerKeys) discover(ctx context.Context) ([]byte, error) {
	data, err := k.get(ctx, k.cfg.DiscoveryURL)
	if err != nil {
		return nil, err
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("the discovery document is not JSON: %w", err)
	}
	if doc.Issuer != k.cfg.Issuer {
		return nil, fmt.Errorf("the discovery document's issuer is %q, not %q", truncate(doc.Issuer, 200), k.cfg.Issuer)
	}
	d, _ := url.Parse(k.cfg.DiscoveryURL)
	j, err := url.Parse(doc.JWKSURI)
	if err != nil || j.Scheme != d.Scheme || j.Host != d.Host {
		return nil, fmt.Errorf("the discovery document's jwks_uri %q is not on %s://%s: Ratchet fetches only what the config names, so set jwks_url", truncate(doc.JWKSURI, 200), d.Scheme, d.Host)
	}
	return k.get(ctx, doc.JWKSURI)
}

func (k *issuerKeys) get(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if f := k.cfg.BearerTokenFile; f != "" {
		tok, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading bearer_token_file: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxKeySetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxKeySetBytes {
		return nil, fmt.Errorf("GET %s: more than 1 MiB", u)
	}
	return data, nil
}

func base64URLDecode(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}
