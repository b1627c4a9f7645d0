// Package mcp serves Ratchet's tools to cooperative agents over the Model
// Context Protocol, with the official Go SDK, as a thin adapter on the ledger
// engine: it decodes arguments, fixes the caller's identity, calls the
// engine, and shapes the answer (structured content, a one-line summary, and
// the JSON for clients that only read text).
//
// Identity. Over HTTP, bearer tokens are checked by the SDK's auth
// middleware against the SHA-256 hashes in the config; a token maps to a
// namespace and optionally an agent_id. An agent whose token names an
// agent_id cannot act as another one (unauthorized). Over stdio and in tests,
// the identity is fixed by Options. The namespace never comes from tool
// arguments.
//
// Errors. Every problem with a call is a tool result with isError true,
// whose structured content is {"error":{"code","message","field"}} and whose
// text starts with the code, so an agent can read and fix it. The SDK's own
// schema validation is not used for this reason: its messages carry no code.
package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Engine is what the tools need from the ledger.
type Engine interface {
	Begin(context.Context, ledger.BeginRequest) (*ledger.BeginResult, error)
	Report(context.Context, ledger.ReportRequest) (*ledger.Effect, error)
	Resolve(context.Context, ledger.ResolveRequest) (*ledger.Effect, error)
	Unwind(context.Context, ledger.UnwindRequest) (*ledger.UnwindResult, error)
	Get(ctx context.Context, namespace, effectID, idempotencyKey string) (*ledger.Effect, error)
	List(context.Context, ledger.Filter) (*ledger.Page, error)
}

// Identity is who is calling: the namespace and, when the credentials fix
// it, the agent.
type Identity struct {
	Namespace string
	// AgentID, when set, is the only agent_id the caller may use.
	AgentID string
}

// Options configures New. A nil *Options is valid.
type Options struct {
	// Identity is used for calls that carry no verified token (stdio,
	// unauthenticated loopback HTTP); empty Namespace means "default".
	Identity Identity
	// Version is reported to clients in initialize.
	Version string
	// Logger receives the SDK's logs; nil discards them.
	Logger *slog.Logger
}

// New returns an MCP server with Ratchet's six tools.
func New(eng Engine, opts *Options) *sdk.Server {
	if opts == nil {
		opts = &Options{}
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "ratchet", Title: "Ratchet side-effect gate", Version: version},
		&sdk.ServerOptions{Logger: opts.Logger, Instructions: instructions})
	t := &tools{eng: eng, fallback: opts.Identity}
	if t.fallback.Namespace == "" {
		t.fallback.Namespace = ledger.DefaultNamespace
	}
	t.register(s)
	return s
}

// instructions is what a client may show the model about the server.
const instructions = "Ratchet gates side effects. Call ratchet_begin_effect immediately before any action that touches the outside world and obey its decision; call ratchet_report_effect right after acting."

// Agents maps SHA-256 hex digests of bearer tokens to identities.
type Agents map[string]Identity

// HTTPOptions configures Handler.
type HTTPOptions struct {
	// Agents are the accepted tokens; with none, calls are unauthenticated
	// and get Options.Identity (serve only on loopback then).
	Agents Agents
	// MaxBodyBytes bounds a request body; zero means 1 MiB.
	MaxBodyBytes int64
	// Logger receives the transport's logs; nil discards them.
	Logger *slog.Logger
}

// Handler serves the server over streamable HTTP, checking bearer tokens.
func Handler(s *sdk.Server, opts *HTTPOptions) http.Handler {
	if opts == nil {
		opts = &HTTPOptions{}
	}
	maxBody := opts.MaxBodyBytes
	if maxBody == 0 {
		maxBody = 1 << 20
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s },
		&sdk.StreamableHTTPOptions{JSONResponse: true, Logger: opts.Logger, MaxRequestBodyBytes: maxBody})
	if len(opts.Agents) == 0 {
		return h
	}
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		sum := sha256.Sum256([]byte(token))
		id, ok := opts.Agents[hex.EncodeToString(sum[:])]
		if !ok {
			return nil, fmt.Errorf("unknown bearer token: %w", auth.ErrInvalidToken)
		}
		return &auth.TokenInfo{UserID: id.Namespace + "/" + id.AgentID,
			Extra: map[string]any{"namespace": id.Namespace, "agent_id": id.AgentID}}, nil
	}
	return auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
}

// identity is the caller of one tool call.
func (t *tools) identity(req *sdk.CallToolRequest) Identity {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		ns, _ := req.Extra.TokenInfo.Extra["namespace"].(string)
		agent, _ := req.Extra.TokenInfo.Extra["agent_id"].(string)
		return Identity{Namespace: ns, AgentID: agent}
	}
	return t.fallback
}
