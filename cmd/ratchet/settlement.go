package main

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// settlement is what settles unknown outcomes without a human while serve
// runs: the vendors' webhook receivers on their own listener
// (webhooks.listen) and same-key recovery of proxied calls (recovery).
// stop ends both before the ledger closes.
type settlement struct {
	// transport is the proxy's Transport: recording when recovery is on,
	// nil (the proxy's default) otherwise.
	transport http.RoundTripper
	server    *http.Server
	addr      string // the webhook listener's
	cancel    context.CancelFunc
	done      chan struct{}
	log       *slog.Logger
}

// settlementObserver counts webhook events and recoveries (metrics).
type settlementObserver interface {
	webhooks.Observer
	recovery.Observer
}

// startSettlement reads the webhook secrets and the recovery key, listens
// for webhooks and starts the recovery loop, as cfg asks; with neither
// configured it starts nothing.
func startSettlement(cfg *config.Config, eng *ledger.Engine, log *slog.Logger, obs settlementObserver) (*settlement, error) {
	s := &settlement{log: log, done: make(chan struct{})}
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

// webhookOptions reads each configured vendor's secrets.
func webhookOptions(cfg *config.Config) (webhooks.Options, error) {
	w := cfg.Webhooks
	opts := webhooks.Options{Tolerance: w.Tolerance.Value()}
	fail := func(vendor string, err error) (webhooks.Options, error) {
		return webhooks.Options{}, fmt.Errorf("webhooks.%s: %w", vendor, err)
	}
	if c := w.Stripe; c != nil {
		secrets, err := config.ReadSecrets(c.SecretFile, c.SecretEnv)
		if err != nil {
			return fail("stripe", err)
		}
		opts.Stripe = &webhooks.Stripe{Secrets: secrets, Livemode: c.Livemode}
	}
	if c := w.Checkout; c != nil {
		secrets, err := config.ReadSecrets(c.SecretFile, c.SecretEnv)
		if err != nil {
			return fail("checkout", err)
		}
		opts.Checkout = &webhooks.Checkout{Secrets: secrets}
	}
	if c := w.Square; c != nil {
		key, err := config.ReadSecret(c.SignatureKeyFile, c.SignatureKeyEnv)
		if err != nil {
			return fail("square", err)
		}
		opts.Square = &webhooks.Square{SignatureKey: key, NotificationURL: c.NotificationURL}
	}
	if c := w.Adyen; c != nil {
		hexKeys, err := config.ReadSecrets(c.HMACKeyFile, c.HMACKeyEnv)
		if err != nil {
			return fail("adyen", err)
		}
		a := &webhooks.Adyen{BasicUser: c.BasicUser}
		for _, h := range hexKeys {
			k, err := hex.DecodeString(h)
			if err != nil || len(k) == 0 {
				return fail("adyen", errors.New("the HMAC key is not hex (copy it as Adyen shows it)"))
			}
			a.HMACKeys = append(a.HMACKeys, k)
		}
		if c.BasicUser != "" {
			if a.BasicPassword, err = config.ReadSecret(c.BasicPasswordFile, c.BasicPasswordEnv); err != nil {
				return fail("adyen", err)
			}
		}
		opts.Adyen = a
	}
	if c := w.PayPal; c != nil {
		b, err := os.ReadFile(c.CertFile)
		if err != nil {
			return fail("paypal", err)
		}
		p := &webhooks.PayPal{WebhookID: strings.TrimSpace(c.WebhookID)}
		for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
			if blk.Type != "CERTIFICATE" {
				continue
			}
			cert, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return fail("paypal", fmt.Errorf("%s: %w", c.CertFile, err))
			}
			p.Certs = append(p.Certs, cert)
		}
		if len(p.Certs) == 0 {
			return fail("paypal", fmt.Errorf("%s holds no PEM certificate", c.CertFile))
		}
		opts.PayPal = p
	}
	return opts, nil
}

// stop ends the webhook listener (events in progress finish) and the
// recovery loop (a resend in progress is settled or left kept), within
// ctx.
func (s *settlement) stop(ctx context.Context) {
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
