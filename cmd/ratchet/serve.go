package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/console"
	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/jwtauth"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
	"github.com/ratchet-mcp/ratchet/metrics"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// runServe is "ratchet serve": MCP over streamable HTTP at /mcp on
// listen.mcp; the admin API, /metrics, /healthz and /readyz on
// listen.admin; and the outbound proxy on listen.proxy, until the context
// ends (SIGTERM). Shutdown stops accepting, lets calls in progress finish
// within --shutdown-timeout, then closes the ledger cleanly.
func runServe(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cf commonFlags
	cf.register(fs)
	grace := fs.Duration("shutdown-timeout", 20*time.Second, "how long calls in progress may take to finish on shutdown")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	log, err := cf.logger(stderr)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	agents := agentsOf(cfg)
	if !cfg.HasAgents() {
		if !isLoopback(cfg.Listen.MCP) {
			return fmt.Errorf("no auth.agents are configured, so MCP would be unauthenticated: refusing to listen on non-loopback %s", cfg.Listen.MCP)
		}
		log.Warn("no auth.agents configured: MCP is unauthenticated and served on loopback only", "listen", cfg.Listen.MCP)
	}
	mcpLn, err := net.Listen("tcp", cfg.Listen.MCP)
	if err != nil {
		return fmt.Errorf("listening for MCP on %s: %w", cfg.Listen.MCP, err)
	}
	defer mcpLn.Close()
	adminLn, err := net.Listen("tcp", cfg.Listen.Admin)
	if err != nil {
		return fmt.Errorf("listening for admin on %s: %w", cfg.Listen.Admin, err)
	}
	defer adminLn.Close()
	proxyLn, err := net.Listen("tcp", cfg.Listen.Proxy)
	if err != nil {
		return fmt.Errorf("listening for the proxy on %s: %w", cfg.Listen.Proxy, err)
	}
	defer proxyLn.Close()
	transparentLns, err := listenTransparent(cfg.Listen.Transparent, log)
	if err != nil {
		return err
	}
	for _, ln := range transparentLns {
		defer ln.Close()
	}
	if !isLoopback(cfg.Listen.Proxy) {
		log.Warn("the proxy has no authentication and listens beyond loopback: anyone who reaches it can spend against your budgets", "listen", cfg.Listen.Proxy)
	}
	admins := map[string]string{}
	for _, a := range cfg.Auth.Admins {
		admins[a.TokenSHA256] = a.Name
	}
	if !cfg.HasAdmins() {
		if !isLoopback(cfg.Listen.Admin) {
			return fmt.Errorf("no auth.admins are configured, so the admin API would be unauthenticated: refusing to listen on non-loopback %s", cfg.Listen.Admin)
		}
		if !cfg.HasAgents() {
			log.Warn("no auth.admins configured: the admin API is unauthenticated and served on loopback only", "listen", cfg.Listen.Admin)
		} // with agents, the config's warning below says the API is closed
	}
	for _, w := range cfg.Warnings() {
		log.Warn("config: "+w.Path+": "+w.Message, "line", w.Line)
	}
	m := metrics.New()
	verifier, err := newVerifier(cfg, log, m)
	if err != nil {
		return err
	}
	eng, err := openEngine(cfg, log, m)
	if err != nil {
		return err
	}
	// Until everything has started, a failure closes the ledger here; from
	// then on the shutdown below closes it, after what writes to it.
	started := false
	defer func() {
		if !started {
			eng.Close(context.Background())
		}
	}()
	m.Watch(eng)
	m.WatchOutbox(eng)
	m.WatchHalts(eng)
	traced, flushTraces, err := startTracing(ctx, cfg, eng, log) // trace.go
	if err != nil {
		return err
	}
	defer flushTraces()
	settlers, err := startSettlers(cfg, eng, log, m) // settlers.go: webhooks and same-key recovery
	if err != nil {
		return err
	}
	outbound, err := newProxy(cfg, traced, log, m, settlers.transport)
	if err != nil {
		return err
	}
	notifier, err := startNotify(cfg, eng, log, m)
	if err != nil {
		return err
	}
	started = true

	mcpServer := mcp.New(traced, &mcp.Options{Version: version, Logger: log, Defaults: cfg.LedgerDefaults(), Reserved: reservedAgents(cfg),
		ConsoleURL: cfg.Notify.ConsoleURL, Done: ctx.Done()})
	var calls inflight
	mux := http.NewServeMux()
	httpOpts := &mcp.HTTPOptions{Agents: agents, Logger: log, OAuth: verifier, SessionIdle: cfg.MCP.SessionIdle.Value()}
	if verifier != nil {
		// The protected resource metadata (RFC 9728) at the path the
		// resource's URL gives and at the bare well-known path, which
		// clients that do not insert the path try.
		metaURL, _ := mcp.ResourceMetadataURL(cfg.Auth.OAuth.Resource)
		httpOpts.ResourceMetadataURL = metaURL
		prm := mcp.ProtectedResourceMetadata(cfg.Auth.OAuth.Resource, verifier)
		if u, err := url.Parse(metaURL); err == nil && u.Path != "/.well-known/oauth-protected-resource" {
			mux.Handle(u.Path, prm)
		}
		mux.Handle("/.well-known/oauth-protected-resource", prm)
	}
	mux.Handle("/mcp", calls.track(mcp.Handler(mcpServer, httpOpts)))
	agentTokens := map[string]bool{}
	for sum := range agents {
		agentTokens[sum] = true
	}
	adminHandler := admin.Handler(eng, &admin.Options{Admins: admins, Agents: agentTokens, OAuth: verifier, OAuthAdmins: cfg.Auth.OAuth.AdminsOn(), Namespaces: keyNamespaces(cfg),
		Metrics: m.Handler(), Logger: log, Explainer: eng, Gate: outbound})
	// The operator console's pages at /, in front of the admin API.
	adminHandler = console.Handler(adminHandler, eng, &console.Options{Admins: admins, Agents: agentTokens, OAuth: verifier != nil,
		Namespaces: keyNamespaces(cfg), Hosts: consoleHosts(cfg), SecureCookie: cfg.Console.SecureCookie, Logger: log})
	m.WatchSessions(func() int {
		n := 0
		for range mcpServer.Sessions() {
			n++
		}
		return n
	})
	// An idle keep-alive connection is closed after listen.idle_timeout, so
	// that agents that vanish leave no connections open (MCP sessions
	// expire after mcp.session_idle); both are counted in the metrics.
	servers := []*http.Server{
		{Handler: mux, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: cfg.Listen.IdleTimeout.Value(), ConnState: m.ConnState("mcp")},
		{Handler: adminHandler, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: cfg.Listen.IdleTimeout.Value(), ConnState: m.ConnState("admin")},
		{Handler: outbound, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: cfg.Listen.IdleTimeout.Value(), ConnState: m.ConnState("proxy")},
	}
	errc := make(chan error, len(servers)+len(transparentLns))
	for i, ln := range []net.Listener{mcpLn, adminLn, proxyLn} {
		go func() { errc <- servers[i].Serve(ln) }()
	}
	transparent := outbound.Transparent() // transparent.go
	for _, ln := range transparentLns {
		go func() { errc <- transparent.Serve(ln) }()
	}
	log.Info("ratchet serving", "version", version, "mcp", "http://"+mcpLn.Addr().String()+"/mcp",
		"admin", "http://"+adminLn.Addr().String(), "proxy", "http://"+proxyLn.Addr().String(), "data_dir", cfg.DataDir)

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", *grace)
	case serveErr = <-errc:
	}
	// Stop accepting, let tool calls in progress finish, then close the MCP
	// sessions so their long-lived GET streams end, then the ledger.
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
	defer cancel()
	shut := make(chan error, len(servers)+1)
	for _, s := range servers {
		go func() { shut <- s.Shutdown(sctx) }()
	}
	go func() { shut <- transparent.Shutdown(sctx) }()
	calls.wait(sctx)
	for ss := range mcpServer.Sessions() {
		ss.Close()
	}
	for range len(servers) + 1 {
		if err := <-shut; err != nil {
			log.Warn("http shutdown", "err", err)
		}
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	notifier.stop(cctx) // deliveries in progress are recorded before the ledger closes
	settlers.stop(cctx) // webhooks in progress are recorded before the ledger closes
	if err := eng.Close(cctx); err != nil {
		return fmt.Errorf("closing ledger: %w", err)
	}
	log.Info("ledger closed")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) && !errors.Is(serveErr, net.ErrClosed) {
		return serveErr
	}
	return nil
}

// newProxy builds the outbound proxy from the config.
// rt is its Transport (nil: the proxy's default).
func newProxy(cfg *config.Config, eng proxy.Engine, log *slog.Logger, obs proxy.Observer, rt http.RoundTripper) (*proxy.Proxy, error) {
	ca, err := proxy.LoadOrCreateCA(filepath.Join(cfg.DataDir, "ca"))
	if err != nil {
		return nil, err
	}
	if p := cfg.Proxy.CAExportPath; p != "" {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("exporting the proxy CA: %w", err)
		}
		if err := os.WriteFile(p, ca.PEM(), 0o644); err != nil {
			return nil, fmt.Errorf("exporting the proxy CA: %w", err)
		}
	}
	opts := proxyOptions(cfg)
	opts.CA, opts.Logger, opts.Observer, opts.Transport = ca, log, obs, rt
	return proxy.New(eng, opts)
}

// proxyOptions are the proxy's options from the config, without what
// serving needs (CA, logger, observer, transport): what `ratchet policy
// explain` classifies requests with, as serve does.
func proxyOptions(cfg *config.Config) proxy.Options {
	return proxy.Options{
		Upstreams: cfg.Proxy.Upstreams, Vendors: cfg.Registry(), Namespace: cfg.Proxy.Namespace, AgentID: cfg.Proxy.AgentID, DedupeWindow: cfg.Proxy.DedupeWindow.Value(), DedupeWindows: cfg.Proxy.DedupeWindowsValue(),
		UpstreamTimeout: cfg.Proxy.UpstreamTimeout.Value(), AllowHosts: cfg.Proxy.AllowHosts, InterceptHosts: cfg.Proxy.InterceptHosts,
		MaxBodyBytes: cfg.Proxy.MaxBodyBytes, CurrencyMicros: cfg.Proxy.CurrencyMicros,
	}
}

// keyNamespaces are the namespaces the console and the admin API look an
// idempotency key up in: the agents', the proxy's and the default.
func keyNamespaces(cfg *config.Config) []string {
	out := []string{ledger.DefaultNamespace}
	if !slices.Contains(out, cfg.Proxy.Namespace) {
		out = append(out, cfg.Proxy.Namespace)
	}
	for _, a := range cfg.Auth.Agents {
		if !slices.Contains(out, a.Namespace) {
			out = append(out, a.Namespace)
		}
	}
	return out
}

// consoleHosts are the names the console answers under besides loopback
// ones (with auth.admins): listen.admin_hosts, and listen.admin's host
// unless it is a wildcard.
func consoleHosts(cfg *config.Config) []string {
	out := slices.Clone(cfg.Listen.AdminHosts)
	if host, _, err := net.SplitHostPort(cfg.Listen.Admin); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			out = append(out, host)
		}
	}
	return out
}

// newVerifier is auth.oauth's token verifier, logging and counting its
// decisions; nil without auth.oauth.
func newVerifier(cfg *config.Config, log *slog.Logger, m *metrics.Metrics) (*jwtauth.Verifier, error) {
	if !cfg.Auth.OAuth.On() {
		return nil, nil
	}
	opts := cfg.Auth.OAuth.VerifierOptions()
	opts.Logger, opts.Count = log, m.TokenDecision
	return jwtauth.New(opts)
}

// agentsOf maps the configured agent tokens to identities.
func agentsOf(cfg *config.Config) mcp.Agents {
	agents := mcp.Agents{}
	for _, a := range cfg.Auth.Agents {
		agents[a.TokenSHA256] = mcp.Identity{Namespace: a.Namespace, AgentID: a.AgentID}
	}
	return agents
}

// reservedAgents are the agents a credential fixes: each token's agent_id
// and proxy.agent_id, in their namespaces. No MCP token that fixes no
// agent may act as one (mcp.Options.Reserved).
func reservedAgents(cfg *config.Config) []mcp.Identity {
	out := []mcp.Identity{{Namespace: cfg.Proxy.Namespace, AgentID: cfg.Proxy.AgentID}}
	for _, a := range cfg.Auth.Agents {
		out = append(out, mcp.Identity{Namespace: a.Namespace, AgentID: a.AgentID})
	}
	return out
}

// inflight counts requests in progress other than GETs (which are MCP's
// long-lived event streams), so shutdown can wait for tool calls to finish.
type inflight struct{ n atomic.Int64 }

func (c *inflight) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			c.n.Add(1)
			defer c.n.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}

// wait returns when no tracked request is in progress or ctx ends.
func (c *inflight) wait(ctx context.Context) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for c.n.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readHeaderTimeout bounds how long every listener waits for a request's
// headers, so a client that opens a connection and says nothing holds it
// for no longer.
const readHeaderTimeout = 10 * time.Second
