package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Webhook is Stripe's receiver (vendors.Receiver). It verifies Stripe-Signature with stripe-go's webhook package:
// "t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">" with the endpoint's
// signing secret (whsec_…), refused when t is older than the tolerance
// (https://docs.stripe.com/webhooks#verify-events; stripe-go
// webhook/client.go validatePayload). Several v1 signatures are accepted
// while a secret is rolled.
//
// Matching: an event caused by an API request names it in
// request.idempotency_key, "The idempotency key transmitted during the
// request" (stripe-go event.go EventRequest; https://docs.stripe.com/api/events/object),
// which is the vendor key the proxy stamped or the agent sent. Events on
// API versions before 2017-05-25 carry request as a bare id: ignored.
// Only types that say how the request went are used; an event with no
// request (automatic, e.g. an asynchronous payment failing later) has no
// key and is ignored.
//
// Mode: a signing secret (whsec_…) does not say whether its endpoint is
// live or test mode, and every event says so (livemode). An operator who
// lists secrets of both kinds lets a test-mode event, which anyone with a
// test key can cause, name a live effect's vendor key; Livemode, when
// set, ignores (200, logged) every event of the other mode.
type Webhook struct {
	// Secrets are the endpoint's signing secrets (whsec_…); any verifies.
	Secrets []string
	// Livemode, when set, is the mode of the endpoint(s) whose secrets
	// these are: events of the other mode settle nothing.
	Livemode *bool
}

var stripeOutcomes = map[string]vendors.EventOutcome{
	"payment_intent.succeeded":                 vendors.EventSucceeded,
	"payment_intent.amount_capturable_updated": vendors.EventSucceeded, // authorised, capture_method=manual
	"payment_intent.canceled":                  vendors.EventSucceeded, // a cancel request did it
	"charge.succeeded":                         vendors.EventSucceeded,
	"refund.created":                           vendors.EventSucceeded,
	"payment_intent.payment_failed":            vendors.EventFailed, // the confirm was declined: Stripe answered 402
	"charge.failed":                            vendors.EventFailed,
}

type stripeEvent struct {
	ID       string          `json:"id"`
	Type     string          `json:"type"`
	Livemode *bool           `json:"livemode"`
	Request  json.RawMessage `json:"request"`
	Data     struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

type stripeObject struct {
	ID             string `json:"id"`
	Object         string `json:"object"`
	Amount         int64  `json:"amount"`
	AmountReceived int64  `json:"amount_received"`
	Currency       string `json:"currency"`
}

// Read implements vendors.Receiver.
func (s *Webhook) Read(_ context.Context, h http.Header, body []byte, _ time.Time, tolerance time.Duration) ([]vendors.Event, error) {
	sig := h.Get("Stripe-Signature")
	var err error
	for _, secret := range s.Secrets {
		if err = webhook.ValidatePayloadWithTolerance(body, sig, secret, tolerance); err == nil {
			break
		}
	}
	switch {
	case errors.Is(err, webhook.ErrTooOld):
		return nil, vendors.ErrStale
	case err != nil || len(s.Secrets) == 0:
		return nil, vendors.ErrSignature
	}
	var ev stripeEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, vendors.Malformed(err)
	}
	if s.Livemode != nil && (ev.Livemode == nil || *ev.Livemode != *s.Livemode) {
		// Another mode's endpoint: ignored, whatever it says.
		return []vendors.Event{{ID: ev.ID, Type: ev.Type + " (other mode)"}}, nil
	}
	var o stripeObject
	json.Unmarshal(ev.Data.Object, &o) // a missing or odd object: no reference, no amount
	rec := vendors.Event{ID: ev.ID, Type: ev.Type, Outcome: stripeOutcomes[ev.Type], Ref: o.ID}
	// The requests that cause payment_intent.* events (create, confirm,
	// capture, cancel) answer with the PaymentIntent, and a refund's
	// create with the Refund: that object is their answer, for replay.
	// A charge.* event's Charge is not the answer of the PaymentIntent
	// request that caused it.
	if o.Object == "payment_intent" || o.Object == "refund" {
		rec.Answer = ev.Data.Object
	}
	var req struct {
		IdempotencyKey string `json:"idempotency_key"`
	}
	if json.Unmarshal(ev.Request, &req) == nil && req.IdempotencyKey != "" {
		rec.Keys = []string{req.IdempotencyKey}
	}
	amount := o.Amount
	if o.AmountReceived > 0 {
		amount = o.AmountReceived
	}
	if ev.Type != "payment_intent.canceled" { // a cancel costs nothing of its own
		rec.Money = vendors.Minor(amount, o.Currency)
	}
	return []vendors.Event{rec}, nil
}

// WebhookConfig is the webhooks.stripe block: the endpoint's secret(s)
// and, optionally, the mode its endpoints are in: a whsec_ secret does
// not say, and with both test and live secrets listed, an event of the
// other mode must settle nothing.
type WebhookConfig struct {
	vendors.WebhookSecret `yaml:",inline"`
	// Livemode, when set, ignores verified events of the other mode.
	Livemode *bool `yaml:"livemode"`
}

// Check implements vendors.WebhookConfig.
func (c *WebhookConfig) Check(p string, ck vendors.ConfigCheck) {
	ck.SecretSource(p, "secret", c.SecretFile, c.SecretEnv)
}

// Receiver implements vendors.WebhookConfig.
func (c *WebhookConfig) Receiver(read vendors.ReadSecret) (vendors.Receiver, error) {
	secrets, err := read.Lines(c.SecretFile, c.SecretEnv)
	if err != nil {
		return nil, err
	}
	return &Webhook{Secrets: secrets, Livemode: c.Livemode}, nil
}
