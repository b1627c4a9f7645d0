package config

import (
	"cmp"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// OAuth is auth.oauth: Ratchet as an OAuth 2.1 resource server. Access
// tokens (JWTs) of the trusted issuers are accepted beside the static
// tokens of auth.agents and auth.admins, on the MCP endpoint and the admin
// API (see internal/jwtauth and docs/identity.md).
type OAuth struct {
	// Resource is Ratchet's MCP URL as clients reach it
	// (https://ratchet.example.com/mcp): the audience its tokens must carry
	// (RFC 8707) and the resource of its protected resource metadata.
	Resource string `yaml:"resource"`
	// AgentScope grants the MCP tools (default ratchet:agent); AdminScope
	// grants the admin API (default ratchet:admin). A token carrying both
	// is refused.
	AgentScope string `yaml:"agent_scope"`
	AdminScope string `yaml:"admin_scope"`
	// ClockSkew is allowed on exp, nbf and iat (default 60s, at most 5m).
	ClockSkew Duration      `yaml:"clock_skew"`
	Issuers   []OAuthIssuer `yaml:"issuers"`
}

// OAuthIssuer is one trusted issuer.
type OAuthIssuer struct {
	// Name is short ([a-z0-9-]) and recorded with the subject as the
	// identity of whoever acted ("corp:alice").
	Name string `yaml:"name"`
	// Issuer is the iss its tokens carry.
	Issuer string `yaml:"issuer"`
	// Exactly one of these gives its keys.
	DiscoveryURL string `yaml:"discovery_url"`
	JWKSURL      string `yaml:"jwks_url"`
	JWKSFile     string `yaml:"jwks_file"`
	CAFile       string `yaml:"ca_file"`
	// BearerTokenFile is sent with each fetch of the keys (a Kubernetes
	// API server's: Ratchet's own service account token) and each
	// TokenReview.
	BearerTokenFile string `yaml:"bearer_token_file"`
	// TokenReviewURL, for a Kubernetes issuer only and instead of the
	// keys, has the API server decide each token (TokenReview).
	TokenReviewURL string `yaml:"token_review_url"`
	// Audiences a token may carry (default: oauth.resource; for a
	// Kubernetes issuer, ratchet).
	Audiences []string `yaml:"audiences"`
	// Algorithms accepted (default RS256 and ES256; never none or HMAC).
	Algorithms []string `yaml:"algorithms"`
	// Kubernetes marks a cluster's service account issuer.
	Kubernetes bool `yaml:"kubernetes"`
	// Namespace fixes the agents' namespace; NamespaceClaim reads it from a
	// claim instead. AgentIDClaim names the agent (default sub).
	Namespace      string `yaml:"namespace"`
	NamespaceClaim string `yaml:"namespace_claim"`
	AgentIDClaim   string `yaml:"agent_id_claim"`
	// AdminNameClaim names an admin (default sub).
	AdminNameClaim string `yaml:"admin_name_claim"`
	// Subjects fix the identity of a subject or client id.
	Subjects []OAuthSubject `yaml:"subjects"`
}

// OAuthSubject fixes the identity of one subject or client id.
type OAuthSubject struct {
	Subject   string `yaml:"subject"`
	Namespace string `yaml:"namespace"`
	AgentID   string `yaml:"agent_id"`
}

// On reports whether OAuth tokens are accepted.
func (o *OAuth) On() bool { return o != nil && len(o.Issuers) > 0 }

// AdminsOn reports whether an OAuth token may open the admin API: an
// issuer that is not a Kubernetes cluster (whose tokens are agents' only).
func (o *OAuth) AdminsOn() bool {
	return o.On() && slices.ContainsFunc(o.Issuers, func(i OAuthIssuer) bool { return !i.Kubernetes })
}

func (o *OAuth) fill() {
	if o == nil {
		return
	}
	if o.AgentScope == "" {
		o.AgentScope = "ratchet:agent"
	}
	if o.AdminScope == "" {
		o.AdminScope = "ratchet:admin"
	}
	o.ClockSkew.orDefault(jwtauth.DefaultClockSkew)
	for i := range o.Issuers {
		is := &o.Issuers[i]
		if len(is.Algorithms) == 0 {
			is.Algorithms = []string{"RS256", "ES256"}
		}
		for k := range is.Subjects {
			if is.Subjects[k].Namespace == "" {
				is.Subjects[k].Namespace = cmp.Or(is.Namespace, ledger.DefaultNamespace)
			}
		}
		if len(is.Audiences) == 0 {
			if is.Kubernetes {
				is.Audiences = []string{"ratchet"}
			} else if o.Resource != "" {
				is.Audiences = []string{o.Resource}
			}
		}
	}
}

// VerifierOptions converts the block for jwtauth.New. Call after a
// successful Validate.
func (o *OAuth) VerifierOptions() jwtauth.Options {
	opts := jwtauth.Options{ClockSkew: o.ClockSkew.Value(), AgentScope: o.AgentScope, AdminScope: o.AdminScope}
	for _, is := range o.Issuers {
		j := jwtauth.Issuer{Name: is.Name, Issuer: is.Issuer, DiscoveryURL: is.DiscoveryURL, JWKSURL: is.JWKSURL, JWKSFile: is.JWKSFile,
			CAFile: is.CAFile, BearerTokenFile: is.BearerTokenFile, TokenReviewURL: is.TokenReviewURL, Audiences: is.Audiences, Algorithms: is.Algorithms, Kubernetes: is.Kubernetes,
			Namespace: is.Namespace, NamespaceClaim: is.NamespaceClaim, AgentIDClaim: is.AgentIDClaim, AdminNameClaim: is.AdminNameClaim}
		if len(is.Subjects) > 0 {
			j.Subjects = map[string]jwtauth.Subject{}
			for _, s := range is.Subjects {
				j.Subjects[s.Subject] = jwtauth.Subject{Namespace: s.Namespace, AgentID: s.AgentID}
			}
		}
		opts.Issuers = append(opts.Issuers, j)
	}
	return opts
}

// asymmetricAlgs are the JWS algorithms an issuer may be trusted for: a
// public key verifies them. HMAC needs a shared secret (and keyed with a
// public key it is the classic forgery), and none is no signature.
var asymmetricAlgs = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

var issuerNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// maxClockSkew bounds oauth.clock_skew: more would keep an expired token
// good for long.
const maxClockSkew = 5 * time.Minute

func (o *OAuth) problems() []Problem {
	if o == nil {
		return nil
	}
	var probs []Problem
	add := func(path, format string, args ...any) {
		probs = append(probs, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	const p = "auth.oauth"
	if len(o.Issuers) == 0 {
		add(p+".issuers", "lists no issuer: name at least one whose tokens Ratchet accepts, or remove auth.oauth")
	}
	if o.Resource == "" {
		add(p+".resource", "is required: Ratchet's MCP URL as clients reach it (e.g. https://ratchet.example.com/mcp), the audience of its tokens")
	} else if msg := urlProblem(o.Resource); msg != "" {
		add(p+".resource", "%q %s", o.Resource, msg)
	}
	switch {
	case strings.ContainsAny(o.AgentScope, " \t\""):
		add(p+".agent_scope", "%q is not one scope (no spaces or quotes)", o.AgentScope)
	case strings.ContainsAny(o.AdminScope, " \t\""):
		add(p+".admin_scope", "%q is not one scope (no spaces or quotes)", o.AdminScope)
	case o.AgentScope == o.AdminScope:
		add(p+".admin_scope", "is the same as agent_scope (%q): admin and agent rights must never come from one token", o.AdminScope)
	}
	if d := o.ClockSkew.Value(); d <= 0 || d > maxClockSkew {
		add(p+".clock_skew", "%q must be a positive duration of at most 5m", o.ClockSkew.String())
	}
	names := map[string]int{}
	issuers := map[string]int{}
	for i, is := range o.Issuers {
		ip := fmt.Sprintf("%s.issuers[%d]", p, i)
		switch j, dup := names[is.Name]; {
		case !issuerNameRe.MatchString(is.Name):
			add(ip+".name", "%q must be 1-32 of a-z, 0-9 and -, starting with a letter or digit (it is recorded with each subject)", is.Name)
		case dup:
			add(ip+".name", "%q is also issuers[%d]'s name", is.Name, j)
		default:
			names[is.Name] = i
		}
		switch j, dup := issuers[is.Issuer]; {
		case is.Issuer == "":
			add(ip+".issuer", "is required: the iss its tokens carry")
		case dup:
			add(ip+".issuer", "%q is also issuers[%d]'s issuer", is.Issuer, j)
		default:
			issuers[is.Issuer] = i
		}
		n := 0
		for _, s := range []string{is.DiscoveryURL, is.JWKSURL, is.JWKSFile, is.TokenReviewURL} {
			if s != "" {
				n++
			}
		}
		switch {
		case is.TokenReviewURL != "" && !is.Kubernetes:
			add(ip+".token_review_url", "applies to a kubernetes issuer only (the API server's TokenReview)")
		case n != 1 && is.Kubernetes:
			add(ip, "needs exactly one of discovery_url, jwks_url, jwks_file and token_review_url (where its signing keys are, or who decides its tokens)")
		case n != 1:
			add(ip, "needs exactly one of discovery_url, jwks_url and jwks_file (where its signing keys are)")
		}
		for field, u := range map[string]string{"discovery_url": is.DiscoveryURL, "jwks_url": is.JWKSURL, "token_review_url": is.TokenReviewURL} {
			if u == "" {
				continue
			}
			if msg := urlProblem(u); msg != "" {
				add(ip+"."+field, "%q %s", u, msg)
			}
		}
		for k, a := range is.Algorithms {
			if !slices.Contains(asymmetricAlgs, a) {
				add(fmt.Sprintf("%s.algorithms[%d]", ip, k), "%q is not accepted: only asymmetric algorithms (%s); never none, never HMAC (HS256 keyed with a public key is the classic forgery)",
					a, strings.Join(asymmetricAlgs, ", "))
			}
		}
		if len(is.Audiences) == 0 {
			add(ip+".audiences", "is empty and auth.oauth.resource is not set: name the audience its tokens carry")
		}
		for k, a := range is.Audiences {
			if a == "" {
				add(fmt.Sprintf("%s.audiences[%d]", ip, k), "is empty")
			}
		}
		if is.Namespace != "" && is.NamespaceClaim != "" {
			add(ip+".namespace", "and namespace_claim are both set: the namespace is fixed or read from a claim, not both")
		}
		if !is.Kubernetes && is.Namespace == "" && is.NamespaceClaim == "" && len(is.Subjects) == 0 {
			add(ip+".namespace", "is required (or namespace_claim, or subjects): which namespace its agents act in")
		}
		if is.Kubernetes && (is.NamespaceClaim != "" || is.AgentIDClaim != "" || is.AdminNameClaim != "") {
			add(ip+".kubernetes", "issuer's agents are named by their service account (namespace and name); namespace_claim, agent_id_claim and admin_name_claim do not apply (use subjects to rename one)")
		}
		if is.Namespace != "" {
			if msg := namespaceProblem(is.Namespace); msg != "" {
				add(ip+".namespace", "%s", msg)
			}
		}
		seen := map[string]bool{}
		for k, s := range is.Subjects {
			sp := fmt.Sprintf("%s.subjects[%d]", ip, k)
			switch {
			case s.Subject == "":
				add(sp+".subject", "is required: the sub, client_id or azp it fixes (system:serviceaccount:<ns>:<name> for Kubernetes)")
			case seen[s.Subject]:
				add(sp+".subject", "%q is listed twice", s.Subject)
			}
			seen[s.Subject] = true
			if msg := namespaceProblem(s.Namespace); msg != "" {
				add(sp+".namespace", "%s", msg)
			}
			if s.AgentID == "" {
				add(sp+".agent_id", "is required: an OAuth token always names its agent")
			}
		}
	}
	return probs
}

// urlProblem says what is wrong with an issuer's or the resource's URL:
// https, or http to a loopback host only (a token's keys are not fetched
// in the clear over a network).
func urlProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "is not a URL"
	}
	switch u.Scheme {
	case "https":
		return ""
	case "http":
		if loopback.Is(u.Host) {
			return ""
		}
		return "must be https (http only to a loopback host): keys and resources are not trusted over the network in the clear"
	}
	return "is not an https URL"
}
