package config

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/adyen"
	"github.com/ratchet-mcp/ratchet/vendors/all"
	"github.com/ratchet-mcp/ratchet/vendors/checkout"
	"github.com/ratchet-mcp/ratchet/vendors/paypal"
	"github.com/ratchet-mcp/ratchet/vendors/square"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
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
	Tolerance Duration `yaml:"tolerance"`
	// The vendors' blocks, each its package's type (Receivers lists
	// them): adding a vendor's webhooks adds its field here.
	Stripe   *stripe.WebhookConfig   `yaml:"stripe"`
	Square   *square.WebhookConfig   `yaml:"square"`
	Adyen    *adyen.WebhookConfig    `yaml:"adyen"`
	Checkout *checkout.WebhookConfig `yaml:"checkout"`
	PayPal   *paypal.WebhookConfig   `yaml:"paypal"`
}

// The vendors' blocks are their packages' (vendors.WebhookConfig): each
// checks itself and reads its own secrets. Their names here are the
// config's, kept for the code that builds a config.
type (
	WebhookSecret = vendors.WebhookSecret
	StripeWebhook = stripe.WebhookConfig
	SquareWebhook = square.WebhookConfig
	AdyenWebhook  = adyen.WebhookConfig
	PayPalWebhook = paypal.WebhookConfig
)

// Receivers are the configured vendors' blocks by vendor name (in the
// order their problems have always been reported).
func (w *Webhooks) Receivers() []VendorWebhook {
	var out []VendorWebhook
	add := func(name string, c vendors.WebhookConfig, set bool) {
		if set {
			out = append(out, VendorWebhook{Vendor: name, Config: c})
		}
	}
	add(stripe.Vendor{}.Name(), w.Stripe, w.Stripe != nil)
	add(checkout.Vendor{}.Name(), w.Checkout, w.Checkout != nil)
	add(square.Vendor{}.Name(), w.Square, w.Square != nil)
	add(adyen.Vendor{}.Name(), w.Adyen, w.Adyen != nil)
	add(paypal.Vendor{}.Name(), w.PayPal, w.PayPal != nil)
	return out
}

// VendorWebhook is one vendor's configured block.
type VendorWebhook struct {
	Vendor string
	Config vendors.WebhookConfig
}

// Any reports whether a vendor is configured.
func (w *Webhooks) Any() bool { return len(w.Receivers()) > 0 }

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
	if w.Any() && w.Listen == "" {
		add("webhooks.listen", "is required with a vendor: the address vendors' events arrive at (e.g. 127.0.0.1:8790 behind your ingress)")
	}
	if w.Tolerance.Value() <= 0 {
		add("webhooks.tolerance", "%q is not a positive duration (e.g. 5m)", w.Tolerance.String())
	}
	for _, r := range w.Receivers() {
		r.Config.Check("webhooks."+r.Vendor, configCheck(add))
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

// configCheck is a vendors.ConfigCheck reporting through add.
type configCheck func(p, format string, args ...any)

func (add configCheck) Problem(p, format string, args ...any) { add(p, format, args...) }

func (add configCheck) SecretSource(p, what, file, env string) { secretSource(add, p, what, file, env) }

// ReadSecrets reads a secret file (or variable) holding one or more
// secrets, one a line.
func ReadSecrets(file, env string) ([]string, error) {
	return vendors.ReadSecret(ReadSecret).Lines(file, env)
}
