package square

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Webhook is Square's receiver (vendors.Receiver). It verifies x-square-hmacsha256-signature: base64 of HMAC-SHA256,
// keyed by the subscription's signature key, of the notification URL
// followed by the raw body (https://developer.squareup.com/docs/webhooks/step3validate;
// the URL must be exactly the one the subscription names). Square signs
// no timestamp, so there is nothing to be stale; a replayed event only
// settles again what it settled (Settle is idempotent). The older
// x-square-signature (HMAC-SHA1) is not accepted.
//
// Matching: Square's events echo no idempotency key, so the proxy writes
// the vendor key as the payment's reference_id (CreatePaymentRequest
// reference_id, at most 40 characters: square/connect-api-specification
// api.json) when the caller left it empty (Vendor.Tag), and
// payment.created and payment.updated carry the Payment, reference_id
// included, under data.object.payment
// (https://developer.squareup.com/reference/square/payments-api/webhooks/payment.updated).
// A payment COMPLETED, or APPROVED (authorised, autocomplete false), says
// the create succeeded. FAILED says it was declined (Square answers the
// create with the FAILED payment), but reference_id is the caller's field
// too (a caller may fill it with another effect's vendor key, and the
// proxy keeps what a caller filled), and a Payment carries no idempotency
// key to prove whose it is: a FAILED payment settles nothing (the effect
// settles by hand). PENDING and CANCELED (a later cancel) say nothing
// about the create and are ignored. Refunds echo no
// reference and are not matched.
type Webhook struct {
	SignatureKey string
	// NotificationURL is the subscription's URL, as Square signs it.
	NotificationURL string
}

type squareEvent struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	Data    struct {
		Object struct {
			Payment *struct {
				ID          string `json:"id"`
				Status      string `json:"status"`
				ReferenceID string `json:"reference_id"`
				AmountMoney struct {
					Amount   int64  `json:"amount"`
					Currency string `json:"currency"`
				} `json:"amount_money"`
			} `json:"payment"`
		} `json:"object"`
	} `json:"data"`
}

// Signature is the x-square-hmacsha256-signature of body sent to
// url (for tests and tools).
func Signature(key, url string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(url))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Read implements vendors.Receiver.
func (s *Webhook) Read(_ context.Context, h http.Header, body []byte, _ time.Time, _ time.Duration) ([]vendors.Event, error) {
	got, err := base64.StdEncoding.DecodeString(h.Get("X-Square-Hmacsha256-Signature"))
	want, _ := base64.StdEncoding.DecodeString(Signature(s.SignatureKey, s.NotificationURL, body))
	if err != nil || s.SignatureKey == "" || !hmac.Equal(got, want) {
		return nil, vendors.ErrSignature
	}
	var ev squareEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, vendors.Malformed(err)
	}
	rec := vendors.Event{ID: ev.EventID, Type: ev.Type}
	p := ev.Data.Object.Payment
	if p == nil || (ev.Type != "payment.created" && ev.Type != "payment.updated") {
		return []vendors.Event{rec}, nil
	}
	rec.Shared, rec.Ref = []string{p.ReferenceID}, p.ID
	switch p.Status {
	case "COMPLETED", "APPROVED":
		rec.Outcome = vendors.EventSucceeded
		rec.Money = vendors.Minor(p.AmountMoney.Amount, p.AmountMoney.Currency)
	case "FAILED":
		rec.Outcome = vendors.EventFailed
	}
	return []vendors.Event{rec}, nil
}

// WebhookConfig is the webhooks.square block: the subscription's
// signature key and its URL, exactly as the subscription names it
// (Square signs the URL).
type WebhookConfig struct {
	SignatureKeyFile string `yaml:"signature_key_file"`
	SignatureKeyEnv  string `yaml:"signature_key_env"`
	NotificationURL  string `yaml:"notification_url"`
}

// Check implements vendors.WebhookConfig.
func (c *WebhookConfig) Check(p string, ck vendors.ConfigCheck) {
	ck.SecretSource(p, "signature_key", c.SignatureKeyFile, c.SignatureKeyEnv)
	if u, err := url.Parse(c.NotificationURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		ck.Problem(p+".notification_url", "%q must be the subscription's URL, exactly as Square has it (Square signs it)", c.NotificationURL)
	}
}

// Receiver implements vendors.WebhookConfig.
func (c *WebhookConfig) Receiver(read vendors.ReadSecret) (vendors.Receiver, error) {
	key, err := read(c.SignatureKeyFile, c.SignatureKeyEnv)
	if err != nil {
		return nil, err
	}
	return &Webhook{SignatureKey: key, NotificationURL: c.NotificationURL}, nil
}
