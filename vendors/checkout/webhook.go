package checkout

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Webhook is Checkout.com's receiver (vendors.Receiver). It verifies Cko-Signature: hex of HMAC-SHA256 of the raw body,
// keyed by the webhook's secret key
// (https://www.checkout.com/docs/developer-resources/webhooks/manage-webhooks/receive-webhooks,
// "Validate the payload"). Checkout.com signs no timestamp, so nothing
// is stale; a replay settles only what it settled.
//
// Matching: the events echo no idempotency key, but a payment's events
// carry its reference and metadata under data
// (https://www.checkout.com/docs/workflows/webhook-event-types/payment_approved:
// data.reference "ORD-5023-4E89", data.metadata {...}). The proxy writes
// the vendor key as metadata.ratchet_key on POST /payments (Vendor.Tag),
// and an agent that owns its references may use the vendor key as its
// reference: either matches, but the reference is the caller's field
// (it may hold another effect's vendor key), so it settles an effect
// succeeded and never failed; metadata.ratchet_key is Ratchet's own,
// which the proxy refuses to send with any value but the request's
// vendor key (Vendor.Tag). payment_approved (and payment_captured,
// which follows it for the same payment) settle the payment request
// succeeded; payment_declined failed (Checkout.com answers such a request
// 201 with approved false, which vendors/checkout classifies failed
// too). Later events about the payment (voids, refunds, a capture
// declined) are other requests' and are ignored.
type Webhook struct {
	// Secrets are the webhook's secret keys; any verifies.
	Secrets []string
}

var eventOutcomes = map[string]vendors.EventOutcome{
	"payment_approved": vendors.EventSucceeded,
	"payment_captured": vendors.EventSucceeded,
	"payment_declined": vendors.EventFailed,
}

type checkoutEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	Data struct {
		ID        string         `json:"id"`
		Amount    int64          `json:"amount"`
		Currency  string         `json:"currency"`
		Reference string         `json:"reference"`
		Metadata  map[string]any `json:"metadata"`
	} `json:"data"`
}

// Signature is the Cko-Signature of body (for tests and tools).
func Signature(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Read implements vendors.Receiver.
func (c *Webhook) Read(_ context.Context, h http.Header, body []byte, _ time.Time, _ time.Duration) ([]vendors.Event, error) {
	got, err := hex.DecodeString(h.Get("Cko-Signature"))
	ok := false
	for _, s := range c.Secrets {
		want, _ := hex.DecodeString(Signature(s, body))
		ok = ok || (err == nil && hmac.Equal(got, want))
	}
	if !ok {
		return nil, vendors.ErrSignature
	}
	var ev checkoutEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, vendors.Malformed(err)
	}
	tag, _ := ev.Data.Metadata["ratchet_key"].(string)
	rec := vendors.Event{ID: ev.ID, Type: ev.Type, Outcome: eventOutcomes[ev.Type], Ref: ev.Data.ID,
		Keys: []string{tag}, Shared: []string{ev.Data.Reference}}
	if rec.Outcome == vendors.EventSucceeded {
		rec.Money = vendors.Minor(ev.Data.Amount, ev.Data.Currency)
	}
	return []vendors.Event{rec}, nil
}

// WebhookConfig is the webhooks.checkout block: the webhook's secret
// key(s).
type WebhookConfig struct {
	vendors.WebhookSecret `yaml:",inline"`
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
	return &Webhook{Secrets: secrets}, nil
}
