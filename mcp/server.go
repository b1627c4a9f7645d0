// Package mcp serves Ratchet's tools to cooperative agents over the Model
// Context Protocol, with the official Go SDK, as a thin adapter on the ledger
// engine: it decodes arguments, fixes the caller's identity, calls the
// engine, and shapes the answer (structured content, a one-line summary, and
// the JSON for clients that only read text).
//
// Identity. Over HTTP, bearer tokens are checked against the SHA-256 hashes
// in the config (auth.go: a refused token is a 401 whose JSON-RPC error says
// what to fix); a token maps to a
// namespace and optionally an agent_id. With HTTPOptions.OAuth, an access
// token of a trusted issuer (internal/jwtauth) is accepted too, always
// fixing both; refusals then name the protected resource metadata. An agent whose token names an
// agent_id cannot act as another one (unauthorized), and a token that
// names none cannot act as an agent a credential fixes (Options.Reserved:
// another token's agent, the proxy's), nor report or resolve the attempts
// such an agent began. Over stdio and in tests,
// the identity is fixed by Options. The namespace never comes from tool
// arguments.
//
// Errors. Every problem with a call is a tool result with isError true and
// two text items: "<code>: <message>" first, then the JSON
// {"error":{"code","message","field"}} (field when one argument is at
// fault), so an agent reads the stable code whichever item its client shows
// it; ErrorOf reads it for Go clients. An error carries no structured
// content: clients check structured content against the tool's output
// schema, and the TypeScript SDK 1.x turns a mismatch into its own -32602
// error, which would hide the code. The SDK's own argument validation is not
// used for the same reason: its messages carry no code.
//
// Protocol versions. Every version the Go SDK supports is served. Over HTTP,
// requests of the stateless 2026-07-28 protocol (those with an
// Mcp-Protocol-Version header of 2026-07-28 or later) go to a stateless
// handler, since the SDK serves that protocol only statelessly; older
// clients keep their sessions. Ratchet sends nothing to clients unasked, so
// the two differ only in bookkeeping.
//
// Schemas: see schema.go. interop/ proves all of this against the
// TypeScript SDKs and the MCP Inspector.
package mcp

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
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
	// Principal is "<issuer name>:<sub>" of a verified OAuth token, audited
	// on what the caller does; empty for a static token and stdio.
	Principal string
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
	// Defaults are the engine's (the config's defaults block), for the
	// lease bounds the begin tool's schema states; zero fields take the
	// engine's own defaults.
	Defaults ledger.Defaults
	// Reserved are the agents a credential fixes, each in its namespace:
	// a token's agent_id, and the proxy's proxy.agent_id. A caller whose
	// identity fixes no agent names its agent_id per call, but never one
	// of these (unauthorized): it would spend that agent's grants, count
	// against its per-agent ceilings and add to its unreported expiries,
	// which its credential exists to keep its own. An empty Namespace is
	// "default".
	Reserved []Identity
	// ConsoleURL is the console's address as people reach it
	// (notify.console_url): an approval_required answer carries its
	// approval's page under it (approval_url), which the agent shows its
	// user. Empty: no approval_url, the answer as before.
	ConsoleURL string
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
	logger := opts.Logger
	if logger != nil {
		logger = slog.New(quiet{logger.Handler()})
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "ratchet", Title: "Ratchet side-effect gate", Version: version},
		&sdk.ServerOptions{Logger: logger, Instructions: instructions})
	t := &tools{eng: eng, fallback: opts.Identity, leases: opts.Defaults, reserved: map[Identity]bool{},
		console: strings.TrimSuffix(opts.ConsoleURL, "/"), log: cmp.Or(opts.Logger, discard)}
	if t.fallback.Namespace == "" {
		t.fallback.Namespace = ledger.DefaultNamespace
	}
	for _, id := range opts.Reserved {
		if id.Namespace == "" {
			id.Namespace = ledger.DefaultNamespace
		}
		if id.AgentID != "" {
			t.reserved[id] = true
		}
	}
	t.register(s)
	s.AddReceivingMiddleware(t.listFull)
	return s
}

// quiet passes the SDK's warnings and errors on and demotes its other lines
// to debug: it logs every session it connects, which for a stateless client
// is every request.
type quiet struct{ slog.Handler }

func demote(l slog.Level) slog.Level {
	if l < slog.LevelWarn {
		return slog.LevelDebug
	}
	return l
}

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return q.Handler.Enabled(ctx, demote(l))
}

func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return q.Handler.Handle(ctx, r)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }
func (q quiet) WithGroup(name string) slog.Handler    { return quiet{q.Handler.WithGroup(name)} }

// instructions is what a client may show the model about the server.
const instructions = "Ratchet gates side effects. Call ratchet_begin_effect immediately before any action that touches the outside world and obey its decision; call ratchet_report_effect right after acting."

// Agents maps SHA-256 hex digests of bearer tokens to identities.
type Agents map[string]Identity

// HTTPOptions configures Handler.
type HTTPOptions struct {
	// Agents are the accepted tokens; with none, calls are unauthenticated
	// and get Options.Identity (serve only on loopback then).
	Agents Agents
	// OAuth, when set, accepts access tokens of its issuers that carry
	// the agent scope, beside Agents; calls are then never
	// unauthenticated.
	OAuth *jwtauth.Verifier
	// ResourceMetadataURL is where the protected resource metadata is
	// (ResourceMetadataURL of the resource), named in every refusal's
	// WWW-Authenticate when OAuth is set.
	ResourceMetadataURL string
	// MaxBodyBytes bounds a request body; zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Logger receives the transport's logs; nil discards them.
	Logger *slog.Logger
	// SessionIdle closes a session that has had no request for this long
	// (an agent that vanished without closing it: a crashed pod, a
	// closed laptop); zero means DefaultSessionIdle, negative never.
	SessionIdle time.Duration
}

// DefaultSessionIdle is how long an idle MCP session is kept. A client
// that comes back later with its session id gets 404 Not Found, as the
// streamable HTTP transport specifies for a terminated session, and the
// SDKs then start a new session. Half an hour outlasts an agent's pause
// to think or to wait for an approval (it keeps no state in the session
// that the ledger does not hold), and bounds what vanished agents leave.
const DefaultSessionIdle = 30 * time.Minute

// DefaultMaxBodyBytes bounds an HTTP request's body when
// HTTPOptions.MaxBodyBytes is zero.
const DefaultMaxBodyBytes = 1 << 20

// Handler serves the server over streamable HTTP, checking bearer tokens.
func Handler(s *sdk.Server, opts *HTTPOptions) http.Handler {
	if opts == nil {
		opts = &HTTPOptions{}
	}
	maxBody := opts.MaxBodyBytes
	if maxBody == 0 {
		maxBody = DefaultMaxBodyBytes
	}
	idle := cmp.Or(opts.SessionIdle, DefaultSessionIdle)
	if idle < 0 {
		idle = 0 // the SDK's "never"
	}
	server := func(*http.Request) *sdk.Server { return s }
	sessions := sdk.NewStreamableHTTPHandler(server,
		&sdk.StreamableHTTPOptions{JSONResponse: true, Logger: opts.Logger, MaxRequestBodyBytes: maxBody, SessionTimeout: idle})
	stateless := sdk.NewStreamableHTTPHandler(server,
		&sdk.StreamableHTTPOptions{JSONResponse: true, Logger: opts.Logger, MaxRequestBodyBytes: maxBody, Stateless: true})
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("Mcp-Protocol-Version"); protocolDateRe.MatchString(v) && v >= statelessProtocol {
			stateless.ServeHTTP(w, r)
			return
		}
		sessions.ServeHTTP(w, r)
	})
	// A web page must not call the tools from a browser that holds a
	// token or reaches an unauthenticated loopback sidecar: cross-origin
	// requests are refused (403) before any tool runs.
	h = http.NewCrossOriginProtection().Handler(h)
	if len(opts.Agents) == 0 && opts.OAuth == nil {
		return h
	}
	return requireToken(opts.Agents, opts.OAuth, opts.ResourceMetadataURL, maxBody, h)
}

// statelessProtocol is the first protocol version without sessions, which
// the SDK serves over HTTP only from a stateless handler.
const statelessProtocol = "2026-07-28"

// protocolDateRe is a protocol version's form: only a version of that form
// is compared with statelessProtocol.
var protocolDateRe = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)

// identity is the caller of one tool call.
func (t *tools) identity(req *sdk.CallToolRequest) Identity {
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		ns, _ := req.Extra.TokenInfo.Extra["namespace"].(string)
		agent, _ := req.Extra.TokenInfo.Extra["agent_id"].(string)
		principal, _ := req.Extra.TokenInfo.Extra["principal"].(string)
		return Identity{Namespace: ns, AgentID: agent, Principal: principal}
	}
	return t.fallback
}
