package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
)

// Refusals of a request's credentials. A client shows the message of the
// JSON-RPC error in the body (Python's MCP SDK and fastmcp showed nothing of
// a text/plain 401), so each says what to fix.
const (
	msgNoToken = "no bearer token: send the agent's token as the header \"Authorization: Bearer <token>\" " +
		"(its SHA-256 is an entry of auth.agents in Ratchet's config; for the stdio bridge set RATCHET_TOKEN)"
	msgWrongToken = "the bearer token is not one of Ratchet's agent tokens: check the token sent " +
		"(auth.agents in the config lists the SHA-256 of each accepted token; `ratchet token hash` prints a token's)"
)

// The same with auth.oauth: an access token is the usual credential then.
const (
	msgNoTokenOAuth = "no bearer token: send an access token for this resource from a trusted issuer as \"Authorization: Bearer <token>\" " +
		"(the resource metadata named in WWW-Authenticate says which issuer and scope), or a token of auth.agents"
	msgWrongTokenOAuth = "the bearer token is neither an access token (JWT) nor one of Ratchet's agent tokens: get an access token for this resource " +
		"from a trusted issuer (see the resource metadata named in WWW-Authenticate)"
)

// codeUnauthorized is the JSON-RPC error code of a refused credential, in
// the range JSON-RPC leaves to servers.
const codeUnauthorized = -32001

// codeForbidden is the JSON-RPC error code of a good credential without
// the right asked for (403, insufficient_scope).
const codeForbidden = -32003

// requireToken admits a request whose bearer token is one of agents, or
// (with a verifier) an access token of a trusted issuer granting the agent
// tools, and answers any other as RFC 6750 and the MCP authorization spec
// ask: 401 for a missing or bad token (WWW-Authenticate: Bearer, with
// error="invalid_token" for a token that is wrong rather than missing), 403
// with error="insufficient_scope" and the scope to ask for (step-up) for a
// good token without the agent scope, each naming the protected resource
// metadata (RFC 9728) when OAuth is on, and a JSON-RPC error whose id is
// the request's, so the client can match it to its call. The SDK's own
// middleware then puts the identity into the request for the tools, as
// auth.TokenInfo (its context key is its own).
func requireToken(agents Agents, oauth *jwtauth.Verifier, metadataURL string, maxBody int64, next http.Handler) http.Handler {
	verify := func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		id, ok := ctx.Value(identityKey{}).(Identity)
		if !ok {
			return nil, fmt.Errorf("no identity checked: %w", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: id.Namespace + "/" + id.AgentID,
			Extra: map[string]any{"namespace": id.Namespace, "agent_id": id.AgentID, "principal": id.Principal}}, nil
	}
	inner := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	meta := ""
	if oauth != nil && metadataURL != "" {
		meta = `, resource_metadata="` + metadataURL + `"`
	}
	noToken, wrongToken := msgNoToken, msgWrongToken
	if oauth != nil {
		noToken, wrongToken = msgNoTokenOAuth, msgWrongTokenOAuth
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			challenge := `Bearer realm="ratchet"` + meta
			if oauth != nil {
				challenge += `, scope="` + oauth.ScopeFor(jwtauth.RightAgent) + `"`
			}
			refuseToken(w, r, maxBody, http.StatusUnauthorized, challenge, noToken)
			return
		}
		sum := sha256.Sum256([]byte(token))
		id, ok := agents[hex.EncodeToString(sum[:])]
		if !ok && oauth != nil && jwtauth.LooksLikeJWT(token) {
			p, err := oauth.Verify(r.Context(), token, jwtauth.RightAgent)
			if err != nil {
				var e *jwtauth.Error
				errors.As(err, &e)
				challenge := `Bearer realm="ratchet", error="` + e.Code + `", error_description="` + challengeText(e.Message) + `"` + meta
				if e.Scope != "" {
					challenge += `, scope="` + e.Scope + `"`
				}
				refuseToken(w, r, maxBody, e.Status, challenge, e.Message)
				return
			}
			id, ok = Identity{Namespace: p.Namespace, AgentID: p.AgentID, Principal: p.IssuerName + ":" + p.Subject}, true
		}
		if !ok {
			refuseToken(w, r, maxBody, http.StatusUnauthorized, `Bearer realm="ratchet", error="invalid_token", error_description="unknown token"`+meta, wrongToken)
			return
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
}

// challengeText makes a message fit a WWW-Authenticate quoted string
// (RFC 6750: printable ASCII without " and \).
func challengeText(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '"' || r == '\\':
			return '\''
		case r < 0x20 || r > 0x7e:
			return '?'
		}
		return r
	}, truncateText(s, 300))
}

func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

type identityKey struct{}

// bearerToken is the token of an Authorization header of the Bearer scheme
// (the scheme's name is case-insensitive, RFC 7235).
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", false
	}
	return token, true
}

// refuseToken writes the 401. The id of the request is read from its body
// (at most maxBody bytes; a batch, a notification or a body that is not
// JSON get a null id, as JSON-RPC says for a request whose id cannot be
// known).
func refuseToken(w http.ResponseWriter, r *http.Request, maxBody int64, status int, challenge, msg string) {
	id := json.RawMessage("null")
	if r.Body != nil {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(body, &req) == nil && len(req.ID) > 0 && (req.ID[0] == '"' || req.ID[0] == '-' || (req.ID[0] >= '0' && req.ID[0] <= '9')) {
			id = req.ID
		}
	}
	var buf bytes.Buffer
	code, word := codeUnauthorized, "unauthorized"
	if status == http.StatusForbidden {
		code, word = codeForbidden, "forbidden"
	}
	fmt.Fprintf(&buf, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":`, id, code)
	m, _ := json.Marshal(word + ": " + msg)
	buf.Write(m)
	buf.WriteString(`,"data":{"code":"` + word + `"}}}`)
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// ResourceMetadataURL is where RFC 9728 (section 3.1) puts the protected
// resource metadata of resource: /.well-known/oauth-protected-resource
// inserted between its host and its path
// (https://h/mcp → https://h/.well-known/oauth-protected-resource/mcp).
func ResourceMetadataURL(resource string) (string, error) {
	u, err := url.Parse(resource)
	if err != nil {
		return "", err
	}
	u.Path = "/.well-known/oauth-protected-resource" + strings.TrimSuffix(u.Path, "/")
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	return u.String(), nil
}

// ProtectedResourceMetadata serves the RFC 9728 metadata of resource: the
// authorization servers a client gets its token from and the scopes, with
// the Go SDK's handler (GET, CORS open: the document is public). Serve it
// at ResourceMetadataURL's path and at /.well-known/oauth-protected-resource
// (clients that do not insert the path look there).
func ProtectedResourceMetadata(resource string, v *jwtauth.Verifier) http.Handler {
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   v.IssuerURLs(),
		ScopesSupported:        v.Scopes(),
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "Ratchet",
	})
}
