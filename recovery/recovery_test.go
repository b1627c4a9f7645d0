package recovery_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v79/webhook"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
	"github.com/ratchet-mcp/ratchet/recovery"
	"github.com/ratchet-mcp/ratchet/vendors"
	"github.com/ratchet-mcp/ratchet/vendors/stripe"
	"github.com/ratchet-mcp/ratchet/webhooks"
)

// keyedVendor honours idempotency keys as Stripe does: the first request
// with a key is executed and its answer kept; a repeat gets the kept
// answer (Idempotent-Replayed: true), never a second execution. drop
// makes it hang up on the next request, after executing it (after) or
// before reading it (before).
type keyedVendor struct {
	mu       sync.Mutex
	answers  map[string]string
	executed atomic.Int64
	seen     atomic.Int64
	drop     atomic.Value // "", "after", "before"
	gzip     atomic.Bool  // compress answers for clients that accept it
	// refuse answers the next request with this status and body (refusal)
	// before looking at its key, as a vendor's front door does (auth,
	// permissions, rate limits, routing).
	refuse  atomic.Int64
	refusal atomic.Value
}

func (f *keyedVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.seen.Add(1)
	if s := f.refuse.Swap(0); s != 0 {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(s))
		io.WriteString(w, f.refusal.Load().(string))
		return
	}
	mode, _ := f.drop.Load().(string)
	if mode != "" {
		f.drop.Store("")
	}
	hangUp := func() {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	if mode == "before" {
		hangUp()
		return
	}
	io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	answer, replay := f.answers[key]
	if !replay {
		n := f.executed.Add(1)
		answer = fmt.Sprintf(`{"id":"pi_%d","object":"payment_intent","amount":2000,"currency":"usd","status":"succeeded"}`, n)
		if f.answers == nil {
			f.answers = map[string]string{}
		}
		f.answers[key] = answer
	}
	f.mu.Unlock()
	if mode == "after" {
		hangUp()
		return
	}
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Content-Type", "application/json")
	if f.gzip.Load() && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		io.WriteString(zw, answer)
		zw.Close()
		return
	}
	io.WriteString(w, answer)
}

type counts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counts) Recovery(vendor, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[result]++
}

func (c *counts) get(result string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[result]
}

type env struct {
	eng      *ledger.Engine
	vendor   *keyedVendor
	proxyURL string
	store    *recovery.Store
	dir      string
	rec      *recovery.Recoverer
	obs      *counts
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{})
	key, err := recovery.LoadOrCreateKey(dir + "/recovery.key")
	if err != nil {
		t.Fatal(err)
	}
	store, err := recovery.OpenStore(dir+"/recovery", key)
	if err != nil {
		t.Fatal(err)
	}
	fv := &keyedVendor{}
	up := httptest.NewServer(fv)
	t.Cleanup(up.Close)
	rt := &recovery.Transport{Base: proxy.NewTransport(), Store: store, Vendors: map[string]bool{"stripe": true}}
	p, err := proxy.New(eng, proxy.Options{Upstreams: map[string]string{"stripe": up.URL}, Transport: rt,
		UpstreamTimeout: 2 * time.Second, CurrencyMicros: map[string]int64{"usd": 1_000_000}})
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(p)
	t.Cleanup(ps.Close)
	obs := &counts{}
	rec := &recovery.Recoverer{Store: store, Engine: eng, Delay: time.Nanosecond, Interval: time.Millisecond, Observer: obs}
	return &env{eng: eng, vendor: fv, proxyURL: ps.URL, store: store, dir: dir, rec: rec, obs: obs}
}

const chargeBody = "amount=2000&currency=usd&customer=cus_1"

// charge sends a $20 PaymentIntent through the proxy with the Ratchet key.
func (e *env) charge(t *testing.T, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.proxyURL+"/stripe/v1/payment_intents", strings.NewReader(chargeBody))
	req.Header.Set("Authorization", "Bearer sk_test_recovery")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Ratchet-Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

func (e *env) effect(t *testing.T, id string) *ledger.Effect {
	t.Helper()
	eff, err := e.eng.Get(context.Background(), "", id, "")
	if err != nil {
		t.Fatal(err)
	}
	return eff
}

func (e *env) kept(t *testing.T) int {
	t.Helper()
	reqs, bad, err := e.store.List()
	if err != nil || len(bad) > 0 {
		t.Fatal(err, bad)
	}
	return len(reqs)
}

// lost sends a charge whose connection drops (mode "after": the vendor
// executed it; "before": it never saw it): the outcome is unknown.
func (e *env) lost(t *testing.T, key, mode string) string {
	t.Helper()
	e.vendor.drop.Store(mode)
	r := e.charge(t, key)
	id := r.Header.Get("Ratchet-Effect-Id")
	if r.StatusCode != http.StatusBadGateway || id == "" {
		t.Fatalf("a dropped connection: %d %v", r.StatusCode, r.Header)
	}
	if eff := e.effect(t, id); eff.State != ledger.StateIndeterminate || e.kept(t) != 1 {
		t.Fatalf("after the drop: %s, %d kept", eff.State, e.kept(t))
	}
	if r := e.charge(t, key); r.Header.Get("Ratchet-Decision") != string(ledger.DecisionBlocked) {
		t.Fatalf("the retry while unknown: %v", r.Header)
	}
	return id
}

// TestRecoveryAfterADroppedConnectionExecutesNothingTwice: the vendor
// executed the charge and the connection dropped before its answer; the
// recovery's resend with the same key is replayed by the vendor, settles
// the effect succeeded, and the vendor executed exactly once.
func TestRecoveryAfterADroppedConnectionExecutesNothingTwice(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:dropped", "after")
	if e.vendor.executed.Load() != 1 {
		t.Fatalf("executed %d before recovery", e.vendor.executed.Load())
	}
	if n := e.rec.Pass(context.Background()); n != 1 {
		t.Fatalf("sent %d", n)
	}
	eff := e.effect(t, id)
	if eff.State != ledger.StateSucceeded || eff.ResolvedBy != "recovery:stripe" || eff.VendorReference != "pi_1" {
		t.Fatalf("after recovery: %+v", eff)
	}
	if e.vendor.executed.Load() != 1 || e.vendor.seen.Load() != 2 || e.kept(t) != 0 || e.obs.get("settled") != 1 {
		t.Fatalf("executed %d, seen %d, kept %d, %v", e.vendor.executed.Load(), e.vendor.seen.Load(), e.kept(t), e.obs.n)
	}
	r := e.charge(t, "order:dropped")
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("Ratchet-Decision") != string(ledger.DecisionDuplicate) || e.vendor.seen.Load() != 2 ||
		r.Header.Get("Ratchet-Replayed") != "true" || !strings.Contains(string(body), `"id":"pi_1"`) {
		t.Fatalf("the retry after recovery: %v %s", r.Header, body)
	}
	if e.rec.Pass(context.Background()) != 0 {
		t.Fatal("a settled effect was sent again")
	}
}

// TestRecoveryOfARequestTheVendorNeverSawExecutesItOnce: the connection
// dropped before the vendor read the request; the recovery's resend is
// the one execution.
func TestRecoveryOfARequestTheVendorNeverSawExecutesItOnce(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:unseen", "before")
	if e.vendor.executed.Load() != 0 {
		t.Fatalf("executed %d before recovery", e.vendor.executed.Load())
	}
	e.rec.Pass(context.Background())
	if eff := e.effect(t, id); eff.State != ledger.StateSucceeded || e.vendor.executed.Load() != 1 {
		t.Fatalf("after recovery: %s, executed %d", eff.State, e.vendor.executed.Load())
	}
	e.rec.Pass(context.Background())
	if e.vendor.executed.Load() != 1 || e.vendor.seen.Load() != 2 {
		t.Fatalf("executed %d, seen %d", e.vendor.executed.Load(), e.vendor.seen.Load())
	}
}

// TestADefiniteAnswerForgetsTheKeptRequest: a call the vendor answered
// leaves nothing kept; the kept file never holds the request in clear.
func TestADefiniteAnswerForgetsTheKeptRequest(t *testing.T) {
	e := newEnv(t)
	if r := e.charge(t, "order:ok"); r.StatusCode != http.StatusOK || e.kept(t) != 0 {
		t.Fatalf("a definite answer: %d, %d kept", r.StatusCode, e.kept(t))
	}
	e.lost(t, "order:sealed", "after")
	files, _ := filepath.Glob(filepath.Join(e.dir, "recovery", "*.req"))
	if len(files) != 1 {
		t.Fatalf("files: %v", files)
	}
	b, _ := os.ReadFile(files[0])
	for _, clear := range []string{"sk_test_recovery", "cus_1", "payment_intents", "Idempotency-Key"} {
		if bytes.Contains(b, []byte(clear)) {
			t.Fatalf("the kept request holds %q in clear", clear)
		}
	}
	// Under another key the file does not open, and is never sent.
	other, _ := recovery.OpenStore(filepath.Join(e.dir, "recovery"), bytes.Repeat([]byte{7}, 32))
	reqs, bad, err := other.List()
	if err != nil || len(reqs) != 0 || len(bad) != 1 {
		t.Fatalf("under another key: %d %v %v", len(reqs), bad, err)
	}
}

// TestRecoveryStopsWhenTheWindowCloses: past the vendor's key window the
// request is deleted unsent and the effect is left to an operator.
func TestRecoveryStopsWhenTheWindowCloses(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:late", "after")
	e.rec.Clock = func() time.Time { return time.Now().Add(recovery.Window("stripe")) }
	if n := e.rec.Pass(context.Background()); n != 0 || e.kept(t) != 0 || e.obs.get("expired") != 1 {
		t.Fatalf("past the window: sent %d, kept %d, %v", n, e.kept(t), e.obs.n)
	}
	if eff := e.effect(t, id); eff.State != ledger.StateIndeterminate || e.vendor.seen.Load() != 1 {
		t.Fatalf("past the window: %s, seen %d", eff.State, e.vendor.seen.Load())
	}
	if recovery.Window("square") != 0 || recovery.Window("generic") != 0 || recovery.Window("stripe") != 21*time.Hour+36*time.Minute {
		t.Fatal("windows")
	}
}

// TestRecoveryWaitsAndBacksOff: a kept request is not sent before the
// delay, and an answer that is not definite is tried again later.
func TestRecoveryWaitsAndBacksOff(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:slow", "after")
	e.rec.Delay = time.Hour
	if e.rec.Pass(context.Background()) != 0 {
		t.Fatal("sent before the delay")
	}
	e.rec.Delay = time.Nanosecond
	e.rec = &recovery.Recoverer{Store: e.store, Engine: e.eng, Delay: time.Nanosecond, Interval: time.Hour, Observer: e.obs}
	e.vendor.drop.Store("after") // the resend's connection drops too
	if e.rec.Pass(context.Background()) != 1 || e.obs.get("unknown") != 1 || e.effect(t, id).State != ledger.StateIndeterminate {
		t.Fatalf("a resend without an answer: %v", e.obs.n)
	}
	if e.rec.Pass(context.Background()) != 0 {
		t.Fatal("tried again before its backoff")
	}
	if e.vendor.executed.Load() != 1 || e.kept(t) != 1 {
		t.Fatalf("executed %d, kept %d", e.vendor.executed.Load(), e.kept(t))
	}
}

// TestAWebhookALateReportAndARecoveryRaceOnOneEffect: nothing among the
// vendor's signed event, the proxy's late report, recoveries and retried
// calls through the proxy executes the charge twice or settles it twice.
func TestAWebhookALateReportAndARecoveryRaceOnOneEffect(t *testing.T) {
	for round := range 3 {
		e := newEnv(t)
		const secret = "whsec_race"
		hooks := httptest.NewServer(webhooks.New(e.eng, webhooks.Options{Receivers: map[string]vendors.Receiver{"stripe": &stripe.Webhook{Secrets: []string{secret}}}, Hold: -1}))
		key := fmt.Sprintf("order:race:%d", round)
		id := e.lost(t, key, "after")
		reqs, _, _ := e.store.List()
		event := []byte(`{"id":"evt_race","object":"event","type":"payment_intent.succeeded","request":{"id":"req_1","idempotency_key":"` +
			reqs[0].VendorKey + `"},"data":{"object":{"id":"pi_1","object":"payment_intent","amount":2000,"amount_received":2000,"currency":"usd"}}}`)
		sig := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: event, Secret: secret}).Header
		var wg sync.WaitGroup
		var executes atomic.Int64
		for i := range 24 {
			wg.Go(func() {
				switch i % 4 {
				case 0:
					req, _ := http.NewRequest(http.MethodPost, hooks.URL+webhooks.PathPrefix+"stripe", bytes.NewReader(event))
					req.Header.Set("Stripe-Signature", sig)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				case 1:
					e.eng.Report(context.Background(), ledger.ReportRequest{EffectID: id, Attempt: 1, Outcome: ledger.OutcomeSucceeded,
						VendorReference: "pi_1"})
				case 2:
					e.rec.Pass(context.Background())
				case 3:
					if r := e.charge(t, key); r.Header.Get("Ratchet-Decision") == string(ledger.DecisionExecute) {
						executes.Add(1)
					}
				}
			})
		}
		wg.Wait()
		hooks.Close()
		eff := e.effect(t, id)
		if executes.Load() != 0 || e.vendor.executed.Load() != 1 || eff.State != ledger.StateSucceeded || eff.Attempt != 1 {
			t.Fatalf("round %d: %d executes through the proxy, %d at the vendor, effect %s attempt %d",
				round, executes.Load(), e.vendor.executed.Load(), eff.State, eff.Attempt)
		}
		if e.rec.Pass(context.Background()); e.kept(t) != 0 {
			t.Fatalf("round %d: a request is still kept after the effect settled", round)
		}
	}
}

// TestRecoveryReadsACompressedAnswer: the caller's Accept-Encoding is not
// sent again, so a vendor that compresses its answer is read as JSON (the
// object id settles the effect).
func TestRecoveryReadsACompressedAnswer(t *testing.T) {
	e := newEnv(t)
	e.vendor.gzip.Store(true)
	id := e.lost(t, "order:gzip", "after")
	e.rec.Pass(context.Background())
	if eff := e.effect(t, id); eff.State != ledger.StateSucceeded || eff.VendorReference != "pi_1" {
		t.Fatalf("after recovery: %+v", eff)
	}
}

// TestAResendRefusedAtTheVendorsFrontDoorIsNotAFailure: the charge went
// through and its answer was lost; the resend is refused before the
// vendor looks at its key (a rolled key 401, a restricted key 403, a rate
// limit 429, a routing 404, a 500). None of these is the stored result of
// the first request, so the effect stays indeterminate, the request kept
// and the retry blocked; the next pass, answered, settles it succeeded,
// and the vendor executed once.
func TestAResendRefusedAtTheVendorsFrontDoorIsNotAFailure(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		body   string
	}{
		{"401 rolled key", 401, `{"error":{"message":"Invalid API Key provided: sk_test_****very","type":"invalid_request_error"}}`},
		{"403 restricted key", 403, `{"error":{"message":"The provided key 'rk_test_***' does not have the required permissions for this endpoint.","type":"invalid_request_error"}}`},
		{"429 rate limit", 429, `{"error":{"message":"Too many requests hit the API too quickly.","type":"invalid_request_error","code":"rate_limit"}}`},
		{"404 not found", 404, `{"error":{"message":"Unrecognized request URL (POST: /v1/payment_intents).","type":"invalid_request_error"}}`},
		{"500", 500, `{"error":{"message":"An unknown error occurred","type":"api_error"}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			id := e.lost(t, "order:frontdoor", "after") // executed once at the vendor
			e.vendor.refusal.Store(c.body)
			e.vendor.refuse.Store(int64(c.status))
			e.rec.Pass(context.Background())
			eff := e.effect(t, id)
			r := e.charge(t, "order:frontdoor")
			if eff.State != ledger.StateIndeterminate || e.vendor.executed.Load() != 1 || e.kept(t) != 1 ||
				r.Header.Get("Ratchet-Decision") != string(ledger.DecisionBlocked) || e.obs.get("unknown") != 1 {
				t.Fatalf("resend answered %d: effect %s by %s; retry decision %s; executed %d; kept %d; %v",
					c.status, eff.State, eff.ResolvedBy, r.Header.Get("Ratchet-Decision"), e.vendor.executed.Load(), e.kept(t), e.obs.n)
			}
			rec := &recovery.Recoverer{Store: e.store, Engine: e.eng, Delay: time.Nanosecond, Observer: e.obs}
			rec.Pass(context.Background())
			if eff := e.effect(t, id); eff.State != ledger.StateSucceeded || e.vendor.executed.Load() != 1 || e.kept(t) != 0 {
				t.Fatalf("the next resend: %s, executed %d, kept %d", eff.State, e.vendor.executed.Load(), e.kept(t))
			}
		})
	}
}

// TestADeclineAnsweredToAResendSettlesTheEffectFailed: the vendor never
// saw the first request, and the resend, the one execution under the
// key, is declined (402): that is the key's result, so the effect
// settles failed and the retry is a new attempt.
func TestADeclineAnsweredToAResendSettlesTheEffectFailed(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:declined", "before")
	e.vendor.refusal.Store(`{"error":{"type":"card_error","code":"card_declined","message":"Your card was declined."}}`)
	e.vendor.refuse.Store(http.StatusPaymentRequired)
	e.rec.Pass(context.Background())
	if eff := e.effect(t, id); eff.State != ledger.StateFailed || eff.ResolvedBy != "recovery:stripe" || e.kept(t) != 0 {
		t.Fatalf("a declined resend: %+v", eff)
	}
	if r := e.charge(t, "order:declined"); r.Header.Get("Ratchet-Decision") != string(ledger.DecisionExecute) {
		t.Fatalf("the retry after a decline: %v", r.Header)
	}
}

// racingEngine is the ledger, with a hook that runs right after the
// recoverer's first read of the effect (the gap between its check and its
// send).
type racingEngine struct {
	recovery.Engine
	afterGet func()
}

func (r *racingEngine) Get(ctx context.Context, ns, id, key string) (*ledger.Effect, error) {
	eff, err := r.Engine.Get(ctx, ns, id, key)
	if f := r.afterGet; f != nil {
		r.afterGet = nil
		f()
	}
	return eff, err
}

// TestAResendNeverFollowsAnEffectThatMovedOn: the vendor never saw
// attempt 1. Between the recoverer's check and its send, an agent checks
// at the vendor (nothing there), resolves it failed and retries (attempt 2
// charges). The recoverer reads the effect again right before the send,
// sees it moved on, and forgets attempt 1's request: the vendor executed
// once.
func TestAResendNeverFollowsAnEffectThatMovedOn(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:toctou", "before")
	re := &racingEngine{Engine: e.eng}
	re.afterGet = func() {
		if _, err := e.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeFailed,
			ResolvedBy: "agent", Note: "no such payment at Stripe"}); err != nil {
			t.Errorf("resolve: %v", err)
		}
		if r := e.charge(t, "order:toctou"); r.Header.Get("Ratchet-Decision") != string(ledger.DecisionExecute) {
			t.Errorf("attempt 2: %v", r.Header)
		}
	}
	e.rec.Engine = re
	e.rec.Pass(context.Background())
	eff := e.effect(t, id)
	if n := e.vendor.executed.Load(); n != 1 || e.kept(t) != 0 || e.obs.get("dropped") != 1 || e.obs.get("tried") != 0 {
		t.Fatalf("one effect, executed %d times at the vendor (effect %s, attempt %d, kept %d, recoveries %v)",
			n, eff.State, eff.Attempt, e.kept(t), e.obs.n)
	}
}

// claimingEngine is an engine that holds recovery claims (recovery.Claimer,
// as the ledger does with the settlement-claim patch): a claim is refused
// unless the effect is indeterminate on the attempt, and the log shows
// what happened in which order.
type claimingEngine struct {
	recovery.Engine
	mu  sync.Mutex
	log []string
}

func (c *claimingEngine) note(s string) {
	c.mu.Lock()
	c.log = append(c.log, s)
	c.mu.Unlock()
}

func (c *claimingEngine) ClaimRecovery(ctx context.Context, id string, attempt int, ttl time.Duration) (*ledger.Effect, error) {
	eff, err := c.Engine.Get(ctx, "", id, "")
	if err != nil {
		return nil, err
	}
	if eff.State != ledger.StateIndeterminate || eff.Attempt != attempt {
		c.note("refused")
		return nil, ledger.ErrInvalidStateTransition
	}
	c.note(fmt.Sprintf("claim %d %v", attempt, ttl >= 60*time.Second))
	return eff, nil
}

func (c *claimingEngine) ReleaseRecovery(ctx context.Context, id string, attempt int) error {
	c.note(fmt.Sprint("release ", attempt))
	return nil
}

func (c *claimingEngine) Settle(ctx context.Context, req ledger.SettleRequest) (*ledger.SettleResult, error) {
	c.note("settle")
	return c.Engine.Settle(ctx, req)
}

// TestAResendIsSentUnderARecoveryClaim: with an engine that holds recovery
// claims, the recoverer claims the attempt (for at least the resend's
// timeout) before it sends, settles under the claim and releases it; an
// effect that moved on refuses the claim and its request is forgotten
// unsent.
func TestAResendIsSentUnderARecoveryClaim(t *testing.T) {
	e := newEnv(t)
	id := e.lost(t, "order:claimed", "after")
	ce := &claimingEngine{Engine: e.eng}
	e.rec.Engine = ce
	e.rec.Pass(context.Background())
	if got := strings.Join(ce.log, ", "); got != "claim 1 true, settle, release 1" || e.effect(t, id).State != ledger.StateSucceeded {
		t.Fatalf("the resend's claim: %s; effect %s", got, e.effect(t, id).State)
	}
	ce.log = nil
	id = e.lost(t, "order:moved", "before")
	if _, err := e.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeFailed,
		ResolvedBy: "operator"}); err != nil {
		t.Fatal(err)
	}
	seen := e.vendor.seen.Load()
	e.rec.Pass(context.Background())
	if e.vendor.seen.Load() != seen || e.kept(t) != 0 {
		t.Fatalf("a moved-on effect: %v, vendor saw %d more, kept %d", ce.log, e.vendor.seen.Load()-seen, e.kept(t))
	}
}

// TestUnreadableKeptRequestsAreDeletedPastEveryWindow: a kept request that
// no longer opens (its key file was lost and recreated) is never sent;
// once it is older than every vendor's key window it could be sent for
// none, and it is deleted (the sealed request holds credentials). Serve
// does not start with the key file missing while kept requests exist.
func TestUnreadableKeptRequestsAreDeletedPastEveryWindow(t *testing.T) {
	e := newEnv(t)
	e.lost(t, "order:orphan", "after")
	keyFile, dir := filepath.Join(e.dir, "recovery.key"), filepath.Join(e.dir, "recovery")
	os.Remove(keyFile)
	if _, err := recovery.LoadOrCreateKeyFor(keyFile, dir); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a missing key with kept requests: %v", err)
	}
	if _, err := os.Stat(keyFile); err == nil {
		t.Fatal("a new key was created beside requests sealed under the old one")
	}
	key, _ := recovery.LoadOrCreateKey(keyFile) // another key, as after a careless restore
	st, _ := recovery.OpenStore(dir, key)
	obs := &counts{}
	r := &recovery.Recoverer{Store: st, Engine: e.eng, Delay: time.Nanosecond, Observer: obs}
	r.Pass(context.Background())
	if files, _ := filepath.Glob(filepath.Join(dir, "*.req")); len(files) != 1 || obs.get("unreadable") != 1 {
		t.Fatalf("inside the windows: %d kept, %v", len(files), obs.n)
	}
	r.Clock = func() time.Time { return time.Now().Add(30 * 24 * time.Hour) }
	r.Pass(context.Background())
	if files, _ := filepath.Glob(filepath.Join(dir, "*.req")); len(files) != 0 || obs.get("expired") != 1 {
		t.Fatalf("30 days later, past every vendor's window: %d kept request(s) still on disk, %v", len(files), obs.n)
	}
}

// TestTheRecoveryKeyAndStoreAreTheOwnersAlone: a key file its group or
// others may read is refused, and the store's directory is made 0700
// however it was created.
func TestTheRecoveryKeyAndStoreAreTheOwnersAlone(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "recovery.key")
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		os.WriteFile(p, []byte(strings.Repeat("ab", 32)+"\n"), mode)
		os.Chmod(p, mode)
		if _, err := recovery.LoadOrCreateKey(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Fatalf("a key file of mode %04o: %v", mode, err)
		}
	}
	os.Chmod(p, 0o600)
	if k, err := recovery.LoadOrCreateKey(p); err != nil || len(k) != 32 {
		t.Fatalf("a key file of mode 0600: %v", err)
	}
	store := filepath.Join(dir, "recovery")
	os.MkdirAll(store, 0o755)
	os.Chmod(store, 0o755)
	if _, err := recovery.OpenStore(store, make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(store); fi.Mode().Perm() != 0o700 {
		t.Fatalf("store dir mode %v", fi.Mode().Perm())
	}
}
