// Package webhooks receives vendors' signed event notifications and
// settles the effects they are about, so that an action whose outcome was
// unknown (an upstream timeout, a dropped connection, a crashed agent)
// settles within seconds instead of waiting for an operator.
//
// Each vendor has a path, POST /webhooks/<vendor>, on a listener of its
// own (webhooks.listen), since vendors must reach it and nothing else of
// Ratchet should be reachable from where they are. A request is verified
// with the signature the vendor really uses before anything is read from
// it; a bad or stale signature is refused with 401 and changes nothing.
// A verified event that says an action succeeded or failed is matched to
// the attempt that performed it by the vendor key Ratchet handed out for
// that attempt (echoed by Stripe, written as a tag by the proxy for the
// others: vendors.Tagger, proxy/gate.go), and given to ledger.Engine.Settle, which applies
// it, agrees with it, or flags a contradiction. Settle is idempotent, so
// a replayed event (vendors retry until they get a 2xx) is harmless.
//
// The package is the adapter and knows no vendor: each vendor's package
// holds its receiver (vendors.Receiver: the signature check and how its
// events read, in vendors/<vendor>/webhook.go) and its config block
// (vendors.WebhookConfig), and this package routes, holds, settles and
// counts. Matching, per vendor (the one table; README "Unknown outcomes
// settle themselves" repeats it):
//
//	vendor        signature                                  events used                                  matched by
//	Stripe        Stripe-Signature (stripe-go webhook)       payment_intent.succeeded, .amount_capturable_ request.idempotency_key
//	                                                         updated, .canceled, charge.succeeded,
//	                                                         refund.created: succeeded;
//	                                                         payment_intent.payment_failed, charge.failed:
//	                                                         failed
//	Square        x-square-hmacsha256-signature              payment.created, payment.updated: COMPLETED  data.object.payment.reference_id
//	                                                         or APPROVED succeeded (FAILED: see below)
//	Adyen         additionalData.hmacSignature per item,     AUTHORISATION: success true succeeded,       additionalData["metadata.ratchet_key"]
//	              optionally Basic authentication            false failed                                 behind Basic authentication only (it is
//	                                                                                                      unsigned), else merchantReference
//	Checkout.com  Cko-Signature                              payment_approved, payment_captured:          data.metadata.ratchet_key, else
//	                                                         succeeded; payment_declined: failed          data.reference
//	PayPal        PAYPAL-TRANSMISSION-SIG, offline with a    PAYMENT.CAPTURE.COMPLETED,                   resource.custom_id, else
//	              configured certificate                     CHECKOUT.ORDER.APPROVED, .COMPLETED:         resource.purchase_units[0].custom_id
//	                                                         succeeded (never failed: see vendors/paypal)
//
// A failure frees the key, so it settles an effect only through a field
// that carries nothing but the request's own vendor key: Stripe's echoed
// idempotency key, and metadata.ratchet_key, which the proxy always writes
// itself (vendors.Tagger). The fields a caller may fill with any reference
// (Square reference_id, Adyen merchantReference, Checkout.com reference,
// PayPal custom_id) settle an effect succeeded only (vendors.Event.Shared).
//
// Every other event type is counted as ignored and answered 200, so the
// vendor does not retry it. The amount an event reports becomes the
// effect's actual cost through the proxy's currency table
// (proxy.currency_micros); a currency without a rate leaves the estimate.
package webhooks

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
)

// Defaults.
const (
	// DefaultTolerance is how old a signed timestamp (Stripe, PayPal) may
	// be: stripe-go's own default.
	DefaultTolerance = 5 * time.Minute
	// DefaultMaxBodyBytes bounds an event's body.
	DefaultMaxBodyBytes = 1 << 20
	// DefaultHold is how long a verified event waits (Options.Hold).
	DefaultHold = time.Second
	// DefaultBodyTimeout is how long an event's body may take to arrive
	// (Options.BodyTimeout). Vendors post a few kilobytes from their data
	// centres and wait only seconds for the answer; a client that
	// trickles its body holds a connection and a goroutine until then.
	DefaultBodyTimeout = 2 * time.Second
	// PathPrefix is where each vendor's events arrive: PathPrefix+vendor.
	PathPrefix = "/webhooks/"
)

// Settler is the engine method the receivers need.
type Settler interface {
	Settle(ctx context.Context, req ledger.SettleRequest) (*ledger.SettleResult, error)
}

// Observer counts events by vendor and stage (package metrics).
type Observer interface {
	// Webhook counts one event (an Adyen notification item is one) at a
	// stage: received; refused (bad or stale signature, or unreadable);
	// verified; ignored (a type that settles nothing, or no key or tag);
	// then for the rest matched (an effect has its key) or unknown (none
	// has), and of the matched settled (applied), agreed (already settled
	// that way) or contradicted; failed (the ledger could not record it,
	// answered 503 so the vendor retries).
	Webhook(vendor, stage string)
}

// Options configure the receivers.
type Options struct {
	// Receivers are the vendors' receivers by vendor name (each vendor's
	// package has one: stripe.Webhook, …); a vendor without one has no
	// path (it answers 404).
	Receivers map[string]vendors.Receiver
	// Tolerance is how old a signed timestamp may be (default
	// DefaultTolerance); Square, Adyen and Checkout.com sign none.
	Tolerance time.Duration
	// CurrencyMicros converts an event's amount to micro-USD (the proxy's
	// table); nil: no actual cost is given.
	CurrencyMicros map[string]int64
	// Hold is how long a verified event waits before it settles anything
	// (default DefaultHold; negative: not at all). Vendors send events as
	// they answer, and an event that overtook the proxy's own report of
	// the answer would settle the effect first: the report would then
	// agree and change nothing, and the answer the proxy keeps for
	// replaying to retries would be lost. The report comes milliseconds
	// after the answer; the hold lets it land first.
	Hold time.Duration
	// MaxBodyBytes bounds a body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// BodyTimeout bounds the time to read a body, from when the handler
	// starts (default DefaultBodyTimeout); the server's own ReadTimeout
	// and WriteTimeout should bound the rest (cmd/ratchet sets them).
	BodyTimeout time.Duration
	// Clock is the time source for timestamps (default time.Now).
	Clock func() time.Time
	// Logger gets a line per event: vendor, type, event id, effect id,
	// what happened. Never bodies, keys or amounts' owners.
	Logger *slog.Logger
	// Observer counts events; nil: nobody.
	Observer Observer
}

// SinkStore is the ledger's durable map (ledger.Engine's sink
// references), in which a receiver that must remember something
// (vendors.StoreUser) keeps it under the sink "webhooks.<vendor>".
type SinkStore interface {
	SinkRef(ctx context.Context, sink, ref string) ([]byte, error)
	PutSinkRef(ctx context.Context, sink, ref string, value []byte) error
}

// sinkStore is one vendor's part of a SinkStore, as a vendors.WebhookStore.
type sinkStore struct {
	s    SinkStore
	sink string
}

func (s sinkStore) Get(ctx context.Context, ref string) ([]byte, bool, error) {
	if !storable(ref) {
		return nil, false, vendors.ErrUnstorable
	}
	v, err := s.s.SinkRef(ctx, s.sink, ref)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func (s sinkStore) Put(ctx context.Context, ref string, value []byte) error {
	if !storable(ref) {
		return vendors.ErrUnstorable
	}
	return s.s.PutSinkRef(ctx, s.sink, ref, value)
}

// storable is a ref the ledger keeps: text no longer than its ids.
func storable(ref string) bool { return len(ref) <= ledger.MaxIDLen && ref == printable(ref) }

type handler struct {
	s         Settler
	opts      Options
	receivers map[string]vendors.Receiver
	log       *slog.Logger
}

// New returns the receivers as one handler, routing POST PathPrefix+vendor.
func New(s Settler, opts Options) http.Handler {
	if opts.Tolerance <= 0 {
		opts.Tolerance = DefaultTolerance
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.Hold == 0 {
		opts.Hold = DefaultHold
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.Observer == nil {
		opts.Observer = nopObserver{}
	}
	h := &handler{s: s, opts: opts, receivers: opts.Receivers, log: opts.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if ss, ok := s.(SinkStore); ok {
		for name, rv := range h.receivers {
			if u, ok := rv.(vendors.StoreUser); ok {
				u.UseStore(sinkStore{s: ss, sink: "webhooks." + name})
			}
		}
	}
	return h
}

type nopObserver struct{}

func (nopObserver) Webhook(string, string) {}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	rv := h.receivers[name]
	if !ok || rv == nil {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	obs := h.opts.Observer
	obs.Webhook(name, "received")
	// Unauthenticated until read and verified: the body gets a deadline of
	// its own (not supported by every ResponseWriter, e.g. a recorder).
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	// Read: lift the deadline. net/http lifts it too when it starts its
	// read in the background that watches for the vendor hanging up, but
	// that read may have started before ours was set (an empty body), and
	// its timing out would cancel the request's context during the hold.
	rc.SetReadDeadline(time.Time{})
	if err != nil {
		obs.Webhook(name, "refused")
		http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	recs, err := rv.Read(r.Context(), r.Header, body, h.opts.Clock(), h.opts.Tolerance)
	if err != nil {
		status := http.StatusUnauthorized
		switch {
		case errors.Is(err, vendors.ErrUnavailable):
			obs.Webhook(name, "failed")
			h.log.Error("webhook not checked; the vendor will retry", "vendor", name, "err", err)
			http.Error(w, "the ledger could not record the event; retry", http.StatusServiceUnavailable)
			return
		case errors.Is(err, vendors.ErrMalformed):
			status = http.StatusBadRequest
		}
		obs.Webhook(name, "refused")
		h.log.Warn("webhook refused", "vendor", name, "err", err)
		http.Error(w, err.Error(), status)
		return
	}
	if h.opts.Hold > 0 {
		select {
		case <-time.After(h.opts.Hold):
		case <-r.Context().Done():
			return // the vendor gave up; it sends the event again
		}
	}
	failed := false
	for i := range recs {
		obs.Webhook(name, "verified")
		if !h.settleEvent(r.Context(), name, &recs[i]) {
			failed = true
		}
	}
	if failed {
		// Nothing was lost: the vendor retries, and Settle is idempotent.
		http.Error(w, "the ledger could not record the event; retry", http.StatusServiceUnavailable)
		return
	}
	if a, ok := rv.(vendors.Acknowledger); ok {
		w.Write(a.Ack()) // the answer the vendor expects (Adyen's "[accepted]")
		return
	}
	w.WriteHeader(http.StatusOK)
}

// outcomes are the ledger's outcomes of what events say.
var outcomes = map[vendors.EventOutcome]ledger.Outcome{
	vendors.EventSucceeded: ledger.OutcomeSucceeded,
	vendors.EventFailed:    ledger.OutcomeFailed,
}

// settleEvent gives one event to the engine (Engine.Settle); false when the engine could not
// record it and the vendor must retry.
func (h *handler) settleEvent(ctx context.Context, vendor string, rec *vendors.Event) bool {
	obs := h.opts.Observer
	outcome := outcomes[rec.Outcome]
	candidates := rec.Keys
	if outcome == ledger.OutcomeSucceeded {
		candidates = append(candidates[:len(candidates):len(candidates)], rec.Shared...)
	}
	keys := candidates[:0:0]
	for _, k := range candidates {
		if k != "" && len(k) <= ledger.MaxIDLen && k == printable(k) {
			keys = append(keys, k)
		}
	}
	if outcome == "" || len(keys) == 0 {
		obs.Webhook(vendor, "ignored")
		if outcome == ledger.OutcomeFailed && slices.ContainsFunc(rec.Shared, func(k string) bool { return k != "" }) {
			h.log.Info("webhook ignored: a failure matched only by a field the caller may fill is not trusted", "vendor", vendor,
				"type", rec.Type, "event_id", rec.ID)
			return true
		}
		h.log.Debug("webhook ignored", "vendor", vendor, "type", rec.Type, "event_id", rec.ID)
		return true
	}
	// No namespace: the vendor key index is global, and that is safe. A
	// vendor key is an HMAC under the ledger's secret of the namespace,
	// key, attempt and vendor (ledger.Engine.vendorKey), so no two
	// namespaces share one and nobody can derive one; it reaches only the
	// caller of its own effect (MCP's begin answer in its namespace, the
	// proxy's Ratchet-Vendor-Key in proxy.namespace). The fields a failure
	// settles by are filled only with the request's own key: the
	// idempotency key the proxy stamps over the caller's, and
	// metadata.ratchet_key, which the proxy refuses to send with any other
	// value (vendors.Tagger). So a failure settles the effect whose request
	// the vendor declined, whatever its namespace, and nothing else. A
	// shared field (rec.shared) may name another effect's key, of another
	// tenant too, if its caller learned it: it settles only succeeded,
	// which can never cause a second execution (at worst a retry is
	// answered as a duplicate; a contradicting report is flagged).
	req := ledger.SettleRequest{Vendor: vendor, Outcome: outcome, Source: "webhook:" + vendor,
		EventID: clip(printable(rec.ID), ledger.MaxIDLen)}
	if ref := rec.Ref; storable(ref) {
		req.VendorReference = ref
	}
	if rec.Answer != nil && outcome == ledger.OutcomeSucceeded {
		req.Result = outbound.StoredAnswer(http.StatusOK, "application/json", rec.Answer, req.VendorReference)
	}
	if rec.Money != nil && outcome == ledger.OutcomeSucceeded {
		if micros, ok := rec.Money.Micros(h.opts.CurrencyMicros); ok {
			req.ActualCostMicros = &micros
		}
	}
	var res *ledger.SettleResult
	var err error
	for _, k := range keys {
		req.VendorKey = k
		if res, err = h.s.Settle(ctx, req); ledger.CodeOf(err) != ledger.CodeEffectNotFound {
			break
		}
	}
	switch code := ledger.CodeOf(err); {
	case err == nil:
	case code == ledger.CodeEffectNotFound:
		obs.Webhook(vendor, "unknown")
		h.log.Info("webhook for no known effect", "vendor", vendor, "type", rec.Type, "event_id", req.EventID)
		return true
	case code == ledger.CodeUnavailable || code == ledger.CodeInternal:
		obs.Webhook(vendor, "failed")
		h.log.Error("webhook not recorded; the vendor will retry", "vendor", vendor, "event_id", req.EventID, "err", err)
		return false
	default:
		// The engine refused what the event says (it cannot be fixed by
		// a retry): counted and logged, answered 200.
		obs.Webhook(vendor, "ignored")
		h.log.Warn("webhook refused by the ledger", "vendor", vendor, "event_id", req.EventID, "code", code, "err", err)
		return true
	}
	obs.Webhook(vendor, "matched")
	stage := "agreed"
	switch {
	case res.Applied:
		stage = "settled"
	case res.Contradicts:
		stage = "contradicted"
	}
	obs.Webhook(vendor, stage)
	lvl := slog.LevelInfo
	if res.Contradicts {
		lvl = slog.LevelWarn
	}
	h.log.Log(ctx, lvl, "webhook "+stage, "vendor", vendor, "type", rec.Type, "event_id", req.EventID,
		"effect_id", res.Effect.EffectID, "attempt", res.Effect.Attempt, "outcome", outcome, "state", res.Effect.State)
	return true
}

// printable is s with control characters as spaces and invalid UTF-8
// replaced: what the ledger accepts as text.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n])
	}
	return s
}
