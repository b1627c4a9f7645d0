package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestAWebhooksBlockLoads(t *testing.T) {
	cfg, err := Load("testdata/webhooks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := cfg.Webhooks
	if !w.Any() || w.Listen != "127.0.0.1:8790" || w.Tolerance.Value() != 3*time.Minute || w.Stripe.SecretFile != "/run/secrets/stripe-whsec" ||
		w.Square.NotificationURL != "https://ratchet.example.com/webhooks/square" || w.Adyen.BasicUser != "adyen" ||
		w.Checkout.SecretEnv != "CKO_WEBHOOK_SECRET" || w.PayPal.WebhookID != "1JE4291016473214C" {
		t.Fatalf("webhooks: %+v", w)
	}
	r := cfg.Recovery
	if len(r.Vendors) != 2 || r.Delay.Value() != 30*time.Second || r.Interval.Value() != 5*time.Second ||
		cfg.RecoveryKeyPath() != "data/recovery.key" && cfg.RecoveryKeyPath() != "./data/recovery.key" {
		t.Fatalf("recovery: %+v %s", r, cfg.RecoveryKeyPath())
	}
	if d := Default(); d.Webhooks.Any() || d.Webhooks.Tolerance.Value() != 5*time.Minute || len(d.Recovery.Vendors) != 0 {
		t.Fatalf("defaults: %+v %+v", d.Webhooks, d.Recovery)
	}
}

func TestWebhooksProblemsNameTheLine(t *testing.T) {
	probs := problems(t, "testdata/webhooks_broken.yaml")
	want := []wantProblem{
		{1, "webhooks.listen", "is required with a vendor"},
		{2, "webhooks.tolerance", "not a positive duration"},
		{3, "webhooks.stripe", "both secret_file and secret_env"},
		{12, "webhooks.checkout", "needs secret_file or secret_env"},
		{8, "webhooks.square.notification_url", "Square signs it"},
		{10, "webhooks.adyen.hmac_key_env", "not an environment variable name"},
		{9, "webhooks.adyen.basic_user", "required with basic_password"},
		{13, "webhooks.paypal.webhook_id", "is required"},
		{16, "recovery.vendors[1]", "no idempotency key retention"},
		{16, "recovery.vendors[2]", "not a vendor recovery supports"},
		{16, "recovery.vendors[3]", "listed twice"},
		{17, "recovery.interval", "not a positive duration"},
	}
	wantProblems(t, probs, want)
}

func TestReadSecretsOneALine(t *testing.T) {
	f := t.TempDir() + "/s"
	os.WriteFile(f, []byte("whsec_new\n\n  whsec_old  \n"), 0o600)
	if v, err := ReadSecrets(f, ""); err != nil || len(v) != 2 || v[1] != "whsec_old" {
		t.Fatalf("%q %v", v, err)
	}
}

// TestTheExamplesWebhooksBlockIsValid: the commented webhooks and recovery
// blocks of the example config load as they are once uncommented.
func TestTheExamplesWebhooksBlockIsValid(t *testing.T) {
	b, err := os.ReadFile("../../configs/ratchet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start, end := strings.Index(s, "# webhooks:"), strings.Index(s, "\npolicies:")
	if start < 0 || end < start {
		t.Fatal("no webhooks block in the example")
	}
	var out []string
	for _, l := range strings.Split(s[start:end], "\n") {
		if rest, ok := strings.CutPrefix(l, "# "); ok {
			out = append(out, rest)
		}
	}
	cfg, err := Parse(strings.NewReader(strings.Join(out, "\n")), "example")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Webhooks.PayPal == nil || len(cfg.Recovery.Vendors) != 4 {
		t.Fatalf("%+v %+v", cfg.Webhooks, cfg.Recovery)
	}
}

// TestStripesModeIsConfigured: webhooks.stripe.livemode reaches the
// config (serve passes it to the receiver, which ignores the other mode).
func TestStripesModeIsConfigured(t *testing.T) {
	cfg, err := Parse(strings.NewReader("webhooks:\n  listen: 127.0.0.1:8790\n  stripe:\n    secret_env: STRIPE_WHSEC\n    livemode: true\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Webhooks.Stripe; s == nil || s.Livemode == nil || !*s.Livemode || s.SecretEnv != "STRIPE_WHSEC" {
		t.Fatalf("webhooks.stripe: %+v", s)
	}
}
