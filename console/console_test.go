package console_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/console"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/internal/webtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

func i64(v int64) *int64 { return &v }

func sum(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// newEngine is an engine with an approval threshold of $1 and a $10
// ceiling on payments, and the audit log on.
func newEngine(t *testing.T) *ledger.Engine {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Audit: true,
		Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(1_000_000),
			Ceilings: []ledger.Ceiling{{Name: "spend", LimitMicros: i64(10_000_000), Window: "24h", Per: "global"}}}}})
	return eng
}

var (
	admins = map[string]string{sum("admin-tok"): "alice"}
	agents = map[string]bool{sum("agent-tok"): true}
)

// serve serves the console in front of the admin API, as "ratchet serve"
// does.
func serve(t *testing.T, eng *ledger.Engine, opts console.Options) *httptest.Server {
	t.Helper()
	api := admin.Handler(eng, &admin.Options{Admins: opts.Admins, Agents: opts.Agents, Metrics: http.NotFoundHandler()})
	srv := httptest.NewServer(console.Handler(api, eng, &opts))
	t.Cleanup(srv.Close)
	return srv
}

// browser is a client with a cookie jar, sending what the console's
// script sends.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

// newBrowser is a browser of its own: its own client, cookie jar and
// transport (srv.Client() is one client per server, shared).
func newBrowser(t *testing.T, srv *httptest.Server) *browser {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Transport: srv.Client().Transport.(*http.Transport).Clone(), Jar: jar}
	return &browser{t: t, base: srv.URL, c: c}
}

// do sends a request and decodes a JSON answer into out (if not nil); it
// returns the response and the error code of a refusal.
func (b *browser) do(method, path string, body any, header map[string]string, out any) (*http.Response, string) {
	b.t.Helper()
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = strings.NewReader(string(j))
	}
	req, err := http.NewRequest(method, b.base+path, r)
	if err != nil {
		b.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if resp.StatusCode >= 300 {
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
			b.t.Errorf("%s %s: %d answer is not a JSON error: %s", method, path, resp.StatusCode, raw)
		}
		return resp, e.Error.Code
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			b.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	return resp, ""
}

type sessionView struct {
	Mode      string `json:"mode"`
	SignedIn  bool   `json:"signed_in"`
	Name      string `json:"name"`
	CSRF      string `json:"csrf"`
	CanDecide bool   `json:"can_decide"`
}

func (b *browser) signIn(token string) (*http.Response, string) {
	b.t.Helper()
	var v sessionView
	resp, code := b.do("POST", "/console/session", map[string]string{"token": token}, nil, &v)
	if code == "" {
		b.csrf = v.CSRF
	}
	return resp, code
}

// open starts the tokenless session of a console without admin tokens,
// as the page does: GET /console/session, then POST it.
func (b *browser) open() sessionView {
	b.t.Helper()
	var v sessionView
	if _, code := b.do("GET", "/console/session", nil, nil, &v); code != "" || v.SignedIn {
		b.t.Fatalf("GET /console/session: %q %+v, want no session yet", code, v)
	}
	if _, code := b.do("POST", "/console/session", map[string]string{}, nil, &v); code != "" || !v.SignedIn || v.CSRF == "" {
		b.t.Fatalf("POST /console/session: %q %+v", code, v)
	}
	b.csrf = v.CSRF
	return v
}

// post is a state change as the script sends it, with the CSRF token.
func (b *browser) post(path string, body any, out any) string {
	b.t.Helper()
	_, code := b.do("POST", path, body, map[string]string{"X-Ratchet-CSRF": b.csrf}, out)
	return code
}

// pendingApproval begins a $5 payment, which needs an approval.
func pendingApproval(t *testing.T, eng *ledger.Engine, key string) *ledger.BeginResult {
	t.Helper()
	res, err := eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: key, EffectType: "payment.charge",
		AgentID: "bot", RunID: "run-1", EstimatedCostMicros: i64(5_000_000)})
	if err != nil || res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("begin %s: %+v %v", key, res, err)
	}
	return res
}

func TestSignIn(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Admins: admins, Agents: agents})
	for _, tc := range []struct {
		name, token string
		status      int
		code        string
	}{
		{"agent token", "agent-tok", http.StatusUnauthorized, string(ledger.CodeUnauthorized)},
		{"unknown token", "nope", http.StatusUnauthorized, string(ledger.CodeUnauthorized)},
		{"empty token", "", http.StatusUnauthorized, string(ledger.CodeUnauthorized)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, srv)
			resp, code := b.signIn(tc.token)
			if resp.StatusCode != tc.status || code != tc.code {
				t.Fatalf("got %d %s, want %d %s", resp.StatusCode, code, tc.status, tc.code)
			}
			if len(resp.Cookies()) != 0 {
				t.Fatalf("a refused sign-in set a cookie: %v", resp.Cookies())
			}
			if _, code := b.do("GET", "/console/api/v1/approvals", nil, nil, nil); code != console.CodeSignInRequired {
				t.Fatalf("after a refused sign-in the API answered %q", code)
			}
		})
	}
	t.Run("admin token", func(t *testing.T) {
		b := newBrowser(t, srv)
		resp, code := b.signIn("admin-tok")
		if code != "" {
			t.Fatalf("sign-in refused: %s", code)
		}
		ck := resp.Cookies()
		if len(ck) != 1 {
			t.Fatalf("cookies: %v", ck)
		}
		c := ck[0]
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge <= 0 || c.MaxAge > int(console.DefaultSessionTTL.Seconds()) {
			t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, a Max-Age within the TTL, not Secure over plain HTTP", c)
		}
		if strings.Contains(c.Value, "admin-tok") || b.csrf == "" {
			t.Fatalf("cookie %q, csrf %q", c.Value, b.csrf)
		}
		var v sessionView
		b.do("GET", "/console/session", nil, nil, &v)
		if !v.SignedIn || v.Name != "alice" || v.CSRF != b.csrf || !v.CanDecide || v.Mode != "sign_in" {
			t.Fatalf("session: %+v", v)
		}
		var list struct{ Approvals []ledger.Approval }
		if _, code := b.do("GET", "/console/api/v1/approvals?state=pending", nil, nil, &list); code != "" {
			t.Fatalf("approvals: %s", code)
		}
		if code := b.post("/console/session/end", map[string]any{}, nil); code != "" {
			t.Fatalf("sign-out: %s", code)
		}
		if _, code := b.do("GET", "/console/api/v1/approvals", nil, nil, nil); code != console.CodeSignInRequired {
			t.Fatalf("after sign-out the API answered %q", code)
		}
	})
}

func TestSecureCookieOverTLS(t *testing.T) {
	eng := newEngine(t)
	api := admin.Handler(eng, &admin.Options{Admins: admins})
	srv := httptest.NewTLSServer(console.Handler(api, eng, &console.Options{Admins: admins}))
	defer srv.Close()
	b := newBrowser(t, srv)
	b.c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	resp, code := b.signIn("admin-tok")
	if code != "" || len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure {
		t.Fatalf("over TLS: %s %v, want one Secure cookie", code, resp.Cookies())
	}
}

func TestSessionExpires(t *testing.T) {
	eng := newEngine(t)
	now := time.Now()
	srv := serve(t, eng, console.Options{Admins: admins, SessionTTL: time.Hour, Now: func() time.Time { return now }})
	b := newBrowser(t, srv)
	if _, code := b.signIn("admin-tok"); code != "" {
		t.Fatal(code)
	}
	now = now.Add(59 * time.Minute)
	if _, code := b.do("GET", "/console/api/v1/budgets", nil, nil, nil); code != "" {
		t.Fatalf("within the TTL: %s", code)
	}
	now = now.Add(2 * time.Minute)
	if _, code := b.do("GET", "/console/api/v1/budgets", nil, nil, nil); code != console.CodeSignInRequired {
		t.Fatalf("past the TTL: %q, want %s", code, console.CodeSignInRequired)
	}
}

// TestDecideThroughTheConsole: every state change needs the session's CSRF
// token; with it, the admin API decides, recording the admin's name.
func TestDecideThroughTheConsole(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Admins: admins, Agents: agents})
	b := newBrowser(t, srv)
	if _, code := b.signIn("admin-tok"); code != "" {
		t.Fatal(code)
	}
	ap := pendingApproval(t, eng, "p1")
	path := "/console/api/v1/approvals/" + ap.ApprovalID + "/approve"
	for _, tc := range []struct {
		name   string
		header map[string]string
		code   string
	}{
		{"no token", nil, console.CodeCSRFRequired},
		{"another token", map[string]string{"X-Ratchet-CSRF": "x" + b.csrf}, console.CodeCSRFInvalid},
		{"an admin bearer token instead", map[string]string{"Authorization": "Bearer admin-tok"}, console.CodeCSRFRequired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, code := b.do("POST", path, map[string]string{"note": "ok"}, tc.header, nil)
			if resp.StatusCode != http.StatusForbidden || code != tc.code {
				t.Fatalf("got %d %q, want 403 %s", resp.StatusCode, code, tc.code)
			}
		})
	}
	if list, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalPending); len(list) != 1 {
		t.Fatalf("a refused request decided: %+v", list)
	}
	var got ledger.Approval
	if code := b.post(path, map[string]string{"note": "ok for Q4"}, &got); code != "" {
		t.Fatalf("approve: %s", code)
	}
	if got.State != ledger.ApprovalApproved || got.DecidedBy != "admin:alice" || got.Note != "ok for Q4" {
		t.Fatalf("approval: %+v", got)
	}
	res, err := eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge",
		AgentID: "bot", RunID: "run-1", EstimatedCostMicros: i64(5_000_000)})
	if err != nil || res.Decision != ledger.DecisionExecute {
		t.Fatalf("begin after approval: %+v %v", res, err)
	}

	// Resolve an unknown outcome: the next begin is a duplicate.
	if _, err := eng.Report(context.Background(), ledger.ReportRequest{EffectID: res.EffectID, Outcome: ledger.OutcomeUnknown}); err != nil {
		t.Fatal(err)
	}
	var eff ledger.Effect
	if code := b.post("/console/api/v1/effects/"+res.EffectID+"/resolve", map[string]string{"resolution": "succeeded", "note": "seen at the vendor"}, &eff); code != "" {
		t.Fatalf("resolve: %s", code)
	}
	if eff.State != ledger.StateSucceeded || eff.ResolvedBy != "admin:alice" {
		t.Fatalf("resolved: %+v", eff)
	}
}

// TestModes: with no admin tokens the console follows the admin API's
// rule.
func TestModes(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		eng := newEngine(t)
		srv := serve(t, eng, console.Options{})
		b := newBrowser(t, srv)
		var v sessionView
		resp, _ := b.do("GET", "/console/session", nil, nil, &v)
		if v.Mode != "open" || v.SignedIn || !v.CanDecide || v.CSRF != "" || len(resp.Cookies()) != 0 {
			t.Fatalf("GET makes no session: %+v %v", v, resp.Cookies())
		}
		resp, _ = b.do("POST", "/console/session", map[string]string{}, nil, &v)
		if v.Mode != "open" || !v.SignedIn || !v.CanDecide || v.CSRF == "" || len(resp.Cookies()) != 1 {
			t.Fatalf("session: %+v %v", v, resp.Cookies())
		}
		b.csrf = v.CSRF
		var again sessionView
		if b.do("POST", "/console/session", map[string]string{}, nil, &again); again.CSRF != v.CSRF {
			t.Fatalf("a POST with a live session made another: %+v", again)
		}
		if _, code := b.signIn("anything"); code != console.CodeSignInUnavailable {
			t.Fatalf("sign-in: %q", code)
		}
		ap := pendingApproval(t, eng, "p1")
		path := "/console/api/v1/approvals/" + ap.ApprovalID + "/approve"
		if _, code := b.do("POST", path, map[string]string{}, nil, nil); code != console.CodeCSRFRequired {
			t.Fatalf("without CSRF: %q", code)
		}
		if code := b.post(path, map[string]string{}, nil); code != "" {
			t.Fatalf("approve: %s", code)
		}
		if code, _ := webtest.Send(t, "GET", srv.URL+"/approvals", "", map[string]string{"Host": "evil.example"}); code != http.StatusForbidden {
			t.Fatalf("a page by another Host name: %d", code)
		}
	})
}

// TestAgentsWithoutAdminsOpenNothing: with agents configured and no admin
// tokens, the console makes no session and reads nothing, for a local
// process (an agent on the sidecar's loopback leaving its token off), an
// agent's token, or a web page: not the admin API's reads through it and
// not its own (search, history, groups), which read the engine directly.
// The page is served and says what to configure. It used to be
// read-only: a tokenless session read every namespace.
func TestAgentsWithoutAdminsOpenNothing(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Agents: agents})
	ap := pendingApproval(t, eng, "p1")
	b := newBrowser(t, srv)
	var v sessionView
	if _, code := b.do("GET", "/console/session", nil, nil, &v); code != "" {
		t.Fatalf("GET /console/session: %q", code)
	}
	if v.Mode != string(console.ModeAdminRequired) || v.SignedIn || v.CanDecide {
		t.Errorf("session view %+v, want mode %s, not signed in, cannot decide", v, console.ModeAdminRequired)
	}
	for name, body := range map[string]map[string]string{"no token": {}, "an agent's token": {"token": "agent-tok"}} {
		resp, code := b.do("POST", "/console/session", body, nil, nil)
		if resp.StatusCode != http.StatusForbidden || code != console.CodeAdminRequired {
			t.Errorf("a session with %s: %d %q, want 403 %s", name, resp.StatusCode, code, console.CodeAdminRequired)
		}
		if len(resp.Cookies()) != 0 {
			t.Errorf("a session with %s set cookies %v", name, resp.Cookies())
		}
	}
	reads := []string{"/console/api/v1/approvals", "/console/api/v1/effects", "/console/api/v1/budgets", "/console/api/v1/audit",
		"/console/api/search?key=p1", "/console/api/history/" + ap.EffectID, "/console/api/groups"}
	for _, p := range reads {
		for name, h := range map[string]map[string]string{
			"a local process":          nil,
			"an agent's token":         {"Authorization": "Bearer agent-tok"},
			"a page of another site":   {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"},
			"a rebinding page":         {"Host": "evil.example:8788"},
			"a same-origin page (XHR)": {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"},
		} {
			if st, code := webtest.Send(t, "GET", srv.URL+p, "", h); st != http.StatusForbidden {
				t.Errorf("GET %s by %s: %d %s, want 403", p, name, st, code)
			}
		}
	}
	if st, code := webtest.Send(t, "GET", srv.URL+"/approvals", "", nil); st != 200 {
		t.Errorf("the page: %d %s", st, code)
	}
	if list, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalPending); len(list) != 1 {
		t.Errorf("pending approvals: %d, want 1", len(list))
	}
}

// TestGuard: what a hostile page could send to the console's own
// endpoints is refused, as by the admin API.
func TestGuard(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Admins: admins, Agents: agents})
	body := `{"token":"admin-tok"}`
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
		code   string
	}{
		{"cross-site sign-in", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "cross_origin_refused"},
		{"other origin", map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}, http.StatusForbidden, "cross_origin_refused"},
		{"text/plain", map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType, "unsupported_media_type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status, code := webtest.Send(t, "POST", srv.URL+"/console/session", body, tc.header); status != tc.status || code != tc.code {
				t.Fatalf("got %d %q, want %d %s", status, code, tc.status, tc.code)
			}
		})
	}
}

// TestPagesAndPassThrough: the pages are one document with a strict CSP;
// the admin API, the probes and the metrics are untouched.
func TestPagesAndPassThrough(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Admins: admins, Agents: agents})
	for _, p := range []string{"/", "/approvals", "/approvals/apr_x", "/attention", "/effects", "/effects/eff_x", "/budgets", "/groups", "/grants"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		csp := resp.Header.Get("Content-Security-Policy")
		if resp.StatusCode != 200 || !strings.Contains(string(b), `<script src="/assets/app.js" defer>`) ||
			!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") || resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: %d, CSP %q", p, resp.StatusCode, csp)
		}
	}
	for path, ct := range map[string]string{"/assets/app.js": "text/javascript", "/assets/app.css": "text/css", "/assets/favicon.svg": "image/svg+xml"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ct) {
			t.Errorf("GET %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for path, want := range map[string]int{"/assets/nope.js": 404, "/console/nope": 404, "/healthz": 200, "/readyz": 200} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	c := &admin.Client{URL: srv.URL, Token: "admin-tok"}
	if _, err := c.Approvals(context.Background(), "pending"); err != nil {
		t.Fatalf("the admin API behind the console: %v", err)
	}
	// The console's API takes a session, never a bearer token.
	if status, code := webtest.Send(t, "GET", srv.URL+"/console/api/v1/approvals", "", map[string]string{"Authorization": "Bearer admin-tok"}); status != 401 || code != console.CodeSignInRequired {
		t.Fatalf("bearer token on the console's API: %d %q", status, code)
	}
}

// TestReads: the console's own reads: search by key and by effect type,
// an effect's history, and unwinding groups.
func TestReads(t *testing.T) {
	eng := newEngine(t)
	ctx := context.Background()
	srv := serve(t, eng, console.Options{Admins: admins, Namespaces: []string{"default"}})
	b := newBrowser(t, srv)
	if _, code := b.signIn("admin-tok"); code != "" {
		t.Fatal(code)
	}
	begin := func(req ledger.BeginRequest) *ledger.BeginResult {
		t.Helper()
		res, err := eng.Begin(ctx, req)
		if err != nil || res.Decision != ledger.DecisionExecute {
			t.Fatalf("begin %s: %+v %v", req.IdempotencyKey, res, err)
		}
		return res
	}
	report := func(id string, o ledger.Outcome) {
		t.Helper()
		if _, err := eng.Report(ctx, ledger.ReportRequest{EffectID: id, Outcome: o}); err != nil {
			t.Fatal(err)
		}
	}
	odd := `<img src=x onerror=alert(1)>`
	e1 := begin(ledger.BeginRequest{IdempotencyKey: odd, EffectType: "email.send", RunID: "r1"})
	report(e1.EffectID, ledger.OutcomeUnknown)
	e2 := begin(ledger.BeginRequest{IdempotencyKey: "book-hotel", EffectType: "travel.book", GroupKey: "trip",
		Compensation: &ledger.Compensation{EffectType: "travel.cancel", Description: "cancel the hotel"}})
	report(e2.EffectID, ledger.OutcomeSucceeded)
	e3 := begin(ledger.BeginRequest{IdempotencyKey: "send-mail", EffectType: "email.send", GroupKey: "trip"})
	report(e3.EffectID, ledger.OutcomeSucceeded)
	if _, err := eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip", Reason: "user cancelled"}); err != nil {
		t.Fatal(err)
	}

	type found struct {
		Effects []ledger.Effect `json:"effects"`
	}
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"by key", "key=" + strings.ReplaceAll(odd, " ", "+"), []string{e1.EffectID}},
		{"by effect id", "key=" + e2.EffectID, []string{e2.EffectID}},
		{"by type glob", "effect_type=travel.*", []string{e2.EffectID}},
		{"by type and state", "effect_type=email.send&state=succeeded", []string{e3.EffectID}},
		{"by run", "run_id=r1", []string{e1.EffectID}},
		{"by group", "group_key=trip", []string{e2.EffectID, e3.EffectID}},
		{"none", "key=nope", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f found
			if _, code := b.do("GET", "/console/api/search?"+tc.query, nil, nil, &f); code != "" {
				t.Fatal(code)
			}
			var got []string
			for _, e := range f.Effects {
				got = append(got, e.EffectID)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}

	var h struct {
		Effect ledger.Effect  `json:"effect"`
		Events []ledger.Event `json:"events"`
	}
	if _, code := b.do("GET", "/console/api/history/"+e1.EffectID, nil, nil, &h); code != "" {
		t.Fatal(code)
	}
	var types []string
	for _, ev := range h.Events {
		types = append(types, ev.Type)
	}
	if h.Effect.IdempotencyKey != odd || len(types) < 2 || types[0] != ledger.EventEffectBegun {
		t.Fatalf("history: %+v %v", h.Effect, types)
	}

	type groups struct {
		Groups []struct {
			GroupKey      string          `json:"group_key"`
			State         string          `json:"state"`
			Reason        string          `json:"reason"`
			Compensations []ledger.Effect `json:"compensations"`
			Permanent     []ledger.Effect `json:"permanent"`
		} `json:"groups"`
	}
	for _, q := range []string{"", "?namespace=default&group_key=trip"} {
		var g groups
		if _, code := b.do("GET", "/console/api/groups"+q, nil, nil, &g); code != "" {
			t.Fatal(code)
		}
		if len(g.Groups) != 1 || g.Groups[0].GroupKey != "trip" || g.Groups[0].State != ledger.GroupUnwinding ||
			g.Groups[0].Reason != "user cancelled" || len(g.Groups[0].Compensations) != 1 ||
			g.Groups[0].Compensations[0].EffectID != e2.EffectID || g.Groups[0].Compensations[0].Compensation.Payload != nil ||
			len(g.Groups[0].Permanent) != 1 {
			t.Fatalf("groups%s: %+v", q, g)
		}
	}
	if status, code := webtest.Send(t, "GET", srv.URL+"/console/api/groups?group_key=nope", "", nil); status != 401 || code != console.CodeSignInRequired {
		t.Fatalf("groups without a session: %d %q", status, code)
	}
}

// TestAssetsAreSelfContained: nothing is loaded from elsewhere, and the
// script never turns text into markup.
func TestAssetsAreSelfContained(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{})
	for _, path := range []string{"/", "/assets/app.js", "/assets/app.css", "/assets/favicon.svg"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body := string(b)
		body = strings.ReplaceAll(body, `xmlns="http://www.w3.org/2000/svg"`, "") // a name, not a fetch
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "url(", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
			if strings.Contains(body, bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
	}
}

// sendTo serves one request in process, from remote (the peer's address),
// and returns the recorder.
func sendTo(h http.Handler, method, url, remote, body string, header map[string]string, cookies []*http.Cookie) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, url, strings.NewReader(body))
	req.RemoteAddr = remote
	for k, v := range header {
		req.Header.Set(k, v)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestWithoutAdminsOnlyLoopbackPeersAreServed: without admins (open, or
// closed with agents) the console trusts only this machine, so a peer beyond loopback (a
// port-forward bound to 0.0.0.0, ssh -L with GatewayPorts) that sends
// Host: 127.0.0.1 gets nothing: no session, no approval. A port-forward
// connects from loopback and is served.
func TestWithoutAdminsOnlyLoopbackPeersAreServed(t *testing.T) {
	for _, opts := range []console.Options{{}, {Agents: agents}} {
		eng := newEngine(t)
		h := console.Handler(admin.Handler(eng, &admin.Options{Agents: opts.Agents}), eng, &opts)
		ap := pendingApproval(t, eng, "p1")
		json := map[string]string{"Content-Type": "application/json"}
		for _, remote := range []string{"203.0.113.9:40000", "[2001:db8::7]:40000"} {
			rec := sendTo(h, "POST", "http://127.0.0.1:8788/console/session", remote, `{}`, json, nil)
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), console.CodePeerNotAllowed) || len(rec.Result().Cookies()) != 0 {
				t.Errorf("%d agents: a session for %s: %d %s", len(opts.Agents), remote, rec.Code, rec.Body)
			}
			for _, p := range []string{"/", "/console/session", "/console/api/v1/approvals", "/v1/approvals"} {
				if rec := sendTo(h, "GET", "http://127.0.0.1:8788"+p, remote, "", nil, nil); rec.Code != http.StatusForbidden {
					t.Errorf("%d agents: GET %s from %s: %d", len(opts.Agents), p, remote, rec.Code)
				}
			}
		}
		// From loopback (a port-forward), the same requests pass the
		// peer check: open mode serves them, and with agents the console
		// is closed (TestAgentsWithoutAdminsOpenNothing).
		rec := sendTo(h, "POST", "http://127.0.0.1:8788/console/session", "127.0.0.1:40000", `{}`, json, nil)
		if len(opts.Agents) > 0 {
			if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), console.CodeAdminRequired) {
				t.Errorf("with agents, a session from loopback: %d %s, want 403 %s", rec.Code, rec.Body, console.CodeAdminRequired)
			}
			continue
		}
		var v sessionView
		if err := jsonUnmarshal(rec.Body.String(), &v); err != nil || rec.Code != 200 || !v.SignedIn {
			t.Fatalf("from loopback: %d %s", rec.Code, rec.Body)
		}
		rec = sendTo(h, "POST", "http://127.0.0.1:8788/console/api/v1/approvals/"+ap.ApprovalID+"/approve", "[::1]:40000", `{"note":"local"}`,
			map[string]string{"Content-Type": "application/json", "X-Ratchet-CSRF": v.CSRF}, rec.Result().Cookies())
		if rec.Code != 200 {
			t.Errorf("approve from loopback: %d %s, want 200", rec.Code, rec.Body)
		}
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// TestCrossSiteRequestsCannotEvictTheOperatorsSession: a page elsewhere
// can make the browser GET anything (an <img>), but a GET never makes a
// session and the console refuses what another site's page sends; and
// sessions made and thrown away by a local script push out each other,
// not the operator's, which is in use.
func TestCrossSiteRequestsCannotEvictTheOperatorsSession(t *testing.T) {
	for _, opts := range []console.Options{{}} { // with agents and no admins there are no sessions
		eng := newEngine(t)
		srv := serve(t, eng, opts)
		b := newBrowser(t, srv)
		v := b.open()
		if _, code := b.do("GET", "/console/api/v1/approvals", nil, nil, nil); code != "" { // the page reads at once
			t.Fatal(code)
		}
		img := map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
		for range 1000 {
			req, _ := http.NewRequest("GET", srv.URL+"/console/session", nil)
			for k, x := range img {
				req.Header.Set(k, x)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
				t.Fatalf("mode %s: a cross-site <img> of /console/session: %d %v", v.Mode, resp.StatusCode, resp.Cookies())
			}
		}
		// A local script makes sessions and never uses them.
		for range 1100 {
			if st, code := webtest.Send(t, "POST", srv.URL+"/console/session", `{}`, map[string]string{"Content-Type": "application/json"}); st != 200 {
				t.Fatalf("mode %s: POST /console/session: %d %s", v.Mode, st, code)
			}
		}
		if _, code := b.do("GET", "/console/api/v1/approvals", nil, nil, nil); code != "" {
			t.Errorf("mode %s: after the flood the operator's session is gone: %q", v.Mode, code)
		}
	}
	// Following a link from elsewhere (a notification) to a page is a
	// top-level navigation, and is served; the same page as an image is not.
	srv := serve(t, newEngine(t), console.Options{Admins: admins})
	nav := map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
	if st, code := webtest.Send(t, "GET", srv.URL+"/approvals/apr_x", "", nav); st != 200 {
		t.Errorf("a link from elsewhere to a page: %d %s", st, code)
	}
	for _, p := range []string{"/console/session", "/console/api/v1/approvals", "/assets/app.js"} {
		if st, code := webtest.Send(t, "GET", srv.URL+p, "", nav); st != 403 || code != console.CodeCrossOriginRefused {
			t.Errorf("a navigation from elsewhere to %s: %d %s", p, st, code)
		}
	}
	for _, site := range []string{"cross-site", "same-site"} {
		if st, code := webtest.Send(t, "GET", srv.URL+"/approvals", "", map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}); st != 403 || code != console.CodeCrossOriginRefused {
			t.Errorf("a %s <img> of a page: %d %s", site, st, code)
		}
	}
}

// TestSignInIsThrottledAndTellsNothing: wrong tokens are answered alike
// (an agent's as an unknown one's), failures are limited per address and
// in all (429 with Retry-After), and with admin tokens only the names the
// console is reached by are served (a DNS-rebinding page cannot guess).
func TestSignInIsThrottledAndTellsNothing(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	eng := newEngine(t)
	opts := console.Options{Admins: admins, Agents: agents, Hosts: []string{"ratchet.example.com", "10.0.0.5:8788"}, Now: clock}
	h := console.Handler(admin.Handler(eng, &admin.Options{Admins: admins, Agents: agents}), eng, &opts)
	json := map[string]string{"Content-Type": "application/json"}
	signIn := func(host, remote, token string) *httptest.ResponseRecorder {
		return sendTo(h, "POST", "http://"+host+"/console/session", remote, `{"token":"`+token+`"}`, json, nil)
	}

	// Agent and unknown tokens: the same answer.
	agent, unknown := signIn("127.0.0.1:8788", "127.0.0.1:1", "agent-tok"), signIn("127.0.0.1:8788", "127.0.0.1:2", "nope")
	if agent.Code != http.StatusUnauthorized || agent.Code != unknown.Code || agent.Body.String() != unknown.Body.String() ||
		!strings.Contains(agent.Body.String(), console.MsgNotAnAdminToken) {
		t.Errorf("agent token: %d %s; unknown token: %d %s", agent.Code, agent.Body, unknown.Code, unknown.Body)
	}

	// Hosts: loopback names and the configured ones only.
	for host, want := range map[string]int{"rebind.evil.example:8788": 403, "10.0.0.5:9999": 403, "127.0.0.1.nip.io": 403,
		"localhost:8788": 200, "[::1]:8788": 200, "RATCHET.example.com": 200, "ratchet.example.com:443": 200, "10.0.0.5:8788": 200} {
		rec := sendTo(h, "GET", "http://"+host+"/console/session", "127.0.0.1:3", "", nil, nil)
		if rec.Code != want || (want == 403 && !strings.Contains(rec.Body.String(), console.CodeHostNotAllowed)) {
			t.Errorf("Host %s: %d %s, want %d", host, rec.Code, rec.Body, want)
		}
	}
	if rec := signIn("rebind.evil.example:8788", "127.0.0.1:4", "admin-tok"); rec.Code != 403 {
		t.Errorf("sign-in under a rebinding name: %d %s", rec.Code, rec.Body)
	}

	// One address: a few tries, then 429 until the back-off has passed,
	// even for the right token.
	statuses := map[int]int{}
	for i := range 300 {
		statuses[signIn("127.0.0.1:8788", "127.0.0.9:1", fmt.Sprintf("guess-%d", i)).Code]++
	}
	if statuses[http.StatusUnauthorized] > 5 || statuses[http.StatusTooManyRequests] < 295 {
		t.Errorf("300 wrong tokens from one address: %v", statuses)
	}
	rec := signIn("127.0.0.1:8788", "127.0.0.9:2", "admin-tok")
	if ra, _ := strconv.Atoi(rec.Header().Get("Retry-After")); rec.Code != http.StatusTooManyRequests || ra < 1 ||
		!strings.Contains(rec.Body.String(), console.CodeTooManyAttempts) {
		t.Errorf("throttled, the right token: %d %s (Retry-After %q)", rec.Code, rec.Body, rec.Header().Get("Retry-After"))
	}
	now = now.Add(10 * time.Second)
	if rec := signIn("127.0.0.1:8788", "127.0.0.9:3", "admin-tok"); rec.Code != 200 || len(rec.Result().Cookies()) != 1 {
		t.Errorf("after the back-off: %d %s", rec.Code, rec.Body)
	}

	// Many addresses: a limit for all of them together.
	now = now.Add(time.Minute)
	statuses = map[int]int{}
	for i := range 100 {
		statuses[signIn("127.0.0.1:8788", fmt.Sprintf("198.51.100.%d:1", i), "nope").Code]++
	}
	if statuses[http.StatusUnauthorized] > 25 || statuses[http.StatusTooManyRequests] < 75 {
		t.Errorf("100 wrong tokens from 100 addresses: %v", statuses)
	}
}

// TestCookieTossedByAnotherPortDoesNotLockOut: a page on another port of
// the same host can set a ratchet_console cookie with a longer Path
// (cookies ignore ports), which the browser sends first: the console
// tries every cookie of its name.
func TestCookieTossedByAnotherPortDoesNotLockOut(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Admins: admins})
	b := newBrowser(t, srv)
	resp, code := b.signIn("admin-tok")
	if code != "" {
		t.Fatal(code)
	}
	real := resp.Cookies()[0].Value
	st, code := webtest.Send(t, "GET", srv.URL+"/console/api/v1/approvals", "",
		map[string]string{"Cookie": "ratchet_console=tossed-by-127.0.0.1:3000; ratchet_console=" + real})
	if st != 200 {
		t.Errorf("with a tossed Path=/console cookie first and the real one second: %d %s", st, code)
	}
}

// TestSecureCookieBehindATLSProxy: Options.SecureCookie (console.
// secure_cookie) marks the cookie Secure where TLS ends at a proxy in
// front; X-Forwarded-Proto alone, which anyone can send, does not.
func TestSecureCookieBehindATLSProxy(t *testing.T) {
	eng := newEngine(t)
	for secure, want := range map[bool]bool{false: false, true: true} {
		srv := serve(t, eng, console.Options{Admins: admins, SecureCookie: secure})
		b := newBrowser(t, srv)
		resp, _ := b.do("POST", "/console/session", map[string]string{"token": "admin-tok"}, map[string]string{"X-Forwarded-Proto": "https"}, nil)
		if c := resp.Cookies(); len(c) != 1 || c[0].Secure != want {
			t.Errorf("SecureCookie %v, X-Forwarded-Proto: https: cookie %v, want Secure %v", secure, c, want)
		}
	}
}

// TestClosedConsoleCannotBeBypassed: with agents and no admins, nothing
// changes, not through other paths, methods, encodings, a session cookie
// or CSRF token made up, or an agent's token.
func TestClosedConsoleCannotBeBypassed(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Agents: agents})
	b := newBrowser(t, srv)
	b.csrf = "made-up"
	u, _ := url.Parse(srv.URL)
	b.c.Jar.SetCookies(u, []*http.Cookie{{Name: "ratchet_console", Value: "made-up"}})
	ap := pendingApproval(t, eng, "p1")
	id := ap.ApprovalID
	paths := []string{
		"/console/api/v1/approvals/" + id + "/approve",
		"/console/api/v1/approvals/" + id + "%2Fapprove",
		"/console/api/v1/approvals/x/../" + id + "/approve",
		"/console/api/v1/grants",
	}
	for _, p := range paths {
		for _, m := range []string{"POST", "PUT", "PATCH", "DELETE", "GET", "HEAD"} {
			hdr := map[string]string{"X-Ratchet-CSRF": b.csrf, "X-HTTP-Method-Override": "POST", "Authorization": "Bearer agent-tok"}
			req, _ := http.NewRequest(m, srv.URL+p, strings.NewReader(`{"note":"x","namespace":"default","effect_type":"payment.*","agent_id":"bot","ttl":"1h","max_effects":5}`))
			req.Header.Set("Content-Type", "application/json")
			for k, x := range hdr {
				req.Header.Set(k, x)
			}
			resp, err := b.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	list, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalPending)
	grants, _ := eng.ListGrants(context.Background(), "", true)
	if len(list) != 1 || len(grants) != 0 {
		t.Fatalf("the closed console was bypassed: pending %d grants %d", len(list), len(grants))
	}
}

// TestForgedStateChangesAreRefused: another session's CSRF token, method
// overrides, cross-site and same-site pages, foreign origins, simple
// content types; no CORS grant; agent tokens however dressed; framing
// headers everywhere.
func TestForgedStateChangesAreRefused(t *testing.T) {
	eng := newEngine(t)
	srv := serve(t, eng, console.Options{Admins: admins, Agents: agents})
	b, other := newBrowser(t, srv), newBrowser(t, srv)
	b.signIn("admin-tok")
	other.signIn("admin-tok")
	if other.csrf == b.csrf || other.csrf == "" {
		t.Fatal("same csrf")
	}
	ap := pendingApproval(t, eng, "p1")
	path := "/console/api/v1/approvals/" + ap.ApprovalID + "/approve"
	for name, hdr := range map[string]map[string]string{
		"other session's token": {"X-Ratchet-CSRF": other.csrf},
		"override GET":          {"X-HTTP-Method-Override": "GET", "X-Method-Override": "GET"},
		"lower-case header":     {"x-ratchet-csrf": ""},
		"cross-site w/ token":   {"X-Ratchet-CSRF": b.csrf, "Sec-Fetch-Site": "cross-site"},
		"same-site w/ token":    {"X-Ratchet-CSRF": b.csrf, "Sec-Fetch-Site": "same-site"},
		"foreign origin":        {"X-Ratchet-CSRF": b.csrf, "Origin": "http://127.0.0.1:3000"},
		"text/plain w/ token":   {"X-Ratchet-CSRF": b.csrf, "Content-Type": "text/plain"},
		"form w/ token":         {"X-Ratchet-CSRF": b.csrf, "Content-Type": "application/x-www-form-urlencoded"},
	} {
		resp, code := b.do("POST", path, map[string]string{"note": name}, hdr, nil)
		if resp.StatusCode < 400 {
			t.Errorf("%s: %d %s", name, resp.StatusCode, code)
		}
	}
	// GET with a method override never decides.
	b.do("GET", path+"?_method=POST", nil, map[string]string{"X-HTTP-Method-Override": "POST"}, nil)
	if list, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalPending); len(list) != 1 {
		t.Fatalf("decided: %+v", list)
	}
	// CORS: no grant to any origin, on preflight or read.
	for _, m := range []string{"OPTIONS", "GET"} {
		req, _ := http.NewRequest(m, srv.URL+"/console/session", nil)
		req.Header.Set("Origin", "https://evil.example")
		req.Header.Set("Access-Control-Request-Method", "POST")
		resp, err := b.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: CORS headers %v", m, resp.Header)
		}
	}
	// Agent tokens, dressed up.
	for _, tok := range []string{" agent-tok ", "agent-tok\n", "\tagent-tok"} {
		nb := newBrowser(t, srv)
		if resp, code := nb.signIn(tok); code == "" || len(resp.Cookies()) != 0 {
			t.Errorf("agent token %q signed in", tok)
		}
	}
	// Framing headers on every page and on the console's JSON.
	for _, p := range []string{"/", "/approvals/x", "/effects/eff_x", "/grants?x=1", "/console/session", "/console/api/v1/approvals"} {
		resp, _ := b.do("GET", p, nil, nil, nil)
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %v", p, resp.Header)
		}
	}
}

// TestBrowsersHaveTheirOwnClients (the helper): two browsers of one
// server have a client and a cookie jar each.
func TestBrowsersHaveTheirOwnClients(t *testing.T) {
	srv := serve(t, newEngine(t), console.Options{Admins: admins})
	b1, b2 := newBrowser(t, srv), newBrowser(t, srv)
	if b1.c == b2.c || b1.c.Jar == b2.c.Jar || b1.c.Transport == b2.c.Transport {
		t.Fatal("two browsers share a client, a cookie jar or a transport")
	}
	b1.signIn("admin-tok")
	if _, code := b2.do("GET", "/console/api/v1/approvals", nil, nil, nil); code != console.CodeSignInRequired {
		t.Fatalf("the second browser is signed in by the first's sign-in: %q", code)
	}
}

// TestGrantFormFillsOnlyTheScopeFromALink: a link fills in what and whose
// (namespace, effect type, agent, run), never the amount, the count or the
// note, so a crafted link cannot lay out a grant of anything for one
// click; a malformed escape in a deep link is a not-found view, not an
// exception (the browser test sees both in a page).
func TestGrantFormFillsOnlyTheScopeFromALink(t *testing.T) {
	srv := serve(t, newEngine(t), console.Options{})
	resp, err := http.Get(srv.URL + "/assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	js := string(b)
	for _, want := range []string{
		"const GRANT_SCOPE_FROM_LINK = ['namespace', 'effect_type', 'agent_id', 'run_id'];",
		"value: linked(name)",
		"function unescapeSegment(s) {",
	} {
		if !strings.Contains(js, want) {
			t.Errorf("app.js lacks %q", want)
		}
	}
	if n := strings.Count(js, "decodeURIComponent("); n != 1 {
		t.Errorf("decodeURIComponent called %d times, want once (in unescapeSegment)", n)
	}
}
