package vendors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Webhooks. A vendor whose signed event notifications settle effects has
// a block of the webhooks config (webhooks.<vendor>), which its package
// defines as a WebhookConfig: it checks itself and, given the secrets it
// names, builds the vendor's Receiver. The webhooks package is the
// adapter: it routes POST /webhooks/<vendor> to the receiver, which
// verifies the signature the vendor really uses and reads each event into
// an Event, and gives what an Event says to the ledger. It knows no vendor.

// WebhookConfig is a vendor's block of the webhooks config.
type WebhookConfig interface {
	// Check reports, through c, what is wrong with the block at path p
	// (e.g. "webhooks.stripe").
	Check(p string, c ConfigCheck)
	// Receiver reads the secrets the block names (with read) and returns
	// the vendor's receiver.
	Receiver(read ReadSecret) (Receiver, error)
}

// ConfigCheck is how a config block reports its problems (the config
// gives them line numbers).
type ConfigCheck interface {
	// Problem reports what is wrong at path.
	Problem(path, format string, args ...any)
	// SecretSource reports what is wrong with a secret that must come from
	// exactly one of a file (<what>_file) or an environment variable
	// (<what>_env), never from the config file itself.
	SecretSource(path, what, file, env string)
}

// WebhookSecret names where a signing secret is: a file or an
// environment variable (Stripe's whsec_…, Checkout.com's secret key).
type WebhookSecret struct {
	SecretFile string `yaml:"secret_file"`
	SecretEnv  string `yaml:"secret_env"`
}

// ReadSecret reads a secret from a file or an environment variable (the
// config's reader).
type ReadSecret func(file, env string) (string, error)

// Lines reads a source holding one or more secrets, one a line, any of
// which verifies: the new one is added before it is rolled at the vendor.
func (r ReadSecret) Lines(file, env string) ([]string, error) {
	v, err := r(file, env)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range strings.Split(v, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out, nil
}

// Receiver verifies and reads one vendor's events.
type Receiver interface {
	// Read verifies a delivery (its headers and raw body) and returns what
	// each event in it says, or an error: ErrSignature, ErrStale,
	// ErrMalformed (wrapped) or ErrUnavailable (wrapped). now is the
	// time to check signed timestamps against, within tolerance.
	Read(ctx context.Context, h http.Header, body []byte, now time.Time, tolerance time.Duration) ([]Event, error)
}

// Acknowledger is a Receiver whose vendor expects a body in the answer to
// an event it delivered.
type Acknowledger interface {
	Ack() []byte
}

// WebhookStore is a durable map the adapter gives a receiver that must
// remember something across restarts and replicas (the ledger's, under a
// name of the vendor's own). Refs are at most the ledger's id length;
// a longer or unprintable one is ErrUnstorable.
type WebhookStore interface {
	// Get returns the value kept for ref; false when there is none.
	Get(ctx context.Context, ref string) ([]byte, bool, error)
	Put(ctx context.Context, ref string, value []byte) error
}

// StoreUser is a Receiver that keeps what it must remember in a
// WebhookStore when the adapter has one.
type StoreUser interface {
	UseStore(WebhookStore)
}

// The ways a delivery is refused.
var (
	ErrSignature = errors.New("the signature does not verify")
	ErrStale     = errors.New("the signed timestamp is outside the tolerance")
	ErrMalformed = errors.New("the body is not an event")
	// ErrUnavailable: what the receiver must remember could not be read
	// or written (503: the vendor retries).
	ErrUnavailable = errors.New("the ledger is unavailable")
	// ErrUnstorable is a WebhookStore's answer for a ref it cannot keep.
	ErrUnstorable = errors.New("the reference cannot be stored")
)

// Malformed wraps a decoding error as ErrMalformed.
func Malformed(err error) error { return fmt.Errorf("%w: %v", ErrMalformed, err) }

// EventOutcome is what an event says of the request that caused it.
type EventOutcome string

// What an event can say; "" says nothing (the event is ignored).
const (
	EventSucceeded EventOutcome = "succeeded"
	EventFailed    EventOutcome = "failed"
)

// Event is what a verified event says about one action.
type Event struct {
	ID   string
	Type string
	// Keys are the values the event carries that may be a vendor key
	// Ratchet handed out, best first, from fields only Ratchet (or the
	// vendor's key check) fills: the echoed idempotency key, Ratchet's own
	// metadata.ratchet_key, which the proxy refuses to send with another
	// value (Tagger). Shared are those from fields the caller may fill
	// with anything, another effect's vendor key included (Square
	// reference_id, PayPal custom_id, Adyen merchantReference,
	// Checkout.com reference): they settle an effect succeeded, never
	// failed, since a caller's own declined payment must not free another
	// effect's key. None of either: the event is ignored.
	Keys, Shared []string
	Outcome      EventOutcome // "" when the type says nothing: ignored
	// Ref is the vendor's id of the object the effect made.
	Ref   string
	Money *Money
	// Answer is the vendor's object as the request that caused the event
	// answered it, when the event carries that object (kept for replay).
	Answer json.RawMessage
}

// Minor is an amount in minor units, if the currency is named.
func Minor(value int64, currency string) *Money {
	if currency == "" {
		return nil
	}
	return &Money{Minor: value, Currency: strings.ToUpper(currency)}
}
