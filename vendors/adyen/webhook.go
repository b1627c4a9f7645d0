package adyen

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/vendors"
)

// Webhook is Adyen's receiver (vendors.Receiver). It verifies the HMAC signature of each item of a standard webhook:
// base64 of HMAC-SHA256, keyed by the hex-decoded HMAC key of the webhook,
// of pspReference:originalReference:merchantAccountCode:merchantReference:
// value:currency:eventCode:success (empty for an absent field), in
// additionalData.hmacSignature
// (https://docs.adyen.com/development-resources/webhooks/secure-webhooks/verify-hmac-signatures;
// Adyen/adyen-node-api-library tools/hmac). One item that does not verify
// refuses the whole request. Adyen signs no timestamp, so nothing is
// stale; a replay settles only what it settled. The answer is
// "[accepted]", which Adyen waits for before it stops retrying.
//
// Matching: Adyen's notifications echo no idempotency key. An
// AUTHORISATION item carries the merchantReference of the payment (the
// caller's reference, required on /payments), and the request's metadata
// in additionalData as "metadata.<key>". The proxy writes the vendor key
// as metadata.ratchet_key (Vendor.Tag; /payments metadata: at most 20
// entries, keys up to 20 and values up to 80 characters). But the HMAC
// covers only the eight fields above, not additionalData: anyone holding
// one genuine signed item could rewrite its metadata to name another
// effect. So the metadata tag is trusted only when the request also
// passed the webhook's HTTP Basic authentication (Adyen's default
// protection, configured on both sides: BasicUser, BasicPassword);
// without it an item matches only by merchantReference, which is signed
// and which an agent that owns its references can set to the vendor key.
// Proxied Adyen payments without Basic authentication settle by same-key
// recovery instead (Adyen keeps keys at least 7 days). merchantReference
// is the caller's field, which it may fill with any value, another
// effect's vendor key included: it settles an effect succeeded, never
// failed (a caller's declined payment must not free another effect's
// key); metadata.ratchet_key is Ratchet's own, which the proxy refuses to
// send with any value but the request's vendor key (Vendor.Tag). That the metadata
// comes back in the AUTHORISATION item is from Adyen's API reference,
// not seen in a stored sample (unconfirmed). AUTHORISATION with success
// "true" settles the payment succeeded, "false" failed (Adyen answered
// the request Refused: vendors/adyen classifies that failed too).
// Modifications (CAPTURE, REFUND, …) are their own requests with their
// own references, ignored.
type Webhook struct {
	// HMACKeys are the webhook's HMAC keys, hex-decoded; any verifies.
	HMACKeys [][]byte
	// BasicUser and BasicPassword, when set, are required of every
	// request (Adyen's webhook "Basic authentication"), and make the
	// unsigned metadata tag trustworthy.
	BasicUser, BasicPassword string
}

var errEmpty = errors.New("no notification items")

type adyenNotification struct {
	NotificationItems []struct {
		Item adyenItem `json:"NotificationRequestItem"`
	} `json:"notificationItems"`
}

type adyenItem struct {
	AdditionalData    map[string]any `json:"additionalData"`
	Amount            adyenAmount    `json:"amount"`
	EventCode         string         `json:"eventCode"`
	MerchantAccount   string         `json:"merchantAccountCode"`
	MerchantReference string         `json:"merchantReference"`
	OriginalReference string         `json:"originalReference"`
	PSPReference      string         `json:"pspReference"`
	Success           string         `json:"success"`
}

type adyenAmount struct {
	Currency string `json:"currency"`
	Value    int64  `json:"value"`
}

// Signature is the hmacSignature of an item with these fields (for
// tests and tools).
func Signature(key []byte, pspReference, originalReference, merchantAccount, merchantReference string,
	value int64, currency, eventCode, success string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(strings.Join([]string{pspReference, originalReference, merchantAccount, merchantReference,
		strconv.FormatInt(value, 10), currency, eventCode, success}, ":")))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Ack implements vendors.Acknowledger: Adyen waits for "[accepted]".
func (*Webhook) Ack() []byte { return []byte("[accepted]") }

// Read implements vendors.Receiver.
func (a *Webhook) Read(_ context.Context, h http.Header, body []byte, _ time.Time, _ time.Duration) ([]vendors.Event, error) {
	authed := false
	if a.BasicUser != "" {
		r := http.Request{Header: h}
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(a.BasicUser)) != 1 ||
			subtle.ConstantTimeCompare([]byte(p), []byte(a.BasicPassword)) != 1 {
			return nil, vendors.ErrSignature
		}
		authed = true
	}
	var n adyenNotification
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, vendors.Malformed(err)
	}
	recs := make([]vendors.Event, 0, len(n.NotificationItems))
	for _, ni := range n.NotificationItems {
		it := ni.Item
		sig, _ := it.AdditionalData["hmacSignature"].(string)
		got, err := base64.StdEncoding.DecodeString(sig)
		ok := false
		for _, k := range a.HMACKeys {
			want, _ := base64.StdEncoding.DecodeString(Signature(k, it.PSPReference, it.OriginalReference,
				it.MerchantAccount, it.MerchantReference, it.Amount.Value, it.Amount.Currency, it.EventCode, it.Success))
			ok = ok || (err == nil && hmac.Equal(got, want))
		}
		if !ok {
			return nil, vendors.ErrSignature
		}
		rec := vendors.Event{ID: it.PSPReference + ":" + it.EventCode + ":" + it.Success, Type: it.EventCode, Ref: it.PSPReference}
		if it.EventCode == "AUTHORISATION" {
			rec.Shared = []string{it.MerchantReference}
			if tag, _ := it.AdditionalData["metadata.ratchet_key"].(string); authed {
				rec.Keys = []string{tag}
			}
			switch it.Success {
			case "true":
				rec.Outcome = vendors.EventSucceeded
				rec.Money = vendors.Minor(it.Amount.Value, it.Amount.Currency)
			case "false":
				rec.Outcome = vendors.EventFailed
			}
		}
		recs = append(recs, rec)
	}
	if len(recs) == 0 {
		return nil, vendors.Malformed(errEmpty)
	}
	return recs, nil
}

// WebhookConfig is the webhooks.adyen block: the webhook's HMAC key (hex,
// as Adyen shows it) and, optionally, its Basic authentication, without
// which the proxy's metadata tag is not trusted (Webhook).
type WebhookConfig struct {
	HMACKeyFile       string `yaml:"hmac_key_file"`
	HMACKeyEnv        string `yaml:"hmac_key_env"`
	BasicUser         string `yaml:"basic_user"`
	BasicPasswordFile string `yaml:"basic_password_file"`
	BasicPasswordEnv  string `yaml:"basic_password_env"`
}

// Check implements vendors.WebhookConfig.
func (c *WebhookConfig) Check(p string, ck vendors.ConfigCheck) {
	ck.SecretSource(p, "hmac_key", c.HMACKeyFile, c.HMACKeyEnv)
	if c.BasicUser != "" {
		ck.SecretSource(p, "basic_password", c.BasicPasswordFile, c.BasicPasswordEnv)
	} else if c.BasicPasswordFile != "" || c.BasicPasswordEnv != "" {
		ck.Problem(p+".basic_user", "is required with basic_password_*")
	}
}

// Receiver implements vendors.WebhookConfig.
func (c *WebhookConfig) Receiver(read vendors.ReadSecret) (vendors.Receiver, error) {
	hexKeys, err := read.Lines(c.HMACKeyFile, c.HMACKeyEnv)
	if err != nil {
		return nil, err
	}
	a := &Webhook{BasicUser: c.BasicUser}
	for _, h := range hexKeys {
		k, err := hex.DecodeString(h)
		if err != nil || len(k) == 0 {
			return nil, errors.New("the HMAC key is not hex (copy it as Adyen shows it)")
		}
		a.HMACKeys = append(a.HMACKeys, k)
	}
	if c.BasicUser != "" {
		if a.BasicPassword, err = read(c.BasicPasswordFile, c.BasicPasswordEnv); err != nil {
			return nil, err
		}
	}
	return a, nil
}
