// Package admin is Ratchet's operator surface over HTTP: the admin API
// (approvals, effects, budgets, the audit export) behind admin bearer
// tokens, plus the health probes and the metrics endpoint on the same
// listener. It is an adapter on the ledger engine, like the MCP tools and
// the proxy. Operator actions are recorded with the actor "admin:<name>".
//
// Authentication: tokens are configured by their SHA-256 under
// auth.admins, each with a name that is recorded on every approval and
// resolution. An agent's token is refused with 403 wherever it is
// presented: agents cannot approve their own actions. Which tokens are
// configured decides the mode:
//
//   - auth.admins listed: every /v1 call, read or change, needs an admin
//     token.
//   - no admins and no agents (the built-in default, as "make run"): the
//     API is unauthenticated and must listen on loopback only (serve
//     refuses otherwise). Whoever is on the machine is trusted, as MCP is
//     then unauthenticated too.
//   - auth.agents listed and no admins: closed. A sidecar shares loopback
//     with its agent, so an unauthenticated API would let the agent
//     approve its own action, or read every namespace's effects, audit
//     log and budgets, by leaving its token off: the agent tokens would
//     protect nothing. Every /v1 call answers 403 admin_auth_required
//     until auth.admins are configured (reads used to answer; see
//     docs/design.md). This is a warning of "ratchet config validate",
//     not an error: the sidecar is safe (approval-gated actions wait,
//     then expire), and a deployment that uses no approvals keeps working.
//
// In every mode the probes (/healthz, /readyz) and /metrics need no token:
// a kubelet and a Prometheus scraper carry none, and giving a scraper an
// admin token would let it approve payments. /metrics holds counters by
// effect type, vendor and outcome, and spend per namespace and ceiling
// name: no effect id, key, agent or run. Keep it so; an operator who must
// hide even those keeps the admin listener on loopback or behind a network
// policy. "ratchet config validate" says what is open (config.Open).
//
// Web pages: an operator's browser runs pages from anywhere, and a page
// may send a "simple" cross-site POST (text/plain, no preflight) to
// 127.0.0.1, or point a name of its own at 127.0.0.1 (DNS rebinding) and
// then read and write as if same-origin. So, before any endpoint:
//
//   - when unauthenticated (no auth.admins), a Host that is not localhost
//     or a loopback IP is refused (403 host_not_allowed), and so is a
//     connection whose peer is not a loopback address (403
//     peer_not_allowed: a port-forward connects from loopback), on every
//     path;
//     with admin tokens any Host is served, since the token is what a page
//     cannot forge and the API may then be reached by a Service name;
//   - a cross-origin state change, as the browser's Sec-Fetch-Site or
//     Origin header tells it, is refused (403 cross_origin_refused; Go's
//     http.CrossOriginProtection); the CLI sends neither header;
//   - a POST whose Content-Type is not application/json is refused (415
//     unsupported_media_type), as no page can send that cross-origin
//     without a CORS preflight, which this API never grants.
//
// Every refusal is a JSON error like the rest of the API.
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// Engine is what the admin API needs from the ledger.
type Engine interface {
	ListApprovals(ctx context.Context, namespace, state string) ([]ledger.Approval, error)
	Approve(ctx context.Context, approvalID, decidedBy, note string) (*ledger.Approval, error)
	Reject(ctx context.Context, approvalID, decidedBy, note string) (*ledger.Approval, error)
	List(ctx context.Context, f ledger.Filter) (*ledger.Page, error)
	Get(ctx context.Context, namespace, effectID, idempotencyKey string) (*ledger.Effect, error)
	Resolve(ctx context.Context, req ledger.ResolveRequest) (*ledger.Effect, error)
	Budgets(ctx context.Context, namespace string) ([]ledger.Budget, error)
	// What an operator looks up (effects.go): each attempt's vendor key,
	// the scope a dimension value counts under.
	AttemptKeys(ctx context.Context, effectID string) ([]ledger.AttemptKey, error)
	DimensionScope(name, value string) (string, error)
	Audit(ctx context.Context, since, until time.Time, fn func(ledger.AuditRecord) error) error
	Ping(ctx context.Context) error
	// Grants and the outbox (grants.go).
	ListGrants(ctx context.Context, namespace string, all bool) ([]ledger.Grant, error)
	CreateGrant(ctx context.Context, req ledger.GrantRequest) (*ledger.Grant, error)
	RevokeGrant(ctx context.Context, grantID, by string) (*ledger.Grant, error)
	Outbox(ctx context.Context, deadOnly bool) ([]ledger.OutboxEntry, error)
	Halter // halts.go
}

// Options configures Handler.
type Options struct {
	// Admins maps SHA-256 hex digests of admin tokens to names; empty means
	// unauthenticated (loopback only), and closed if Agents is not empty.
	Admins map[string]string
	// Agents are the SHA-256 digests of agent tokens, refused here; with
	// no Admins, their presence closes the API (every /v1 call refused).
	Agents map[string]bool
	// Namespaces are searched for an idempotency_key filter that names no
	// namespace (a key is unique within a namespace only).
	Namespaces []string
	// Metrics serves /metrics; nil leaves it out.
	Metrics http.Handler
	// Logger gets one line per operator action.
	Logger *slog.Logger
	// Explainer serves POST /v1/explain (explain.go) and Gate its proxied
	// requests; nil leaves them out.
	Explainer Explainer
	Gate      Gate
}

// maxBody bounds admin request bodies.
const maxBody = 64 << 10

// Handler returns the admin listener's handler. A nil opts is the zero
// Options: no admins and no agents, an unauthenticated API (loopback only).
func Handler(eng Engine, o *Options) http.Handler {
	var opts Options
	if o != nil {
		opts = *o
	}
	a := &api{eng: eng, opts: opts, log: opts.Logger}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", a.ready)
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	mux.Handle("GET /v1/approvals", a.auth(params(a.listApprovals, "namespace", "state")))
	mux.Handle("POST /v1/approvals/{id}/approve", a.auth(params(a.decide(eng.Approve))))
	mux.Handle("POST /v1/approvals/{id}/reject", a.auth(params(a.decide(eng.Reject))))
	mux.Handle("GET /v1/effects", a.auth(params(a.listEffects, effectFilters...)))
	mux.Handle("GET /v1/effects/{id}", a.auth(params(a.getEffect))) // effects.go
	mux.Handle("POST /v1/effects/{id}/resolve", a.auth(params(a.resolve)))
	mux.Handle("GET /v1/budgets", a.auth(params(a.budgets, "namespace")))
	mux.Handle("POST /v1/budgets/lookup", a.auth(params(a.lookupScope))) // effects.go: a read, though a POST
	mux.Handle("GET /v1/audit", a.auth(params(a.auditExport, "since", "until")))
	mux.Handle("GET /v1/grants", a.auth(params(a.listGrants, "namespace", "all")))
	mux.Handle("POST /v1/grants", a.auth(params(a.createGrant)))
	mux.Handle("POST /v1/grants/{id}/revoke", a.auth(params(a.revokeGrant)))
	mux.Handle("GET /v1/outbox", a.auth(params(a.outbox, "dead")))
	mux.Handle("GET /v1/halts", a.auth(params(a.listHalts)))
	mux.Handle("POST /v1/halts", a.auth(params(a.createHalt)))
	mux.Handle("POST /v1/halts/{id}/lift", a.auth(params(a.liftHalt)))
	mux.Handle("POST /v1/explain", a.auth(params(a.explain)))
	mux.Handle("/v1/", a.auth(func(w http.ResponseWriter, r *http.Request, _ string) error {
		return &apiError{http.StatusNotFound, "not_found", "no such admin endpoint: " + r.Method + " " + r.URL.Path}
	}))
	return a.guard(mux)
}

// guard refuses what a web page could send (see the package doc) before
// any endpoint sees the request.
func (a *api) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(a.opts.Admins) == 0 && !loopback.Is(r.Host) {
			writeError(w, &apiError{http.StatusForbidden, CodeHostNotAllowed, fmt.Sprintf("Host %q is not localhost or a loopback address: "+
				"without auth.admins the admin API answers only requests addressed to localhost, 127.0.0.1 or [::1]", truncate(r.Host, 100))})
			return
		}
		if len(a.opts.Admins) == 0 && !loopback.Is(r.RemoteAddr) {
			// The Host says nothing of who connects: a peer that reached
			// the listener (a port-forward bound beyond loopback, ssh -L
			// with GatewayPorts) sends Host: 127.0.0.1 as easily.
			writeError(w, &apiError{http.StatusForbidden, CodePeerNotAllowed, fmt.Sprintf("the connection comes from %s, not loopback: "+
				"without auth.admins the admin API answers only connections from this machine", truncate(r.RemoteAddr, 100))})
			return
		}
		if err := cop.Check(r); err != nil {
			writeError(w, &apiError{http.StatusForbidden, CodeCrossOriginRefused, "a cross-origin request cannot change state here (" + err.Error() + ")"})
			return
		}
		if r.Method == http.MethodPost {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeError(w, &apiError{http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "a POST must carry a JSON body with Content-Type: application/json"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// The error codes of the admin API's own refusals (the engine's codes are
// ledger.Code values).
const (
	// CodeAdminAuthRequired: any /v1 call while agents are configured and
	// admins are not.
	CodeAdminAuthRequired = "admin_auth_required"
	// CodeHostNotAllowed: a Host that is not loopback, unauthenticated.
	CodeHostNotAllowed = "host_not_allowed"
	// CodePeerNotAllowed: a connection from beyond loopback,
	// unauthenticated.
	CodePeerNotAllowed = "peer_not_allowed"
	// CodeCrossOriginRefused: a browser's cross-origin state change.
	CodeCrossOriginRefused = "cross_origin_refused"
	// CodeUnsupportedMediaType: a POST that is not application/json.
	CodeUnsupportedMediaType = "unsupported_media_type"
)

// MsgAdminAuthRequired answers every /v1 call (CodeAdminAuthRequired)
// while agents are configured and admins are not; the console says the
// same.
const MsgAdminAuthRequired = "auth.agents are configured and auth.admins are not, so the admin API answers no one: " +
	"an agent on this host must neither approve its own actions nor read other namespaces' effects by leaving its token off; " +
	"configure auth.admins (ratchet token hash < token-file) and call with an admin token (RATCHET_ADMIN_TOKEN)"

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

type api struct {
	eng  Engine
	opts Options
	log  *slog.Logger
}

// apiError is an error answered with a specific status and code.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

// handlerFunc is an admin endpoint; who is the admin's name.
type handlerFunc func(w http.ResponseWriter, r *http.Request, who string) error

// auth checks who is calling (see the package doc for the modes) and
// turns returned errors into JSON.
func (a *api) auth(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, err := a.authenticate(r)
		if err != nil {
			writeError(w, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		if err := h(w, r, who); err != nil {
			writeError(w, err)
		}
	})
}

// authenticate returns the caller's name for the record: an admin's name,
// or "local" when the API is unauthenticated.
func (a *api) authenticate(r *http.Request) (string, error) {
	token, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	digest := ""
	if bearer && token != "" {
		sum := sha256.Sum256([]byte(token))
		digest = hex.EncodeToString(sum[:])
	}
	if digest != "" && a.opts.Agents[digest] {
		return "", &apiError{http.StatusForbidden, string(ledger.CodeUnauthorized), "agent tokens cannot use the admin API"}
	}
	if len(a.opts.Admins) > 0 {
		name, isAdmin := a.opts.Admins[digest]
		switch {
		case digest == "":
			return "", &apiError{http.StatusUnauthorized, string(ledger.CodeUnauthorized), "an admin bearer token is required"}
		case !isAdmin:
			return "", &apiError{http.StatusUnauthorized, string(ledger.CodeUnauthorized), "unknown admin token"}
		}
		return name, nil
	}
	if len(a.opts.Agents) > 0 {
		return "", &apiError{http.StatusForbidden, CodeAdminAuthRequired, MsgAdminAuthRequired}
	}
	return "local", nil
}

func (a *api) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := a.eng.Ping(ctx); err != nil {
		a.log.Warn("readiness check failed", "err", err)
		http.Error(w, "ledger not writable", http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

func (a *api) listApprovals(w http.ResponseWriter, r *http.Request, _ string) error {
	q := r.URL.Query()
	list, err := a.eng.ListApprovals(r.Context(), q.Get("namespace"), q.Get("state"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"approvals": list})
}

// decisionBody is the body of approve and reject.
type decisionBody struct {
	Note string `json:"note"`
}

func (a *api) decide(fn func(ctx context.Context, id, by, note string) (*ledger.Approval, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, who string) error {
		var body decisionBody
		if err := decodeBody(r, &body); err != nil {
			return err
		}
		ap, err := fn(r.Context(), r.PathValue("id"), "admin:"+who, body.Note)
		if err != nil {
			return err
		}
		a.log.Info("operator decided an approval", "approval_id", ap.ApprovalID, "effect_id", ap.EffectID, "state", ap.State, "by", who)
		return writeJSON(w, http.StatusOK, ap)
	}
}

// effectFilters are the query parameters of GET /v1/effects.
var effectFilters = []string{"namespace", "run_id", "group_key", "agent_id", "state", "idempotency_key", "cursor", "limit"}

func (a *api) listEffects(w http.ResponseWriter, r *http.Request, _ string) error {
	q := r.URL.Query()
	f := ledger.Filter{Namespace: q.Get("namespace"), RunID: q.Get("run_id"), GroupKey: q.Get("group_key"),
		AgentID: q.Get("agent_id"), State: ledger.State(q.Get("state")), Cursor: q.Get("cursor")}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "limit must be a number"}
		}
		f.Limit = n
	}
	var page *ledger.Page
	var err error
	if key := q.Get("idempotency_key"); key != "" {
		page, err = a.byKey(r, f, key) // effects.go
	} else {
		page, err = a.eng.List(r.Context(), f)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, page)
}

// resolveBody is the body of resolve.
type resolveBody struct {
	Resolution      ledger.Outcome  `json:"resolution"`
	Note            string          `json:"note"`
	Result          json.RawMessage `json:"result,omitempty"`
	VendorReference string          `json:"vendor_reference,omitempty"`
}

func (a *api) resolve(w http.ResponseWriter, r *http.Request, who string) error {
	var body resolveBody
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	eff, err := a.eng.Resolve(r.Context(), ledger.ResolveRequest{EffectID: r.PathValue("id"), Resolution: body.Resolution,
		Note: body.Note, Result: body.Result, VendorReference: body.VendorReference, ResolvedBy: "admin:" + who})
	if err != nil {
		return err
	}
	a.log.Info("operator resolved an effect", "effect_id", eff.EffectID, "state", eff.State, "by", who)
	return writeJSON(w, http.StatusOK, eff)
}

func (a *api) budgets(w http.ResponseWriter, r *http.Request, _ string) error {
	list, err := a.eng.Budgets(r.Context(), r.URL.Query().Get("namespace"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string]any{"budgets": list})
}

// decodeBody decodes a JSON body strictly; an empty body is {}. The body
// is read whole first, so an oversized one is a 413 whatever it holds.
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &apiError{http.StatusRequestEntityTooLarge, string(ledger.CodeInvalidArgument), "body over 64 KiB"}
		}
		return &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "reading the body: " + err.Error()}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &apiError{http.StatusBadRequest, string(ledger.CodeInvalidArgument), "body is not the expected JSON object: " + err.Error()}
	}
	return nil
}

func writeError(w http.ResponseWriter, err error) {
	ae, ok := errors.AsType[*apiError](err)
	if !ok {
		le := ledger.Classify(err) // a cancelled or shut-down call is unavailable, never a 500
		ae = &apiError{ledger.HTTPStatus(le.Code), string(le.Code), le.Message}
	}
	writeJSON(w, ae.status, map[string]any{"error": map[string]string{"code": ae.code, "message": ae.message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(b, '\n'))
	return err
}
