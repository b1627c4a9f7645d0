package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// SlackInteractivityPath is where a Slack sink's listener takes Slack's
// button clicks (the Request URL of the app's Interactivity settings).
const SlackInteractivityPath = "/slack/interactivity"

// slackAPITimeout bounds one call to Slack's Web API.
const slackAPITimeout = 15 * time.Second

// notifier is serve's notification delivery: the outbox worker and each
// Slack sink's interactivity listener. It runs while serve does; stop ends
// it before the ledger closes.
type notifier struct {
	cancel  context.CancelFunc
	done    chan struct{}
	servers []*http.Server
	log     *slog.Logger
}

// startNotify builds the sinks of cfg.Notify (reading their secrets) and
// starts the worker and the interactivity listeners. With no sinks it
// starts nothing.
func startNotify(cfg *config.Config, eng *ledger.Engine, log *slog.Logger, obs notify.Observer) (*notifier, error) {
	n := &notifier{log: log, done: make(chan struct{})}
	if len(cfg.Notify.Sinks) == 0 {
		close(n.done)
		return n, nil
	}
	sinks := map[string]notify.Sink{}
	var listeners []net.Listener
	fail := func(err error) (*notifier, error) {
		for _, ln := range listeners {
			ln.Close()
		}
		return nil, err
	}
	for _, s := range cfg.Notify.Sinks {
		if sink, ok, err := onCallSink(s, cfg.Notify.ConsoleURL); ok {
			if err != nil {
				return fail(fmt.Errorf("notify sink %s: %w", s.Name, err))
			}
			sinks[s.Name] = sink
			continue
		}
		switch s.Type {
		case "webhook":
			secret, err := config.ReadSecret(s.SecretFile, s.SecretEnv)
			if err != nil {
				return fail(fmt.Errorf("notify sink %s: %w", s.Name, err))
			}
			sinks[s.Name] = &notify.Webhook{URL: s.URL, Secret: []byte(secret)}
		case "slack":
			token, err := config.ReadSecret(s.TokenFile, s.TokenEnv)
			if err != nil {
				return fail(fmt.Errorf("notify sink %s: %w", s.Name, err))
			}
			// A Slack API call that hangs must not hold a delivery (the
			// worker bounds it too) or a click's group lookup.
			opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: slackAPITimeout})}
			if s.APIURL != "" {
				opts = append(opts, slack.OptionAPIURL(strings.TrimSuffix(s.APIURL, "/")+"/"))
			}
			client := slack.New(token, opts...)
			sinks[s.Name] = &notify.Slack{Name: s.Name, Client: client, Channel: s.Channel, Refs: eng}
			if len(s.Deciders) == 0 && len(s.DeciderGroups) == 0 {
				continue
			}
			signing, err := config.ReadSecret(s.SigningSecretFile, s.SigningSecretEnv)
			if err != nil {
				return fail(fmt.Errorf("notify sink %s: %w", s.Name, err))
			}
			deciders := map[string]bool{}
			for _, u := range s.Deciders {
				deciders[u] = true
			}
			ln, err := net.Listen("tcp", s.Listen)
			if err != nil {
				return fail(fmt.Errorf("listening for Slack interactivity (notify sink %s) on %s: %w", s.Name, s.Listen, err))
			}
			listeners = append(listeners, ln)
			mux := http.NewServeMux()
			mux.Handle("POST "+SlackInteractivityPath, &notify.SlackInteractions{Engine: eng, Sink: s.Name, Refs: eng,
				SigningSecret: signing, Deciders: deciders, DeciderGroups: s.DeciderGroups, Client: client, Logger: log})
			// The listener faces the internet: no request, response or idle
			// connection is kept open for long, and headers are bounded.
			n.servers = append(n.servers, &http.Server{Handler: mux,
				ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
				IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10})
			if loopback.Is(s.Listen) {
				log.Info("slack interactivity on loopback: expose it to Slack through your ingress", "sink", s.Name, "listen", ln.Addr().String())
			}
			log.Info("slack interactivity listening", "sink", s.Name, "url", "http://"+ln.Addr().String()+SlackInteractivityPath)
		}
	}
	// A delivery the last run was killed in the middle of is sent again at
	// once (on a shared ledger the claims are other replicas', and kept).
	if n, err := eng.ReleaseOutboxClaims(context.Background()); err != nil {
		return fail(fmt.Errorf("releasing the outbox claims of an earlier run: %w", err))
	} else if n > 0 {
		log.Info("notifications claimed by an earlier run are sent again", "count", n)
	}
	for i, srv := range n.servers {
		go func() {
			if err := srv.Serve(listeners[i]); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("slack interactivity listener stopped", "err", err)
			}
		}()
	}
	host, _ := os.Hostname()
	w := &notify.Worker{Outbox: eng, Sinks: sinks, Name: fmt.Sprintf("%s:%d", host, os.Getpid()),
		MaxAttempts: cfg.Notify.MaxAttempts, MaxBackoff: cfg.Notify.MaxBackoff.Value(), Observer: obs, Logger: log,
		MaxWaiting: cfg.Notify.MaxWaiting, MaxDead: cfg.Notify.MaxDeadLetters}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() {
		defer close(n.done)
		w.Run(ctx)
	}()
	log.Info("notification delivery started", "sinks", len(sinks))
	return n, nil
}

// stop ends the worker (a delivery in progress finishes and is recorded)
// and the interactivity listeners, within ctx.
func (n *notifier) stop(ctx context.Context) {
	if n == nil {
		return
	}
	if n.cancel != nil {
		n.cancel()
	}
	for _, s := range n.servers {
		if err := s.Shutdown(ctx); err != nil {
			n.log.Warn("slack interactivity shutdown", "err", err)
		}
	}
	select {
	case <-n.done:
	case <-ctx.Done():
	}
}

// routeOf is the engine's notification route for cfg; nil when no sink
// is configured.
func routeOf(cfg *config.Config) func(ledger.Event) []string {
	if len(cfg.Notify.Sinks) == 0 {
		return nil
	}
	return notify.Router(cfg.Notify.RouteList())
}
