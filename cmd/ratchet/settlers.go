package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// settlers are what settle unknown outcomes without a human while serve
// runs: the vendors' webhook receivers on their own listener
// (webhooks.listen) and same-key recovery of proxied calls (recovery).
// stop ends both before the ledger closes.
type settlers struct {
	// transport is the proxy's Transport: recording when recovery is on,
	// nil (the proxy's default) otherwise.
	transport http.RoundTripper
	server    *http.Server
	addr      string // the webhook listener's
	cancel    context.CancelFunc
	done      chan struct{}
	log       *slog.Logger
}

// settlersObserver counts webhook events and recoveries (metrics).
type settlersObserver interface {
	webhooks.Observer
	recovery.Observer
}

// startSettlers reads the webhook secrets and the recovery key, listens
// for webhooks and starts the recovery loop, as cfg asks; with neither
// configured it starts nothing.
func startSettlers(cfg *config.Config, eng *ledger.Engine, log *slog.Logger, obs settlersObserver) (*settlers, error) {
	s := &settlers{log: log, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if vs := cfg.Recovery.Vendors; len(vs) > 0 {
		key, err := recovery.LoadOrCreateKeyFor(cfg.RecoveryKeyPath(), filepath.Join(cfg.DataDir, "recovery"))
		if err != nil {
			cancel()
			return nil, err
		}
		store, err := recovery.OpenStore(filepath.Join(cfg.DataDir, "recovery"), key)
		if err != nil {
			cancel()
			return nil, err
		}
		on := map[string]bool{}
		for _, v := range vs {
			on[v] = true
		}
		s.transport = &recovery.Transport{Base: proxy.NewTransport(), Store: store, Vendors: on, Logger: log}
		r := &recovery.Recoverer{Store: store, Engine: eng, Interval: cfg.Recovery.Interval.Value(), Delay: cfg.Recovery.Delay.Value(),
			Client: &http.Client{Transport: proxy.NewTransport(), Timeout: cfg.Proxy.UpstreamTimeout.Value()}, Logger: log, Observer: obs}
		go func() {
			defer close(s.done)
			r.Run(ctx)
		}()
		log.Warn("same-key recovery is on: proxied requests of these vendors are kept, sealed, until they settle", "vendors", vs,
			"dir", filepath.Join(cfg.DataDir, "recovery"))
	} else {
		close(s.done)
	}
	if !cfg.Webhooks.Any() {
		return s, nil
	}
	opts, err := webhookOptions(cfg)
	if err != nil {
		s.stop(context.Background())
		return nil, err
	}
	opts.Logger, opts.Observer, opts.CurrencyMicros = log, obs, cfg.Proxy.CurrencyMicros
	ln, err := net.Listen("tcp", cfg.Webhooks.Listen)
	if err != nil {
		s.stop(context.Background())
		return nil, fmt.Errorf("listening for webhooks on %s: %w", cfg.Webhooks.Listen, err)
	}
	s.addr = ln.Addr().String()
	// The listener faces the internet (through your ingress) and nobody
	// on it is authenticated until a body is read and verified: every
	// stage is bounded. The handler bounds the body itself
	// (webhooks.DefaultBodyTimeout) and then lifts the read deadline, so
	// a long hold or ledger write is bounded by WriteTimeout alone.
	s.server = &http.Server{Handler: webhooks.New(eng, opts), ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout: 15 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := s.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("webhook listener stopped", "err", err)
		}
	}()
	log.Info("webhooks listening", "url", "http://"+ln.Addr().String()+webhooks.PathPrefix+"<vendor>")
	return s, nil
}

// webhookOptions reads each configured vendor's secrets and builds its
// receiver (vendors.WebhookConfig).
func webhookOptions(cfg *config.Config) (webhooks.Options, error) {
	w := cfg.Webhooks
	opts := webhooks.Options{Tolerance: w.Tolerance.Value(), Receivers: map[string]vendors.Receiver{}}
	for _, r := range w.Receivers() {
		rv, err := r.Config.Receiver(config.ReadSecret)
		if err != nil {
			return webhooks.Options{}, fmt.Errorf("webhooks.%s: %w", r.Vendor, err)
		}
		opts.Receivers[r.Vendor] = rv
	}
	return opts, nil
}

// stop ends the webhook listener (events in progress finish) and the
// recovery loop (a resend in progress is settled or left kept), within
// ctx.
func (s *settlers) stop(ctx context.Context) {
	if s == nil {
		return
	}
	if s.server != nil {
		if err := s.server.Shutdown(ctx); err != nil {
			s.log.Warn("webhook listener shutdown", "err", err)
		}
	}
	s.cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
	}
}
