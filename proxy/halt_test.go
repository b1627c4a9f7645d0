package proxy_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stripe/stripe-go/v79"

	"github.com/ratchet-mcp/ratchet/internal/stripemock"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

// TestAHaltedVendorIsNeverForwardedTo: stripe-go through the reverse
// proxy while an operator halts stripe: the create is refused as a
// readable *stripe.Error (403, no retry) carrying reason halted and the
// note, and never reaches stripe-mock; a read still passes; once the halt
// is lifted the same request executes.
func TestAHaltedVendorIsNeverForwardedTo(t *testing.T) {
	mock := stripemock.Start(t)
	hits := &counter{rt: http.DefaultTransport}
	e := newEnv(t, map[string]string{"stripe": mock}, func(o *proxy.Options) { o.Transport = hits })
	sc := stripeClient(e.url+"/stripe", &http.Client{})
	ctx := context.Background()
	pi, err := sc.PaymentIntents.New(&stripe.PaymentIntentParams{Amount: stripe.Int64(100), Currency: stripe.String("usd")})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := e.eng.Halt(ctx, ledger.HaltRequest{HaltScope: ledger.HaltScope{Vendor: "stripe"}, Note: "stripe incident", CreatedBy: "admin:alice"})
	if err != nil {
		t.Fatal(err)
	}
	before := hits.n.Load()
	params := &stripe.PaymentIntentParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd")}
	params.SetIdempotencyKey("order:halted")
	_, err = sc.PaymentIntents.New(params)
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("a create while halted: %v, want a *stripe.Error", err)
	}
	if se.HTTPStatusCode != 403 {
		t.Errorf("se.HTTPStatusCode != 403: status %d code %q, want 403 ratchet_denied", se.HTTPStatusCode, se.Code)
	} else if se.Code != "ratchet_denied" {
		t.Errorf("se.Code != \"ratchet_denied\": status %d code %q, want 403 ratchet_denied", se.HTTPStatusCode, se.Code)
	}
	if !strings.Contains(se.Msg, "halted") {
		t.Errorf("!strings.Contains(se.Msg, \"halted\"): message %q lacks the reason or the note", se.Msg)
	} else if !strings.Contains(se.Msg, "stripe incident") {
		t.Errorf("!strings.Contains(se.Msg, \"stripe incident\"): message %q lacks the reason or the note", se.Msg)
	}
	if n := hits.n.Load() - before; n != 0 {
		t.Errorf("%d requests reached stripe while halted", n)
	}
	if _, err := sc.PaymentIntents.Get(pi.ID, nil); err != nil {
		t.Errorf("a read while halted: %v", err)
	}
	if _, err := e.eng.Lift(ctx, hl.HaltID, "admin:alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.PaymentIntents.New(params); err != nil {
		t.Errorf("the same create after the lift: %v", err)
	}
}

// TestAHaltStopsStripeGoThroughTheForwardProxy: stripe-go on its default
// URL through forward mode (CONNECT intercepted), halted by vendor and by
// the proxy's old names (effect_type stripe.*, which its calls' operations
// carry): each create is a *stripe.Error naming the halt and reaches
// stripe-mock never; after the lift it executes.
func TestAHaltStopsStripeGoThroughTheForwardProxy(t *testing.T) {
	mock := stripemock.Start(t)
	hits := &counter{rt: http.DefaultTransport}
	e := newEnv(t, map[string]string{"stripe": mock}, func(o *proxy.Options) { o.Transport = hits })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.ca.PEM())
	proxyURL, _ := url.Parse(e.url)
	sc := stripeClient("", &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL), TLSClientConfig: &tls.Config{RootCAs: pool}}})
	ctx := context.Background()
	for _, scope := range []ledger.HaltScope{{Vendor: "stripe"}, {EffectType: "stripe.*"}} {
		t.Run(scope.String(), func(t *testing.T) {
			hl, err := e.eng.Halt(ctx, ledger.HaltRequest{HaltScope: scope, Note: "stripe incident", CreatedBy: "admin:alice"})
			if err != nil {
				t.Fatal(err)
			}
			params := &stripe.PaymentIntentParams{Amount: stripe.Int64(2000), Currency: stripe.String("usd")}
			params.SetIdempotencyKey("fwd-halt:" + scope.String())
			before := hits.n.Load()
			_, err = sc.PaymentIntents.New(params)
			var se *stripe.Error
			if !errors.As(err, &se) {
				t.Fatalf("a create while halted: %v, want a *stripe.Error", err)
			}
			if !strings.Contains(se.Msg, "halted") || !strings.Contains(se.Msg, "stripe incident") {
				t.Errorf("message %q lacks the reason or the note", se.Msg)
			}
			if n := hits.n.Load() - before; n != 0 {
				t.Errorf("%d requests reached stripe while halted", n)
			}
			if _, err := e.eng.Lift(ctx, hl.HaltID, "admin:alice"); err != nil {
				t.Fatal(err)
			}
			if _, err := sc.PaymentIntents.New(params); err != nil {
				t.Errorf("the same create after the lift: %v", err)
			}
		})
	}
}
