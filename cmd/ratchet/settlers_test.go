package main

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/metrics"
	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// TestServeWiresWebhooksAndRecovery: the webhooks block starts a listener
// whose receivers verify with the configured secret, and the recovery
// block gives the proxy a recording Transport and creates its key.
func TestServeWiresWebhooksAndRecovery(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "whsec"), []byte("whsec_new\nwhsec_old\n"), 0o600)
	cfg := config.Default()
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.Webhooks.Listen = "127.0.0.1:0"
	cfg.Webhooks.Stripe = &config.StripeWebhook{WebhookSecret: config.WebhookSecret{SecretFile: filepath.Join(dir, "whsec")}}
	cfg.Recovery.Vendors = []string{"stripe"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	m := metrics.New()
	eng, err := openEngine(cfg, log, m)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	s, err := startSettlers(cfg, eng, log, m)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop(context.Background())
	if _, ok := s.transport.(*recovery.Transport); !ok {
		t.Fatalf("the proxy's transport: %T", s.transport)
	}
	// The webhook listener bounds every stage of a request (slowloris).
	if srv := s.server; srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.IdleTimeout <= 0 {
		t.Fatalf("the webhook listener's timeouts: header %v, read %v, write %v, idle %v",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout)
	}
	if fi, err := os.Stat(cfg.RecoveryKeyPath()); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("recovery key: %v %v", fi, err)
	}
	event := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","request":{"id":"req_1","idempotency_key":"0f8fad5b-d9cb-869f-a165-70867728950e"},"data":{"object":{"id":"pi_1"}}}`)
	post := func(secret string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+webhooks.PathPrefix+"stripe", bytes.NewReader(event))
		req.Header.Set("Stripe-Signature", webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: event, Secret: secret, Timestamp: time.Now()}).Header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("whsec_old"); got != http.StatusOK {
		t.Fatalf("signed with the older secret of the file: %d", got)
	}
	if got := post("whsec_forged"); got != http.StatusUnauthorized {
		t.Fatalf("forged: %d", got)
	}
}

// TestWebhookSecretsThatDoNotReadStopServe: a missing secret file or a key
// that is not hex is an error at start, naming the block.
func TestWebhookSecretsThatDoNotReadStopServe(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "adyen"), []byte("not hex\n"), 0o600)
	for name, mod := range map[string]func(*config.Config){
		"missing": func(c *config.Config) {
			c.Webhooks.Stripe = &config.StripeWebhook{WebhookSecret: config.WebhookSecret{SecretFile: filepath.Join(dir, "nope")}}
		},
		"adyen not hex": func(c *config.Config) {
			c.Webhooks.Adyen = &config.AdyenWebhook{HMACKeyFile: filepath.Join(dir, "adyen")}
		},
		"paypal no pem": func(c *config.Config) {
			c.Webhooks.PayPal = &config.PayPalWebhook{WebhookID: "W", CertFile: filepath.Join(dir, "adyen")}
		},
	} {
		cfg := config.Default()
		cfg.Webhooks.Listen = "127.0.0.1:0"
		mod(cfg)
		if _, err := webhookOptions(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
