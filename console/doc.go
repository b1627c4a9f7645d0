// Package console is Ratchet's operator console: web pages on the admin
// listener for the two jobs that need a human (deciding an approval,
// resolving an effect whose outcome is unknown) and for seeing where spend,
// effects and unwinding groups stand. Its pages, script and styles are
// embedded in the binary (go:embed): no CDN, no external fonts, no build
// step, and it works with the network closed.
//
// It is a client of the admin API, not a second one. Every read the admin
// API has and every change (approve, reject, resolve, and whatever the API
// grows, such as grants) goes through the admin handler under
// /console/api/v1/..., with the signed-in admin's token, so the admin API's
// rules (its modes, its refusals, the name recorded as decided_by,
// its logs) are the console's rules. The console reads the engine itself
// only for what the API has no endpoint for: finding an effect by its
// idempotency key or by effect type, an effect's history from the audit log,
// and the groups that are unwinding (Engine.Groups).
//
// Sessions: with auth.admins configured, an operator signs in once with an
// admin token (POST /console/session, a JSON body); the console answers
// with a session cookie that is HttpOnly, SameSite=Strict, Secure when the
// request came over TLS or Options.SecureCookie says TLS ends at a proxy in
// front (X-Forwarded-Proto is not believed), and expires
// (Options.SessionTTL, and when the process restarts: sessions live in
// memory only). The cookie carries a random session id, never the token;
// the token stays in the process's memory for the session's life, to be
// presented to the admin API. Every cookie of the name is tried (a page on
// another port of the host can set one with a longer Path). An agent's
// token is refused like an unknown one (401, the same message: the answer
// tells a guesser nothing), and failed sign-ins are limited per remote
// address and in all (429 with Retry-After). With no admins the console
// follows the admin API's rule: open to whoever connects from loopback
// (the peer, not only the Host header) when no agents are configured
// either, and then the page POSTs /console/session for a session without
// a token, so that CSRF protection still applies; closed when agents are
// (ModeAdminRequired: an agent on the same host must neither approve
// itself nor read other namespaces by leaving its token off), when the
// pages load and say to configure auth.admins, and no session is made and
// nothing is read, the console's own reads of the engine included. A GET never makes
// a session (a page elsewhere can make the browser send one), and when the
// sessions kept are at their bound, one never used since it was made goes
// first.
//
// Web pages elsewhere: every state-changing request must carry the
// session's CSRF token in the X-Ratchet-CSRF header (the page reads it from
// GET /console/session, which a page of another origin cannot read); on
// top of that the cookie is SameSite=Strict, a request another site's page
// (or another port's) sends is refused by its Sec-Fetch-Site header unless
// it is a top-level navigation to a page, cross-origin POSTs are refused
// (http.CrossOriginProtection), a POST must be application/json, and a
// Host that is not loopback is refused (DNS rebinding): without admin
// tokens always, as in the admin API; with them, unless it is one of
// Options.Hosts (listen.admin_hosts and listen.admin's host). Pages are served with a Content-Security-Policy that allows
// only the console's own script and styles (no inline script), frames
// nothing and is framed by nothing.
//
// Escaping: everything an agent or a vendor wrote (keys, run ids, agent
// ids, notes, vendor errors and references) is put in the page as text
// (DOM textContent, never HTML); the CSP is the second line. Payloads and
// dimension values are never shown: they are not stored.
//
// Updates: pages poll their data every second or two while visible (short
// polling: one request, no long-lived stream to hold through proxies).
package console
