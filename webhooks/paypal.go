package webhooks

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
)

// PayPal verifies a webhook offline. PayPal's documented check is an API
// call (POST /v1/notifications/verify-webhook-signature), which Ratchet
// does not make: the receiver would need PayPal credentials and a call
// out for every event. Its other scheme needs no call but a certificate:
// PAYPAL-TRANSMISSION-SIG is the base64 SHA256withRSA signature, by the
// certificate at PAYPAL-CERT-URL, of
// "<PAYPAL-TRANSMISSION-ID>|<PAYPAL-TRANSMISSION-TIME>|<webhook id>|<CRC32
// of the raw body, decimal>" (paypal/PayPal-Java-SDK
// rest-api-sdk/src/main/java/com/paypal/base/SSLUtil.java and
// Event.validateReceivedEvent; developer.paypal.com/api/rest/webhooks/rest/
// "Verify the signature"). Ratchet never fetches that URL, which the
// request names (a forged event could name any): the certificate comes
// from a file the operator configures (webhooks.paypal.cert_file), and an
// event signed by another is refused. PayPal rotates it; when events
// start failing with 401, fetch the new one from a genuine event's
// PAYPAL-CERT-URL (an api.paypal.com host), check it, and replace the
// file. The transmission time must be within the tolerance.
//
// The signature covers the body only through its CRC32, which is no
// cryptographic hash: a body can be altered and keep its CRC32. So the
// receiver binds each transmission id it accepts to the SHA-256 of its
// body and refuses the same transmission with another body. The binding
// is durable and shared: kept in the ledger (Store, by default the
// engine the receiver settles with: ledger.Engine.PutSinkRef under the
// sink "webhooks.paypal", purged with the effects' retention), so that a
// restart or another replica does not forget it, and in memory for as
// long as the signed time is within the tolerance. A ledger that cannot
// be read answers 503 (PayPal retries). What is left: an attacker who can
// intercept the genuine delivery and send an altered one first, or at
// the same moment to another replica; use HTTPS to the receiver (your
// ingress), as PayPal requires.
//
// Matching: PayPal's events echo no PayPal-Request-Id. The proxy writes
// the vendor key as the custom_id of the only purchase unit of a POST
// /v2/checkout/orders (proxy/tag.go; custom_id at most 127 characters,
// developer.paypal.com/api/orders/v2/definitions/purchase_unit_request),
// which a capture echoes as resource.custom_id
// (PAYMENT.CAPTURE.COMPLETED) and an order as
// resource.purchase_units[0].custom_id (CHECKOUT.ORDER.APPROVED,
// CHECKOUT.ORDER.COMPLETED). Any of them proves the order exists, so the
// create succeeded. None settles it failed: a denied capture or a voided
// order comes after a create that succeeded, and says nothing of it.
type PayPal struct {
	// WebhookID is the id PayPal gave the webhook (signed with each event).
	WebhookID string
	// Certs are the signing certificates accepted.
	Certs []*x509.Certificate
	// Store keeps the transmission ids accepted, with their bodies'
	// SHA-256, durably (default: the Settler given to New, when it is
	// one, as ledger.Engine is; nil: memory only).
	Store TransmissionStore

	mu   sync.Mutex
	seen map[string]seenTransmission
}

// TransmissionStore is a durable map (ledger.Engine's sink references).
type TransmissionStore interface {
	SinkRef(ctx context.Context, sink, ref string) ([]byte, error)
	PutSinkRef(ctx context.Context, sink, ref string, value []byte) error
}

// transmissionSink names PayPal's transmissions in the TransmissionStore.
const transmissionSink = "webhooks.paypal"

type seenTransmission struct {
	body [32]byte
	at   time.Time
}

// remember records transmission id with body; false when that id was
// accepted before with another body (here, after a restart, or by another
// replica sharing the ledger); an error when the store cannot tell.
func (p *PayPal) remember(ctx context.Context, id string, body []byte, sent time.Time, now time.Time, tolerance time.Duration) (bool, error) {
	sum := sha256.Sum256(body)
	p.mu.Lock()
	if p.seen == nil {
		p.seen = map[string]seenTransmission{}
	}
	for k, s := range p.seen {
		if now.Sub(s.at) > 2*tolerance {
			delete(p.seen, k)
		}
	}
	s, ok := p.seen[id]
	p.mu.Unlock()
	if ok {
		return s.body == sum, nil
	}
	if p.Store != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		kept, err := p.Store.SinkRef(ctx, transmissionSink, id)
		switch {
		case err == nil:
			return bytes.Equal(kept, sum[:]), nil
		case !errors.Is(err, ledger.ErrNotFound):
			return false, err
		}
		if err := p.Store.PutSinkRef(ctx, transmissionSink, id, sum[:]); err != nil {
			return false, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.seen[id]; ok {
		return s.body == sum, nil
	}
	p.seen[id] = seenTransmission{body: sum, at: sent}
	return true, nil
}

var paypalSucceeded = map[string]bool{
	"PAYMENT.CAPTURE.COMPLETED": true,
	"CHECKOUT.ORDER.APPROVED":   true,
	"CHECKOUT.ORDER.COMPLETED":  true,
}

type paypalAmount struct {
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
}

type paypalEvent struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
	Resource  struct {
		ID            string        `json:"id"`
		CustomID      string        `json:"custom_id"`
		Amount        *paypalAmount `json:"amount"`
		Supplementary struct {
			RelatedIDs struct {
				OrderID string `json:"order_id"`
			} `json:"related_ids"`
		} `json:"supplementary_data"`
		PurchaseUnits []struct {
			CustomID string        `json:"custom_id"`
			Amount   *paypalAmount `json:"amount"`
		} `json:"purchase_units"`
	} `json:"resource"`
}

// PayPalSigned is the string PayPal signs for an event (for tests and
// tools).
func PayPalSigned(transmissionID, transmissionTime, webhookID string, body []byte) string {
	return transmissionID + "|" + transmissionTime + "|" + webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
}

func (p *PayPal) read(ctx context.Context, h http.Header, body []byte, now time.Time, tolerance time.Duration) ([]record, error) {
	id, at := h.Get("Paypal-Transmission-Id"), h.Get("Paypal-Transmission-Time")
	sig, err := base64.StdEncoding.DecodeString(h.Get("Paypal-Transmission-Sig"))
	if err != nil || id == "" || at == "" || p.WebhookID == "" || h.Get("Paypal-Auth-Algo") != "SHA256withRSA" {
		return nil, errSignature
	}
	digest := sha256.Sum256([]byte(PayPalSigned(id, at, p.WebhookID, body)))
	ok := false
	for _, c := range p.Certs {
		pub, isRSA := c.PublicKey.(*rsa.PublicKey)
		ok = ok || (isRSA && now.After(c.NotBefore) && now.Before(c.NotAfter) &&
			rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) == nil)
	}
	if !ok {
		return nil, errSignature
	}
	sent, err := time.Parse(time.RFC3339, at)
	if err != nil || now.Sub(sent) > tolerance || sent.Sub(now) > tolerance {
		return nil, errStale
	}
	if len(id) > ledger.MaxIDLen || id != printable(id) {
		return nil, errSignature
	}
	switch fresh, err := p.remember(ctx, id, body, sent, now, tolerance); {
	case err != nil:
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	case !fresh:
		return nil, errSignature
	}
	var ev paypalEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, malformed(err)
	}
	r := ev.Resource
	// The effect is the order's create: its reference is the order's id,
	// which a capture names as its related order.
	rec := record{eventID: ev.ID, eventType: ev.EventType, ref: r.ID}
	if o := r.Supplementary.RelatedIDs.OrderID; o != "" {
		rec.ref = o
	}
	amount, tag := r.Amount, r.CustomID
	if len(r.PurchaseUnits) == 1 && tag == "" {
		amount, tag = r.PurchaseUnits[0].Amount, r.PurchaseUnits[0].CustomID
	}
	if paypalSucceeded[ev.EventType] {
		rec.outcome, rec.shared = ledger.OutcomeSucceeded, []string{tag}
		if amount != nil {
			if m, err := vendors.ParseDecimal(amount.Value, amount.CurrencyCode); err == nil {
				rec.money = &m
			}
		}
	}
	return []record{rec}, nil
}
