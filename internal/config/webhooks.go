package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/vendors/all"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// Webhooks is the webhooks block: where vendors' signed events arrive
// (POST /webhooks/<vendor> on listen) and each vendor's signing secret,
// from a file or an environment variable, never the file itself. A
// secret file may hold several secrets, one a line, any of which
// verifies: add the new one before rolling it at the vendor.
type Webhooks struct {
	// Listen is the address of the receivers' own listener; required
	// when a vendor is configured. Vendors must reach it: expose it
	// through your ingress, with TLS there.
	Listen string `yaml:"listen"`
	// Tolerance is how old a signed timestamp (Stripe, PayPal) may be
	// (default 5m).
	Tolerance Duration       `yaml:"tolerance"`
	Stripe    *StripeWebhook `yaml:"stripe"`
	Square    *SquareWebhook `yaml:"square"`
	Adyen     *AdyenWebhook  `yaml:"adyen"`
	Checkout  *WebhookSecret `yaml:"checkout"`
	PayPal    *PayPalWebhook `yaml:"paypal"`
}

// WebhookSecret names where a signing secret is (Stripe's whsec_…,
// Checkout.com's secret key).
type WebhookSecret struct {
	SecretFile string `yaml:"secret_file"`
	SecretEnv  string `yaml:"secret_env"`
}

// StripeWebhook is Stripe's endpoint secret(s) and, optionally, the mode
// its endpoints are in: a whsec_ secret does not say, and with both test
// and live secrets listed, an event of the other mode must settle nothing.
type StripeWebhook struct {
	WebhookSecret `yaml:",inline"`
	// Livemode, when set, ignores verified events of the other mode.
	Livemode *bool `yaml:"livemode"`
}

// SquareWebhook is Square's subscription: its signature key and its URL,
// exactly as the subscription names it (Square signs the URL).
type SquareWebhook struct {
	SignatureKeyFile string `yaml:"signature_key_file"`
	SignatureKeyEnv  string `yaml:"signature_key_env"`
	NotificationURL  string `yaml:"notification_url"`
}

// AdyenWebhook is Adyen's webhook: its HMAC key (hex, as Adyen shows it)
// and, optionally, its Basic authentication, without which the proxy's
// metadata tag is not trusted (webhooks/adyen.go).
type AdyenWebhook struct {
	HMACKeyFile       string `yaml:"hmac_key_file"`
	HMACKeyEnv        string `yaml:"hmac_key_env"`
	BasicUser         string `yaml:"basic_user"`
	BasicPasswordFile string `yaml:"basic_password_file"`
	BasicPasswordEnv  string `yaml:"basic_password_env"`
}

// PayPalWebhook is PayPal's webhook: its id and the certificate PayPal
// signs events with, in a PEM file (webhooks/paypal.go says why a file).
type PayPalWebhook struct {
	WebhookID string `yaml:"webhook_id"`
	CertFile  string `yaml:"cert_file"`
}

// Any reports whether a vendor is configured.
func (w *Webhooks) Any() bool {
	return w.Stripe != nil || w.Square != nil || w.Adyen != nil || w.Checkout != nil || w.PayPal != nil
}

// Recovery is the recovery block: same-key recovery of proxied effects
// whose outcome is unknown (package recovery). Off unless vendors are
// listed: it keeps the proxied requests of those vendors, credentials
// included, sealed until they settle.
type Recovery struct {
	// Vendors opted in: stripe, adyen, checkout, paypal (vendors that
	// enforce keys and publish how long they keep them).
	Vendors []string `yaml:"vendors"`
	// KeyFile holds the 32-byte sealing key (64 hex digits); created if
	// absent. Default <data_dir>/recovery.key.
	KeyFile string `yaml:"key_file"`
	// Interval between passes (default 5s); Delay before a request is
	// first sent again (default 1m).
	Interval Duration `yaml:"interval"`
	Delay    Duration `yaml:"delay"`
}

// RecoveryKeyPath is recovery.key_file, or recovery.key in the data dir.
func (c *Config) RecoveryKeyPath() string {
	if c.Recovery.KeyFile != "" {
		return c.Recovery.KeyFile
	}
	return filepath.Join(c.DataDir, "recovery.key")
}

func (w *Webhooks) fill() {
	w.Tolerance.orDefault(webhooks.DefaultTolerance)
}

func (r *Recovery) fill() {
	r.Interval.orDefault(recovery.DefaultInterval)
	r.Delay.orDefault(recovery.DefaultDelay)
}

func (w *Webhooks) problems() []Problem {
	var probs []Problem
	add := func(p, format string, args ...any) {
		probs = append(probs, Problem{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	oneSecret := func(p, what, file, env string) { secretSource(add, p, what, file, env) }
	if w.Any() && w.Listen == "" {
		add("webhooks.listen", "is required with a vendor: the address vendors' events arrive at (e.g. 127.0.0.1:8790 behind your ingress)")
	}
	if w.Tolerance.Value() <= 0 {
		add("webhooks.tolerance", "%q is not a positive duration (e.g. 5m)", w.Tolerance.String())
	}
	if s := w.Stripe; s != nil {
		oneSecret("webhooks.stripe", "secret", s.SecretFile, s.SecretEnv)
	}
	if s := w.Checkout; s != nil {
		oneSecret("webhooks.checkout", "secret", s.SecretFile, s.SecretEnv)
	}
	if s := w.Square; s != nil {
		oneSecret("webhooks.square", "signature_key", s.SignatureKeyFile, s.SignatureKeyEnv)
		if u, err := url.Parse(s.NotificationURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			add("webhooks.square.notification_url", "%q must be the subscription's URL, exactly as Square has it (Square signs it)", s.NotificationURL)
		}
	}
	if a := w.Adyen; a != nil {
		oneSecret("webhooks.adyen", "hmac_key", a.HMACKeyFile, a.HMACKeyEnv)
		if a.BasicUser != "" {
			oneSecret("webhooks.adyen", "basic_password", a.BasicPasswordFile, a.BasicPasswordEnv)
		} else if a.BasicPasswordFile != "" || a.BasicPasswordEnv != "" {
			add("webhooks.adyen.basic_user", "is required with basic_password_*")
		}
	}
	if p := w.PayPal; p != nil {
		if p.WebhookID == "" {
			add("webhooks.paypal.webhook_id", "is required: the id PayPal gave the webhook (it is signed with every event)")
		}
		if p.CertFile == "" {
			add("webhooks.paypal.cert_file", "is required: PayPal's signing certificate (PEM); Ratchet never fetches it")
		}
	}
	return probs
}

// recoverable are the vendors recovery accepts: those with a window.
func recoverable() []string {
	var out []string
	for _, v := range all.List() {
		if recovery.Window(v.Name()) > 0 {
			out = append(out, v.Name())
		}
	}
	return out
}

func (r *Recovery) problems() []Problem {
	var probs []Problem
	add := func(p, format string, args ...any) {
		probs = append(probs, Problem{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	seen := map[string]bool{}
	for i, v := range r.Vendors {
		p := fmt.Sprintf("recovery.vendors[%d]", i)
		rules, known := all.Lookup(v)
		switch {
		case known && recovery.Window(v) <= 0 && rules.KeyRule().RetentionHours <= 0:
			add(p, "%s cannot be recovered: it publishes no idempotency key retention, so a resend could come after it forgot the key and act twice", v)
		case recovery.Window(v) <= 0:
			add(p, "%q is not a vendor recovery supports (%s)", v, strings.Join(recoverable(), ", "))
		case seen[v]:
			add(p, "%q is listed twice", v)
		}
		seen[v] = true
	}
	if r.Interval.Value() <= 0 {
		add("recovery.interval", "%q is not a positive duration (e.g. 5s)", r.Interval.String())
	}
	if r.Delay.Value() <= 0 {
		add("recovery.delay", "%q is not a positive duration (e.g. 1m)", r.Delay.String())
	}
	return probs
}

// ReadSecrets reads a secret file (or variable) holding one or more
// secrets, one a line.
func ReadSecrets(file, env string) ([]string, error) {
	v, err := ReadSecret(file, env)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(v, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}
