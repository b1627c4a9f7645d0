package mcp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
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

// codeUnauthorized is the JSON-RPC error code of a refused credential, in
// the range JSON-RPC leaves to servers.
const codeUnauthorized = -32001

// requireToken admits a request whose bearer token is one of agents and
// answers any other with 401: the header the MCP authorization spec and RFC
// 6750 ask for (WWW-Authenticate: Bearer, with error="invalid_token" for a
// token that is wrong rather than missing) and a JSON-RPC error whose id is
// the request's, so the client can match it to its call. The SDK's own
// middleware then puts the identity into the request for the tools, as
// auth.TokenInfo (its context key is its own).
func requireToken(agents Agents, maxBody int64, next http.Handler) http.Handler {
	verify := func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		id, ok := ctx.Value(identityKey{}).(Identity)
		if !ok {
			return nil, fmt.Errorf("no identity checked: %w", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: id.Namespace + "/" + id.AgentID,
			Extra: map[string]any{"namespace": id.Namespace, "agent_id": id.AgentID}}, nil
	}
	inner := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok {
			refuseToken(w, r, maxBody, `Bearer realm="ratchet"`, msgNoToken)
			return
		}
		sum := sha256.Sum256([]byte(token))
		id, ok := agents[hex.EncodeToString(sum[:])]
		if !ok {
			refuseToken(w, r, maxBody, `Bearer realm="ratchet", error="invalid_token", error_description="unknown token"`, msgWrongToken)
			return
		}
		inner.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	})
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
func refuseToken(w http.ResponseWriter, r *http.Request, maxBody int64, challenge, msg string) {
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
	fmt.Fprintf(&buf, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":`, id, codeUnauthorized)
	m, _ := json.Marshal("unauthorized: " + msg)
	buf.Write(m)
	buf.WriteString(`,"data":{"code":"unauthorized"}}}`)
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	w.Write(buf.Bytes())
}
