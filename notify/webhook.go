package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// The webhook's headers (see the package doc for the scheme).
const (
	HeaderEventID   = "Ratchet-Event-Id"
	HeaderEventType = "Ratchet-Event-Type"
	HeaderTimestamp = "Ratchet-Timestamp"
	HeaderSignature = "Ratchet-Signature"
)

// ReplayWindow is how far a webhook's timestamp may be from the receiver's
// clock.
const ReplayWindow = 5 * time.Minute

// Webhook is the generic webhook sink.
type Webhook struct {
	// URL receives a POST per event. Required.
	URL string
	// Secret keys the signature. Required.
	Secret []byte
	// Client sends the requests; nil means a client with a timeout of
	// DefaultTimeout (the worker bounds each delivery too). Redirects are
	// never followed, whatever the client's CheckRedirect: a 3xx is a
	// failed delivery, so that a receiver cannot send the signed event on
	// to another address.
	Client *http.Client
	// Now is the clock of the timestamp; nil means time.Now.
	Now func() time.Time
}

var _ Sink = (*Webhook)(nil)

// Deliver implements Sink.
func (w *Webhook) Deliver(ctx context.Context, en ledger.OutboxEntry) error {
	body, err := json.Marshal(en.Event)
	if err != nil {
		return fmt.Errorf("%w: encoding the event: %v", ErrPermanent, err)
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	ts := strconv.FormatInt(now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPermanent, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ratchet-webhook/1")
	req.Header.Set(HeaderEventID, en.Event.ID)
	req.Header.Set(HeaderEventType, en.Event.Type)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, "v1="+Sign(w.Secret, ts, body))
	c := webhookClient
	if w.Client != nil {
		cc := *w.Client
		cc.CheckRedirect = noRedirects
		c = &cc
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("posting to the webhook: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		return fmt.Errorf("the webhook answered %d, a redirect (to %q), which is not followed: configure the final URL", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("the webhook answered %d", resp.StatusCode)
	}
	return nil
}

// webhookClient is the webhooks' default client.
var webhookClient = &http.Client{Timeout: DefaultTimeout, CheckRedirect: noRedirects}

// noRedirects makes a client return a redirect as the response.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Sign is the hex HMAC-SHA256 of timestamp, ".", body keyed with secret.
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Errors of VerifyWebhook.
var (
	ErrBadSignature = errors.New("the webhook signature does not match")
	ErrStale        = errors.New("the webhook timestamp is outside the replay window")
)

// VerifyWebhook checks a webhook request's signature and timestamp as a
// receiver must: the signature over the timestamp and the body as
// received, and the timestamp within window of now (ReplayWindow when
// zero). Dedupe by the event id too: a request may come more than once.
func VerifyWebhook(secret []byte, h http.Header, body []byte, now time.Time, window time.Duration) error {
	if window <= 0 {
		window = ReplayWindow
	}
	ts := h.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: no valid %s header", ErrBadSignature, HeaderTimestamp)
	}
	sig, ok := strings.CutPrefix(h.Get(HeaderSignature), "v1=")
	if !ok {
		return fmt.Errorf("%w: no v1 %s header", ErrBadSignature, HeaderSignature)
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return ErrBadSignature
	}
	want, _ := hex.DecodeString(Sign(secret, ts, body))
	if !hmac.Equal(got, want) {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return ErrStale
	}
	return nil
}
