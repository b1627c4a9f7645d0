package webhooks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Checkout verifies Cko-Signature: hex of HMAC-SHA256 of the raw body,
// keyed by the webhook's secret key
// (https://www.checkout.com/docs/developer-resources/webhooks/manage-webhooks/receive-webhooks,
// "Validate the payload"). Checkout.com signs no timestamp, so nothing
// is stale; a replay settles only what it settled.
//
// Matching: the events echo no idempotency key, but a payment's events
// carry its reference and metadata under data
// (https://www.checkout.com/docs/workflows/webhook-event-types/payment_approved:
// data.reference "ORD-5023-4E89", data.metadata {...}). The proxy writes
// the vendor key as metadata.ratchet_key on POST /payments (proxy/tag.go),
// and an agent that owns its references may use the vendor key as its
// reference: either matches, but the reference is the caller's field
// (it may hold another effect's vendor key), so it settles an effect
// succeeded and never failed; metadata.ratchet_key is Ratchet's own,
// which the proxy refuses to send with any value but the request's
// vendor key (proxy/tag.go). payment_approved (and payment_captured,
// which follows it for the same payment) settle the payment request
// succeeded; payment_declined failed (Checkout.com answers such a request
// 201 with approved false, which vendors/checkout classifies failed
// too). Later events about the payment (voids, refunds, a capture
// declined) are other requests' and are ignored.
type Checkout struct {
	// Secrets are the webhook's secret keys; any verifies.
	Secrets []string
}

var checkoutOutcomes = map[string]ledger.Outcome{
	"payment_approved": ledger.OutcomeSucceeded,
	"payment_captured": ledger.OutcomeSucceeded,
	"payment_declined": ledger.OutcomeFailed,
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

// CheckoutSignature is the Cko-Signature of body (for tests and tools).
func CheckoutSignature(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func (c *Checkout) read(_ context.Context, h http.Header, body []byte, _ time.Time, _ time.Duration) ([]record, error) {
	got, err := hex.DecodeString(h.Get("Cko-Signature"))
	ok := false
	for _, s := range c.Secrets {
		want, _ := hex.DecodeString(CheckoutSignature(s, body))
		ok = ok || (err == nil && hmac.Equal(got, want))
	}
	if !ok {
		return nil, errSignature
	}
	var ev checkoutEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, malformed(err)
	}
	tag, _ := ev.Data.Metadata["ratchet_key"].(string)
	rec := record{eventID: ev.ID, eventType: ev.Type, outcome: checkoutOutcomes[ev.Type], ref: ev.Data.ID,
		keys: []string{tag}, shared: []string{ev.Data.Reference}}
	if rec.outcome == ledger.OutcomeSucceeded {
		rec.money = minor(ev.Data.Amount, ev.Data.Currency)
	}
	return []record{rec}, nil
}
