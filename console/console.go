package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/ledger"
)

//go:embed static
var static embed.FS

// Engine is what the console reads from the ledger directly, for what the
// admin API has no endpoint for.
type Engine interface {
	List(ctx context.Context, f ledger.Filter) (*ledger.Page, error)
	Get(ctx context.Context, namespace, effectID, idempotencyKey string) (*ledger.Effect, error)
	Audit(ctx context.Context, since, until time.Time, fn func(ledger.AuditRecord) error) error
	Groups(ctx context.Context, namespace string, states ...string) ([]ledger.Group, error)
}

// Options configures Handler.
type Options struct {
	// Admins maps SHA-256 hex digests of admin tokens to names, as the
	// admin API's; empty means no sign-in (see the package doc).
	Admins map[string]string
	// Agents are the SHA-256 digests of agent tokens, which cannot sign
	// in; with no Admins their presence closes the console (ModeAdminRequired).
	Agents map[string]bool
	// Namespaces are searched when an operator looks an effect up by its
	// idempotency key without naming a namespace; nil means "default".
	Namespaces []string
	// SessionTTL is how long a session lasts after sign-in; zero means 8
	// hours.
	SessionTTL time.Duration
	// Hosts are the names, besides localhost and loopback addresses, under
	// which the console answers when admins sign in (a Host header with
	// another name is refused: a DNS-rebinding page could otherwise guess
	// tokens and read the answers). An entry with a port matches that port
	// only. serve passes listen.admin_hosts and the host of listen.admin.
	// Without admin tokens only loopback names are served, whatever this
	// says.
	Hosts []string
	// SecureCookie marks the session cookie Secure even when the request
	// did not come over TLS: for a console behind a proxy that terminates
	// TLS (X-Forwarded-Proto is not believed: anyone can send it).
	SecureCookie bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger gets one line per sign-in and sign-out.
	Logger *slog.Logger
}

// DefaultSessionTTL is a session's life when Options.SessionTTL is zero:
// a working day.
const DefaultSessionTTL = 8 * time.Hour

// The error codes of the console's own refusals (the admin API's and the
// engine's pass through as they are).
const (
	// CodeSignInRequired: no session, or an expired one.
	CodeSignInRequired = "sign_in_required"
	// CodeCSRFRequired: a state change without the session's CSRF token.
	CodeCSRFRequired = "csrf_token_required"
	// CodeCSRFInvalid: a state change with another token.
	CodeCSRFInvalid = "csrf_token_invalid"
	// CodeSignInUnavailable: signing in when no admin tokens are configured.
	CodeSignInUnavailable = "sign_in_unavailable"
	// CodeAdminRequired: any session or read while agents are configured
	// and admins are not (ModeAdminRequired); the admin API's code.
	CodeAdminRequired = admin.CodeAdminAuthRequired
	// CodeHostNotAllowed: a Host header the console does not answer.
	CodeHostNotAllowed = "host_not_allowed"
	// CodePeerNotAllowed: without admin tokens, a connection from beyond
	// loopback.
	CodePeerNotAllowed = "peer_not_allowed"
	// CodeCrossOriginRefused: a request from a page of another origin
	// (only a top-level navigation to a page may come from elsewhere).
	CodeCrossOriginRefused = "cross_origin_refused"
	// CodeTooManyAttempts: sign-in attempts too fast (a Retry-After says
	// when to try again).
	CodeTooManyAttempts = "too_many_attempts"
)

// cookieName names the session cookie.
const cookieName = "ratchet_console"

// csrfHeader carries the session's CSRF token on every state change.
const csrfHeader = "X-Ratchet-CSRF"

// maxBody bounds the console's own request bodies (a token, a note).
const maxBody = 16 << 10

// Mode is how the console is reached, from the tokens configured.
type Mode string

// Modes.
const (
	// ModeSignIn: auth.admins configured; sign in with an admin token.
	ModeSignIn Mode = "sign_in"
	// ModeOpen: no tokens at all; open on loopback.
	ModeOpen Mode = "open"
	// ModeAdminRequired: agents and no admins; the pages load and say to
	// configure auth.admins, and nothing else answers (no session, no
	// read, no change).
	ModeAdminRequired Mode = "admin_required"
)

type console struct {
	api      http.Handler
	eng      Engine
	opts     Options
	mode     Mode
	log      *slog.Logger
	now      func() time.Time
	sessions *sessions
	throttle *throttle
	assets   fs.FS
}

// Handler returns the admin listener's handler with the console in front
// of api (the admin API's handler): the console's pages at /, its session
// at /console/session, the admin API through the session at
// /console/api/v1/..., and every other path (the API itself, /metrics, the
// probes) passed to api untouched.
//
// A nil opts is the zero Options.
func Handler(api http.Handler, eng Engine, o *Options) http.Handler {
	var opts Options
	if o != nil {
		opts = *o
	}
	c := &console{api: api, eng: eng, opts: opts, log: opts.Logger, now: opts.Now}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	ttl := opts.SessionTTL
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	c.sessions = newSessions(ttl, maxSessions)
	c.throttle = newThrottle(c.now())
	switch {
	case len(opts.Admins) > 0:
		c.mode = ModeSignIn
	case len(opts.Agents) > 0:
		c.mode = ModeAdminRequired
	default:
		c.mode = ModeOpen
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	c.assets = sub

	mux := http.NewServeMux()
	for _, p := range pages {
		mux.HandleFunc("GET "+p, c.page)
	}
	mux.HandleFunc("GET /assets/{name}", c.asset)
	mux.HandleFunc("GET /console/session", c.session)
	mux.HandleFunc("POST /console/session", c.signIn)
	mux.Handle("POST /console/session/end", c.withSession(c.signOut))
	mux.Handle("/console/api/v1/", c.withSession(c.forward))
	mux.Handle("GET /console/api/search", c.withSession(c.search))
	mux.Handle("GET /console/api/history/{id}", c.withSession(c.history))
	mux.Handle("GET /console/api/groups", c.withSession(c.listGroups))
	mux.Handle("/console/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such console endpoint: "+r.Method+" "+r.URL.Path)
	}))
	own := c.guard(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			api.ServeHTTP(w, r) // not the console's: the admin API, /metrics, the probes
			return
		}
		own.ServeHTTP(w, r)
	})
}

// pages are the console's addresses; each serves the same page, whose
// script shows the view the path names (so each is a link to share).
var pages = []string{"/{$}", "/approvals", "/approvals/{id}", "/attention", "/effects", "/effects/{id}",
	"/budgets", "/groups", "/grants", "/explain"}

// guard applies the admin API's rules against web pages to the console's
// own endpoints (the API's are applied by the API).
func (c *console) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case c.mode != ModeSignIn && !loopback.Is(r.Host):
			writeError(w, http.StatusForbidden, CodeHostNotAllowed, fmt.Sprintf("Host %q is not localhost or a loopback address: "+
				"without auth.admins the console answers only requests addressed to localhost, 127.0.0.1 or [::1]", truncate(r.Host, 100)))
			return
		case c.mode != ModeSignIn && !loopback.Is(r.RemoteAddr):
			// A port-forward (kubectl, ssh -L) connects from loopback; a
			// peer beyond it reached a listener it was not meant to.
			writeError(w, http.StatusForbidden, CodePeerNotAllowed, fmt.Sprintf("the connection comes from %s, not loopback: "+
				"without auth.admins the console answers only connections from this machine (configure auth.admins to sign in from elsewhere)", truncate(r.RemoteAddr, 100)))
			return
		case c.mode == ModeSignIn && !c.hostAllowed(r.Host):
			writeError(w, http.StatusForbidden, CodeHostNotAllowed, fmt.Sprintf("Host %q is not localhost, a loopback address or one of listen.admin_hosts: "+
				"add the name the console is reached by to listen.admin_hosts", truncate(r.Host, 100)))
			return
		}
		if !sameOriginOrNavigation(r) {
			writeError(w, http.StatusForbidden, CodeCrossOriginRefused, "a request from another site's page is refused here: "+
				"only following a link to a console page may come from elsewhere")
			return
		}
		if err := cop.Check(r); err != nil {
			writeError(w, http.StatusForbidden, CodeCrossOriginRefused, "a cross-origin request cannot change state here ("+err.Error()+")")
			return
		}
		if r.Method == http.MethodPost {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "a POST must carry a JSON body with Content-Type: application/json")
				return
			}
		}
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// hostAllowed: localhost, a loopback address, or one of Options.Hosts.
func (c *console) hostAllowed(host string) bool {
	if loopback.Is(host) {
		return true
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	for _, h := range c.opts.Hosts {
		if strings.EqualFold(h, host) {
			return true
		}
		if _, _, err := net.SplitHostPort(h); err != nil && strings.EqualFold(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), name) {
			return true
		}
	}
	return false
}

// sameOriginOrNavigation refuses, by a browser's Sec-Fetch-* headers, any
// request another site's page makes (or another port of this host: a
// "same-site" page): an <img> or a fetch of /console/session or of the
// console's API, say. A top-level navigation to one of the pages (a link
// from a notification) may come from anywhere. Clients that send no
// Sec-Fetch-Site (the CLI, older browsers) are left to the other checks.
func sameOriginOrNavigation(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate" && r.Header.Get("Sec-Fetch-Dest") == "document" &&
		!strings.HasPrefix(r.URL.Path, "/console/") && !strings.HasPrefix(r.URL.Path, "/assets/")
}

// csp allows the console's own files only: no inline script, nothing from
// elsewhere, no framing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (c *console) page(w http.ResponseWriter, r *http.Request) {
	b, err := fs.ReadFile(c.assets, "index.html")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func (c *console) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, err := fs.ReadFile(c.assets, name)
	if err != nil || name == "index.html" {
		http.NotFound(w, r)
		return
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("Content-Type", ct)
	w.Write(b)
}

// sessionView is what GET /console/session and a sign-in answer.
type sessionView struct {
	Mode      Mode       `json:"mode"`
	SignedIn  bool       `json:"signed_in"`
	Name      string     `json:"name,omitempty"`
	CSRF      string     `json:"csrf,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// CanDecide is false when the console is closed (ModeAdminRequired).
	CanDecide bool `json:"can_decide"`
}

func (c *console) view(s *session) sessionView {
	v := sessionView{Mode: c.mode, CanDecide: c.mode != ModeAdminRequired}
	if s != nil {
		exp := s.expires
		v.SignedIn, v.Name, v.CSRF, v.ExpiresAt = true, s.name, s.csrf, &exp
	}
	return v
}

// session tells the page where it stands. It never makes a session (a GET
// is what any page can make a browser send, with an <img>): without admin
// tokens the page then asks for one with a POST.
func (c *console) session(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, c.view(c.current(r)))
}

// signInBody is the body of a sign-in.
type signInBody struct {
	Token string `json:"token"`
}

// MsgNotAnAdminToken answers every refused sign-in alike, an agent's
// token as an unknown one, so that the answer tells a guesser nothing.
const MsgNotAnAdminToken = "not an admin token: sign in with one of auth.admins (agent tokens cannot sign in)"

// signIn is POST /console/session: with admin tokens, a sign-in; without,
// the tokenless session the page needs for its CSRF token (the one the
// request presents if it is live).
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	if c.mode == ModeAdminRequired {
		writeError(w, http.StatusForbidden, CodeAdminRequired, msgAdminRequired)
		return
	}
	if c.mode != ModeSignIn {
		var body signInBody
		if err := decode(w, r, &body); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
		if body.Token != "" {
			writeError(w, http.StatusConflict, CodeSignInUnavailable, "no admin tokens are configured: the console is open on loopback and needs no sign-in")
			return
		}
		s := c.current(r)
		if s == nil {
			s = c.start(w, r, "local", "")
		}
		writeJSON(w, http.StatusOK, c.view(s))
		return
	}
	if ok, wait := c.throttle.take(c.now(), r.RemoteAddr); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		c.log.Warn("console sign-in throttled", "remote", r.RemoteAddr)
		writeError(w, http.StatusTooManyRequests, CodeTooManyAttempts, fmt.Sprintf("too many sign-in attempts: try again in %d s", max(secs, 1)))
		return
	}
	var body signInBody
	if err := decode(w, r, &body); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	token := strings.TrimSpace(body.Token)
	sum := sha256.Sum256([]byte(token))
	digest := hex.EncodeToString(sum[:])
	name, ok := c.opts.Admins[digest]
	if token == "" || !ok {
		if token != "" && c.opts.Agents[digest] {
			c.log.Warn("console sign-in refused: an agent token", "remote", r.RemoteAddr)
		} else {
			c.log.Warn("console sign-in refused: not an admin token", "remote", r.RemoteAddr)
		}
		writeError(w, http.StatusUnauthorized, string(ledger.CodeUnauthorized), MsgNotAnAdminToken)
		return
	}
	c.throttle.refund(c.now(), r.RemoteAddr)
	if old := c.current(r); old != nil {
		c.sessions.end(old)
	}
	s := c.start(w, r, name, token)
	c.log.Info("operator signed in to the console", "by", name)
	writeJSON(w, http.StatusOK, c.view(s))
}

func (c *console) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	c.sessions.end(s)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
	c.log.Info("operator signed out of the console", "by", s.name)
	writeJSON(w, http.StatusOK, c.view(nil))
}

// start makes a session and sets its cookie.
func (c *console) start(w http.ResponseWriter, r *http.Request, name, token string) *session {
	s, id := c.sessions.start(c.now(), name, token)
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", Expires: s.expires,
		MaxAge: int(s.expires.Sub(c.now()).Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: c.secure(r)})
	return s
}

// secure: the cookie is Secure over TLS, or always with
// Options.SecureCookie (TLS ended by a proxy in front).
func (c *console) secure(r *http.Request) bool { return r.TLS != nil || c.opts.SecureCookie }

// maxCookies bounds the cookies of our name looked at in one request.
const maxCookies = 16

// current is the request's live session, or nil. Every cookie of the
// name is tried: a page on another port of the same host can set one with
// a longer Path (cookies ignore ports), which the browser sends first.
func (c *console) current(r *http.Request) *session {
	for i, ck := range r.CookiesNamed(cookieName) {
		if i == maxCookies {
			break
		}
		if s := c.sessions.get(ck.Value, c.now()); s != nil {
			return s
		}
	}
	return nil
}

// msgAdminRequired answers everything but the pages in ModeAdminRequired.
const msgAdminRequired = "the console is closed: " + admin.MsgAdminAuthRequired

// withSession requires a live session, and the session's CSRF token on
// anything but a GET or HEAD. In ModeAdminRequired there are no sessions:
// it refuses, whatever the request carries.
func (c *console) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.mode == ModeAdminRequired {
			writeError(w, http.StatusForbidden, CodeAdminRequired, msgAdminRequired)
			return
		}
		s := c.current(r)
		if s == nil {
			writeError(w, http.StatusUnauthorized, CodeSignInRequired, "sign in to the console first (or again: sessions expire, and end when Ratchet restarts)")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			got := r.Header.Get(csrfHeader)
			switch {
			case got == "":
				writeError(w, http.StatusForbidden, CodeCSRFRequired, "a state change needs the session's CSRF token in the "+csrfHeader+" header")
				return
			case subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1:
				writeError(w, http.StatusForbidden, CodeCSRFInvalid, "the "+csrfHeader+" header is not this session's CSRF token")
				return
			}
		}
		h(w, r, s)
	})
}

// forward passes /console/api/v1/... to the admin API as /v1/..., with the
// session's token in place of the cookie.
func (c *console) forward(w http.ResponseWriter, r *http.Request, s *session) {
	r2 := r.Clone(r.Context())
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, "/console/api")
	r2.URL.RawPath = ""
	if r.URL.RawPath != "" {
		r2.URL.RawPath = strings.TrimPrefix(r.URL.RawPath, "/console/api")
	}
	r2.RequestURI = r2.URL.RequestURI()
	r2.Header.Del("Cookie")
	r2.Header.Del(csrfHeader)
	r2.Header.Del("Authorization")
	if s.token != "" {
		r2.Header.Set("Authorization", "Bearer "+s.token)
	}
	c.api.ServeHTTP(w, r2)
}

// decode reads a small JSON body strictly.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		return errors.New("reading the body: " + err.Error())
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("body is not the expected JSON object: " + err.Error())
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

// writeLedgerError answers an engine error with its code and status.
func writeLedgerError(w http.ResponseWriter, err error) {
	le := ledger.Classify(err)
	writeError(w, ledger.HTTPStatus(le.Code), string(le.Code), le.Message)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"encoding the answer"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
