package paypal

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Webhook is PayPal's receiver (vendors.Receiver). It verifies a webhook
// offline. PayPal's documented check is an API
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
// webhooks adapter's: the engine's sink references under the sink
// "webhooks.paypal", purged with the effects' retention), so that a
// restart or another replica does not forget it, and in memory for as
// long as the signed time is within the tolerance. A ledger that cannot
// be read answers 503 (PayPal retries). What is left: an attacker who can
// intercept the genuine delivery and send an altered one first, or at
// the same moment to another replica; use HTTPS to the receiver (your
// ingress), as PayPal requires.
//
// Matching: PayPal's events echo no PayPal-Request-Id. The proxy writes
// the vendor key as the custom_id of the only purchase unit of a POST
// /v2/checkout/orders (Vendor.Tag; custom_id at most 127 characters,
// developer.paypal.com/api/orders/v2/definitions/purchase_unit_request),
// which a capture echoes as resource.custom_id
// (PAYMENT.CAPTURE.COMPLETED) and an order as
// resource.purchase_units[0].custom_id (CHECKOUT.ORDER.APPROVED,
// CHECKOUT.ORDER.COMPLETED). Any of them proves the order exists, so the
// create succeeded. None settles it failed: a denied capture or a voided
// order comes after a create that succeeded, and says nothing of it.
type Webhook struct {
	// WebhookID is the id PayPal gave the webhook (signed with each event).
	WebhookID string
	// Certs are the signing certificates accepted.
	Certs []*x509.Certificate
	// Store keeps the transmission ids accepted, with their bodies'
	// SHA-256, durably (default: the webhooks adapter's, UseStore; nil:
	// memory only).
	Store vendors.WebhookStore

	mu   sync.Mutex
	seen map[string]seenTransmission
}

// UseStore implements vendors.StoreUser: the adapter's store, unless
// Store is set.
func (p *Webhook) UseStore(s vendors.WebhookStore) {
	if p.Store == nil {
		p.Store = s
	}
}

type seenTransmission struct {
	body [32]byte
	at   time.Time
}

// remember records transmission id with body; false when that id was
// accepted before with another body (here, after a restart, or by another
// replica sharing the ledger); an error when the store cannot tell.
func (p *Webhook) remember(ctx context.Context, id string, body []byte, sent time.Time, now time.Time, tolerance time.Duration) (bool, error) {
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
		kept, found, err := p.Store.Get(ctx, id)
		switch {
		case err != nil:
			return false, err
		case found:
			return bytes.Equal(kept, sum[:]), nil
		}
		if err := p.Store.Put(ctx, id, sum[:]); err != nil {
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

var succeeded = map[string]bool{
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

// Signed is the string PayPal signs for an event (for tests and
// tools).
func Signed(transmissionID, transmissionTime, webhookID string, body []byte) string {
	return transmissionID + "|" + transmissionTime + "|" + webhookID + "|" + strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10)
}

// Read implements vendors.Receiver.
func (p *Webhook) Read(ctx context.Context, h http.Header, body []byte, now time.Time, tolerance time.Duration) ([]vendors.Event, error) {
	id, at := h.Get("Paypal-Transmission-Id"), h.Get("Paypal-Transmission-Time")
	sig, err := base64.StdEncoding.DecodeString(h.Get("Paypal-Transmission-Sig"))
	if err != nil || id == "" || at == "" || p.WebhookID == "" || h.Get("Paypal-Auth-Algo") != "SHA256withRSA" {
		return nil, vendors.ErrSignature
	}
	digest := sha256.Sum256([]byte(Signed(id, at, p.WebhookID, body)))
	ok := false
	for _, c := range p.Certs {
		pub, isRSA := c.PublicKey.(*rsa.PublicKey)
		ok = ok || (isRSA && now.After(c.NotBefore) && now.Before(c.NotAfter) &&
			rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) == nil)
	}
	if !ok {
		return nil, vendors.ErrSignature
	}
	sent, err := time.Parse(time.RFC3339, at)
	if err != nil || now.Sub(sent) > tolerance || sent.Sub(now) > tolerance {
		return nil, vendors.ErrStale
	}
	// An id the store cannot keep (longer than the ledger's ids, or not
	// text) is no genuine transmission's.
	if !utf8.ValidString(id) || strings.ContainsFunc(id, unicode.IsControl) {
		return nil, vendors.ErrSignature
	}
	switch fresh, err := p.remember(ctx, id, body, sent, now, tolerance); {
	case errors.Is(err, vendors.ErrUnstorable):
		return nil, vendors.ErrSignature
	case err != nil:
		return nil, fmt.Errorf("%w: %v", vendors.ErrUnavailable, err)
	case !fresh:
		return nil, vendors.ErrSignature
	}
	var ev paypalEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		return nil, vendors.Malformed(err)
	}
	r := ev.Resource
	// The effect is the order's create: its reference is the order's id,
	// which a capture names as its related order.
	rec := vendors.Event{ID: ev.ID, Type: ev.EventType, Ref: r.ID}
	if o := r.Supplementary.RelatedIDs.OrderID; o != "" {
		rec.Ref = o
	}
	amount, tag := r.Amount, r.CustomID
	if len(r.PurchaseUnits) == 1 && tag == "" {
		amount, tag = r.PurchaseUnits[0].Amount, r.PurchaseUnits[0].CustomID
	}
	if succeeded[ev.EventType] {
		rec.Outcome, rec.Shared = vendors.EventSucceeded, []string{tag}
		if amount != nil {
			if m, err := vendors.ParseDecimal(amount.Value, amount.CurrencyCode); err == nil {
				rec.Money = &m
			}
		}
	}
	return []vendors.Event{rec}, nil
}

// WebhookConfig is the webhooks.paypal block: the webhook's id and the
// certificate PayPal signs events with, in a PEM file (Webhook says why
// a file).
type WebhookConfig struct {
	WebhookID string `yaml:"webhook_id"`
	CertFile  string `yaml:"cert_file"`
}

// Check implements vendors.WebhookConfig.
func (c *WebhookConfig) Check(p string, ck vendors.ConfigCheck) {
	if c.WebhookID == "" {
		ck.Problem(p+".webhook_id", "is required: the id PayPal gave the webhook (it is signed with every event)")
	}
	if c.CertFile == "" {
		ck.Problem(p+".cert_file", "is required: PayPal's signing certificate (PEM); Ratchet never fetches it")
	}
}

// Receiver implements vendors.WebhookConfig: the certificate is read
// from its file, which is no secret.
func (c *WebhookConfig) Receiver(vendors.ReadSecret) (vendors.Receiver, error) {
	b, err := os.ReadFile(c.CertFile)
	if err != nil {
		return nil, err
	}
	p := &Webhook{WebhookID: strings.TrimSpace(c.WebhookID)}
	for blk, rest := pem.Decode(b); blk != nil; blk, rest = pem.Decode(rest) {
		if blk.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.CertFile, err)
		}
		p.Certs = append(p.Certs, cert)
	}
	if len(p.Certs) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", c.CertFile)
	}
	return p, nil
}
