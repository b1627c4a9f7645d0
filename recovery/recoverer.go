package recovery

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/outbound"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/all"
)

// Defaults.
const (
	// DefaultInterval is how often the kept requests are looked at.
	DefaultInterval = 5 * time.Second
	// DefaultDelay is how long after a request was sent it is first sent
	// again: long enough for the first to have finished at the vendor,
	// which then replays it rather than answering "in progress" (Stripe
	// 409, Adyen 704) or, as PayPal warns, failing the second.
	DefaultDelay = time.Minute
	// MaxBackoff caps the wait between tries of one request.
	MaxBackoff = 5 * time.Minute
	// WindowShare is the part of a vendor's documented key retention
	// Ratchet uses: a resend near the end could reach a vendor that just
	// forgot the key, and act a second time.
	WindowShare = 0.9
)

// Window is how long after its first send a request of vendor may be sent
// again, or 0 when the vendor publishes no key retention (Square) or does
// not enforce keys: such a vendor cannot be recovered.
func Window(vendor string) time.Duration {
	v, known := all.Lookup(vendor)
	rule := v.KeyRule()
	if _, ok := v.(vendors.Recoverable); !ok || !known || !rule.Enforced || rule.RetentionHours <= 0 {
		return 0
	}
	return time.Duration(float64(time.Duration(rule.RetentionHours)*time.Hour) * WindowShare)
}

// Engine is what recovery needs of the ledger.
type Engine interface {
	Get(ctx context.Context, namespace, effectID, idempotencyKey string) (*ledger.Effect, error)
	Settle(ctx context.Context, req ledger.SettleRequest) (*ledger.SettleResult, error)
}

// Observer counts recoveries by vendor and result: tried (a resend),
// settled (the answer settled the effect), agreed (it was settled that
// way already), contradicted, unknown (no definite answer: tried again
// later), expired (the window closed first: left to an operator),
// dropped (the effect settled otherwise, moved on or is gone; the request
// is forgotten), unreadable (a kept file that does not open).
type Observer interface {
	Recovery(vendor, result string)
}

// Recoverer sends kept requests of indeterminate effects again.
type Recoverer struct {
	Store  *Store
	Engine Engine
	// Client sends the requests again; its Transport must not be the
	// recording Transport (default: proxy.NewTransport with a 60 s timeout).
	Client *http.Client
	// Interval between passes (default DefaultInterval); Delay before a
	// request is first sent again (default DefaultDelay).
	Interval, Delay time.Duration
	// Window returns a vendor's window (default Window).
	Window   func(vendor string) time.Duration
	Clock    func() time.Time
	Logger   *slog.Logger
	Observer Observer

	mu   sync.Mutex
	next map[string]retry // by effect id and attempt
}

type retry struct {
	at    time.Time
	tries int
}

// Run passes over the kept requests every Interval until ctx ends.
func (r *Recoverer) Run(ctx context.Context) {
	iv := r.Interval
	if iv <= 0 {
		iv = DefaultInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		r.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass looks at every kept request once and returns how many it sent.
func (r *Recoverer) Pass(ctx context.Context) int {
	reqs, bad, err := r.Store.List()
	if err != nil {
		r.log().Error("recovery: listing kept requests", "err", err)
		return 0
	}
	for range bad {
		r.observe("", "unreadable")
	}
	if len(bad) > 0 {
		r.log().Error("recovery: kept requests that do not open under the recovery key (another key, or damaged); never sent", "files", bad)
		// Past every vendor's window such a file could never be sent even
		// if its key came back; it still holds a sealed request,
		// credentials included: delete it.
		cutoff := r.now().Add(-r.longestWindow())
		for _, n := range bad {
			switch gone, err := r.Store.DeleteUnreadable(n, cutoff); {
			case err != nil:
				r.log().Warn("recovery: could not delete an unreadable kept request", "file", n, "err", err)
			case gone:
				r.observe("", "expired")
				r.log().Warn("recovery: an unreadable kept request older than every vendor's key window was deleted unsent; "+
					"its effect, if still indeterminate, is left to an operator", "file", n)
			}
		}
	}
	sent := 0
	for _, q := range reqs {
		if ctx.Err() != nil {
			break
		}
		if r.one(ctx, q) {
			sent++
		}
	}
	return sent
}

// longestWindow is the longest key window of any vendor: a kept request
// older than that can be sent for none.
func (r *Recoverer) longestWindow() time.Duration {
	window := Window
	if r.Window != nil {
		window = r.Window
	}
	var longest time.Duration
	for _, v := range all.List() {
		longest = max(longest, window(v.Name()), Window(v.Name()))
	}
	return longest
}

// one decides about one kept request; true when it was sent.
func (r *Recoverer) one(ctx context.Context, q *Request) bool {
	now := r.now()
	log := r.log().With("vendor", q.Vendor, "effect_id", q.EffectID, "attempt", q.Attempt)
	eff, err := r.Engine.Get(ctx, "", q.EffectID, "")
	switch {
	case ledger.CodeOf(err) == ledger.CodeEffectNotFound:
		r.drop(q, "dropped", log, "the effect is gone")
		return false
	case err != nil:
		log.Warn("recovery: reading the effect", "err", err)
		return false
	case eff.Attempt != q.Attempt || (eff.State != ledger.StatePending && eff.State != ledger.StateIndeterminate):
		r.drop(q, "dropped", log, "settled or moved on")
		return false
	}
	window := Window
	if r.Window != nil {
		window = r.Window
	}
	if w := window(q.Vendor); w <= 0 || now.Sub(q.SentAt) >= w {
		r.drop(q, "expired", log, "the vendor's key window closed; the effect is left to an operator")
		return false
	}
	if eff.State != ledger.StateIndeterminate {
		return false // pending: the call may be under way
	}
	k := name(q.EffectID, q.Attempt)
	r.mu.Lock()
	if r.next == nil {
		r.next = map[string]retry{}
	}
	st, seen := r.next[k]
	if !seen {
		delay := r.Delay
		if delay <= 0 {
			delay = DefaultDelay
		}
		st = retry{at: q.SentAt.Add(delay)}
		r.next[k] = st
	}
	r.mu.Unlock()
	if now.Before(st.at) {
		return false
	}
	release, ok := r.claim(ctx, q, log)
	if !ok {
		return false
	}
	result := r.resend(ctx, q, log)
	release()
	r.observe(q.Vendor, "tried")
	r.observe(q.Vendor, result)
	if result == "unknown" {
		st.tries++
		wait := r.Interval
		if wait <= 0 {
			wait = DefaultInterval
		}
		for range st.tries {
			wait = min(2*wait, MaxBackoff)
		}
		st.at = now.Add(wait)
		r.mu.Lock()
		r.next[k] = st
		r.mu.Unlock()
	}
	return true
}

// Claimer is an engine that can hold a recovery claim on an effect's
// attempt (the ledger patch /tmp/settlement-claim.patch of review finding
// 3): while it is held, the attempt cannot be resolved failed, so no new
// attempt can begin while its resend may be in flight. ClaimRecovery
// fails (invalid_state_transition, effect_not_found) unless the effect is
// indeterminate on that attempt; ReleaseRecovery ends the claim early.
type Claimer interface {
	ClaimRecovery(ctx context.Context, effectID string, attempt int, ttl time.Duration) (*ledger.Effect, error)
	ReleaseRecovery(ctx context.Context, effectID string, attempt int) error
}

// claimGrace is how much longer than the resend's own timeout a claim is
// held: a request the client gave up on may still be under way at the
// vendor for a while.
const claimGrace = 30 * time.Second

// claim makes sure, right before the resend, that the effect is still
// indeterminate on q's attempt: with an engine that holds recovery claims
// (Claimer) it claims the attempt for the time the resend may take, so an
// agent or operator cannot resolve it failed and begin the next attempt
// meanwhile (Ratchet never frees an attempt whose resend may be in
// flight); with another, it reads the effect again, which leaves only the
// moment between that read and the send. false: not sent (dropped, or
// tried again later).
func (r *Recoverer) claim(ctx context.Context, q *Request, log *slog.Logger) (release func(), ok bool) {
	var eff *ledger.Effect
	var err error
	release = func() {}
	if c, can := r.Engine.(Claimer); can {
		eff, err = c.ClaimRecovery(ctx, q.EffectID, q.Attempt, r.timeout()+claimGrace)
		if err == nil {
			release = func() {
				if err := c.ReleaseRecovery(context.WithoutCancel(ctx), q.EffectID, q.Attempt); err != nil {
					log.Info("recovery: releasing the claim (it expires by itself)", "err", err)
				}
			}
		}
	} else {
		eff, err = r.Engine.Get(ctx, "", q.EffectID, "")
	}
	switch code := ledger.CodeOf(err); {
	case code == ledger.CodeEffectNotFound:
		r.drop(q, "dropped", log, "the effect is gone")
		return release, false
	case code == ledger.CodeInvalidStateTransition:
		r.drop(q, "dropped", log, "settled or moved on before the resend")
		return release, false
	case code == ledger.CodeHalted: // kept: sent once the halt is lifted
		log.Info("recovery: paused by an operator's halt; trying again later", "err", err)
		return release, false
	case err != nil:
		log.Warn("recovery: claiming the effect before the resend; trying again later", "err", err)
		return release, false
	case eff.Attempt != q.Attempt || eff.State != ledger.StateIndeterminate:
		release()
		r.drop(q, "dropped", log, "settled or moved on before the resend")
		return func() {}, false
	}
	return release, true
}

func (r *Recoverer) timeout() time.Duration {
	if r.Client != nil && r.Client.Timeout > 0 {
		return r.Client.Timeout
	}
	return defaultClientTimeout
}

// defaultClientTimeout bounds a resend without a Client of its own.
const defaultClientTimeout = 60 * time.Second

// resend sends q again and settles the effect from the answer; it
// returns the result to count.
func (r *Recoverer) resend(ctx context.Context, q *Request, log *slog.Logger) string {
	hreq, err := http.NewRequestWithContext(ctx, q.Method, q.URL, bytes.NewReader(q.Body))
	if err != nil {
		log.Error("recovery: the kept request does not rebuild", "err", err)
		return "unknown"
	}
	hreq.Header = q.Header.Clone()
	// The caller's Accept-Encoding went upstream as it was; here net/http
	// asks for gzip itself and decompresses, so the answer is read as the
	// vendor's JSON.
	hreq.Header.Del("Accept-Encoding")
	client := r.Client
	if client == nil {
		client = &http.Client{Timeout: defaultClientTimeout}
	}
	resp, err := client.Do(hreq)
	if err != nil {
		log.Info("recovery: no answer to the resend; trying again later", "err", err)
		return "unknown"
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	resp.Body.Close()
	if err != nil {
		return "unknown"
	}
	v, _ := all.Lookup(q.Vendor)
	answer := &vendors.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	o := v.Outcome(answer)
	if o.Result == vendors.Failed && !storedFailure(q.Vendor, answer) {
		// Not the vendor's record of the request under this key: an
		// answer of its front door (credentials, permissions, rate
		// limits, routing) or one it does not keep. It says nothing of
		// the first request, which may have been executed.
		o.Result, o.Reason = vendors.Unknown, "a refusal that is not the stored result of the key: "+o.Reason
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			log.Warn("recovery: the vendor refused the resend's credentials (a rolled or restricted key?); trying again until the window closes",
				"status", resp.StatusCode)
		}
	}
	var outcome ledger.Outcome
	switch o.Result {
	case vendors.Succeeded:
		outcome = ledger.OutcomeSucceeded
	case vendors.Failed:
		outcome = ledger.OutcomeFailed
	default:
		log.Info("recovery: the vendor's answer is not definite; trying again later", "status", resp.StatusCode, "reason", o.Reason)
		return "unknown"
	}
	req := ledger.SettleRequest{EffectID: q.EffectID, Attempt: q.Attempt, Outcome: outcome, Source: "recovery:" + q.Vendor,
		EventID: eventID(v, resp.Header)}
	if ref := o.VendorReference; len(ref) <= ledger.MaxIDLen && !strings.ContainsFunc(ref, isControl) {
		req.VendorReference = ref
	}
	if outcome == ledger.OutcomeSucceeded {
		req.Result = outbound.StoredAnswer(resp.StatusCode, resp.Header.Get("Content-Type"), b, req.VendorReference)
	}
	res, err := r.Engine.Settle(ctx, req)
	if err != nil {
		log.Warn("recovery: the ledger did not take the answer; trying again later", "err", err)
		return "unknown"
	}
	result := "agreed"
	switch {
	case res.Applied:
		result = "settled"
	case res.Contradicts:
		result = "contradicted"
	}
	r.drop(q, "", log, "recovered: "+result)
	return result
}

// storedFailure reports whether a failure answered to a resend is the
// vendor's stored result of the request under its key, the only failure
// that says the first request failed too (and so frees the key). Anything
// the vendor answers before it looks at the key (401, 403, 404, 429, a
// validation 400), anything it does not keep, and every 5xx say nothing
// of the first request, which may have been executed: believing them
// would free the key and let the retry act a second time. Each vendor
// says which of its answers are stored (vendors.Recoverable, with its
// sources); a vendor that is not Recoverable is never believed.
//
// Besides, a body that names the key as refused (idempotency_error,
// IDEMPOTENCY_KEY_REUSED, PAYPAL_REQUEST_ID_PREVIOUSLY_USED) means the
// vendor saw other content under the key: believe nothing.
func storedFailure(vendor string, r *vendors.Response) bool {
	s := strings.ToLower(string(r.Body))
	if strings.Contains(s, "idempotenc") || strings.Contains(s, "request_id") {
		return false
	}
	v, _ := all.Lookup(vendor)
	rv, ok := v.(vendors.Recoverable)
	return ok && rv.StoredFailure(r)
}

// eventID names the vendor's answer: its request id header, if any.
func eventID(v vendors.Vendor, h http.Header) string {
	if rv, ok := v.(vendors.Recoverable); ok && rv.RequestIDHeader() != "" {
		if id := h.Get(rv.RequestIDHeader()); id != "" && len(id) <= 128 && !strings.ContainsFunc(id, isControl) {
			return "resend " + id
		}
	}
	return "resend"
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func (r *Recoverer) drop(q *Request, result string, log *slog.Logger, why string) {
	if err := r.Store.Delete(q.EffectID, q.Attempt); err != nil {
		log.Warn("recovery: could not delete a kept request", "err", err)
		return
	}
	r.mu.Lock()
	delete(r.next, name(q.EffectID, q.Attempt))
	r.mu.Unlock()
	if result != "" {
		r.observe(q.Vendor, result)
	}
	lvl := slog.LevelInfo
	if result == "expired" {
		lvl = slog.LevelWarn
	}
	log.Log(context.Background(), lvl, "recovery: kept request deleted: "+why)
}

func (r *Recoverer) observe(vendor, result string) {
	if r.Observer != nil {
		r.Observer.Recovery(vendor, result)
	}
}

func (r *Recoverer) now() time.Time {
	if r.Clock != nil {
		return r.Clock()
	}
	return time.Now()
}

func (r *Recoverer) log() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}
