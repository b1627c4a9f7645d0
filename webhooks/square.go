package webhooks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Square verifies x-square-hmacsha256-signature: base64 of HMAC-SHA256,
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
// api.json) when the caller left it empty (proxy/tag.go), and
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
type Square struct {
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

// SquareSignature is the x-square-hmacsha256-signature of body sent to
// url (for tests and tools).
func SquareSignature(key, url string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(url))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

func (s *Square) read(_ context.Context, h http.Header, body []byte, _ time.Time, _ time.Duration) ([]record, error) {
	got, err := base64.StdEncoding.DecodeString(h.Get("X-Square-Hmacsha256-Signature"))
	want, _ := base64.StdEncoding.DecodeString(SquareSignature(s.SignatureKey, s.NotificationURL, body))
	if err != nil || s.SignatureKey == "" || !hmac.Equal(got, want) {
		return nil, errSignature
	}
	var ev squareEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, malformed(err)
	}
	rec := record{eventID: ev.EventID, eventType: ev.Type}
	p := ev.Data.Object.Payment
	if p == nil || (ev.Type != "payment.created" && ev.Type != "payment.updated") {
		return []record{rec}, nil
	}
	rec.shared, rec.ref = []string{p.ReferenceID}, p.ID
	switch p.Status {
	case "COMPLETED", "APPROVED":
		rec.outcome = ledger.OutcomeSucceeded
		rec.money = minor(p.AmountMoney.Amount, p.AmountMoney.Currency)
	case "FAILED":
		rec.outcome = ledger.OutcomeFailed
	}
	return []record{rec}, nil
}
