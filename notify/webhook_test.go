package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// receiver is a webhook receiver that verifies as the package doc tells a
// receiver to, and records what it accepted.
type receiver struct {
	secret []byte
	mu     sync.Mutex
	got    []ledger.Event
	ids    []string // every delivery's id header, duplicates included
	fail   int      // answer 503 to this many requests first
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := notify.VerifyWebhook(rc.secret, r.Header, body, time.Now(), 0); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.ids = append(rc.ids, r.Header.Get(notify.HeaderEventID))
	if rc.fail > 0 {
		rc.fail--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	var ev ledger.Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != r.Header.Get(notify.HeaderEventID) {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	rc.got = append(rc.got, ev)
}

func (rc *receiver) events() []ledger.Event {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]ledger.Event(nil), rc.got...)
}

func (rc *receiver) deliveries() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]string(nil), rc.ids...)
}

func TestAWebhookGetsEachEventSignedWithinASecond(t *testing.T) {
	rc := &receiver{secret: []byte("whsec-test-secret")}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	eng := newEngine(t, []notify.Route{{Sinks: []string{"hook"}}})
	obs := &counts{}
	runWorker(t, &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{"hook": &notify.Webhook{URL: srv.URL, Secret: rc.secret}}, Observer: obs})
	start := time.Now()
	ask := askApproval(t, eng, "order-1")
	eventually(t, time.Second, "the request reaches the webhook", func() bool { return len(rc.events()) == 1 })
	t.Logf("delivered in %v", time.Since(start))
	ev := rc.events()[0]
	if ev.Type != ledger.EventApprovalRequested || ev.ApprovalID != ask.ApprovalID || ev.Namespace != "shop" || ev.ID == "" {
		t.Fatalf("event: %+v", ev)
	}
	if _, err := eng.Approve(context.Background(), ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the decision reaches the webhook", func() bool { return len(rc.events()) == 2 })
	if ev := rc.events()[1]; ev.Type != ledger.EventApprovalDecided || ev.Actor != "alice" {
		t.Fatalf("decision: %+v", ev)
	}
	eventually(t, time.Second, "both deliveries observed", func() bool { return obs.get("hook:delivered") == 2 })
	eventually(t, time.Second, "an empty outbox", func() bool {
		left, _ := eng.Outbox(context.Background(), false)
		return len(left) == 0
	})
}

func TestAFailedDeliveryIsRetriedWithTheSameIDThenDeadLettered(t *testing.T) {
	rc := &receiver{secret: []byte("whsec-test-secret"), fail: 2}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	eng := newEngine(t, []notify.Route{{Sinks: []string{"hook"}, Events: []string{ledger.EventApprovalRequested}}})
	obs := &counts{}
	w := &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{"hook": &notify.Webhook{URL: srv.URL, Secret: rc.secret}},
		Observer: obs, Backoff: 20 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Poll: 5 * time.Millisecond, MaxAttempts: 3}
	runWorker(t, w)
	askApproval(t, eng, "order-1")
	eventually(t, 2*time.Second, "delivered on the third try", func() bool { return len(rc.events()) == 1 })
	ids := rc.deliveries()
	if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] || ids[0] != rc.events()[0].ID {
		t.Fatalf("delivery ids %v, want the same id three times", ids)
	}
	eventually(t, time.Second, "the results observed", func() bool { return obs.get("hook:failed") == 2 && obs.get("hook:delivered") == 1 })

	// A receiver that never takes it: dead after MaxAttempts, kept for
	// the operator, never tried again.
	rc.mu.Lock()
	rc.fail = 1 << 30
	rc.mu.Unlock()
	askApproval(t, eng, "order-2")
	eventually(t, 2*time.Second, "a dead letter", func() bool {
		dead, _ := eng.Outbox(context.Background(), true)
		return len(dead) == 1
	})
	dead, _ := eng.Outbox(context.Background(), true)
	if dead[0].Attempts != 3 || dead[0].LastError == "" || dead[0].Event.Type != ledger.EventApprovalRequested {
		t.Fatalf("dead letter: %+v", dead[0])
	}
	n := len(rc.deliveries())
	time.Sleep(100 * time.Millisecond)
	if len(rc.deliveries()) != n || obs.get("hook:dead") != 1 {
		t.Fatalf("a dead letter was tried again (%d then %d) or not observed (%d)", n, len(rc.deliveries()), obs.get("hook:dead"))
	}
}

func TestVerifyWebhook(t *testing.T) {
	secret := []byte("s3cret")
	body := []byte(`{"id":"evt_1","type":"approval.requested"}`)
	now := time.Unix(1_800_000_000, 0)
	signed := func(ts time.Time, b []byte, key []byte) http.Header {
		h := http.Header{}
		s := strconv.FormatInt(ts.Unix(), 10)
		h.Set(notify.HeaderTimestamp, s)
		h.Set(notify.HeaderSignature, "v1="+notify.Sign(key, s, b))
		return h
	}
	cases := []struct {
		name string
		h    http.Header
		body []byte
		want error
	}{
		{"good", signed(now, body, secret), body, nil},
		{"a minute late", signed(now.Add(-time.Minute), body, secret), body, nil},
		{"body altered", signed(now, body, secret), []byte(`{"id":"evt_2","type":"approval.requested"}`), notify.ErrBadSignature},
		{"another secret", signed(now, body, []byte("other")), body, notify.ErrBadSignature},
		{"replayed after the window", signed(now.Add(-6*time.Minute), body, secret), body, notify.ErrStale},
		{"from the future", signed(now.Add(6*time.Minute), body, secret), body, notify.ErrStale},
		{"unsigned", http.Header{}, body, notify.ErrBadSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := notify.VerifyWebhook(secret, c.h, c.body, now, 0); !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
	// The timestamp is signed: moving it breaks the signature.
	h := signed(now, body, secret)
	h.Set(notify.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
	if err := notify.VerifyWebhook(secret, h, body, now, 0); !errors.Is(err, notify.ErrBadSignature) {
		t.Fatalf("a moved timestamp: %v", err)
	}
}

func TestRouterMatchesByEventNamespaceAndEffectType(t *testing.T) {
	route := notify.Router([]notify.Route{
		{Sinks: []string{"slack"}, Events: []string{ledger.EventApprovalRequested, ledger.EventApprovalDecided}, EffectTypes: []string{"payment.*"}},
		{Sinks: []string{"hook", "slack"}, Namespaces: []string{"shop"}},
	})
	cases := []struct {
		ev   ledger.Event
		want string
	}{
		{ledger.Event{Type: ledger.EventApprovalRequested, Namespace: "other", EffectType: "payment.charge"}, "[slack]"},
		{ledger.Event{Type: ledger.EventApprovalRequested, Namespace: "other", EffectType: "email.send"}, "[]"},
		{ledger.Event{Type: ledger.EventEffectIndeterminate, Namespace: "shop", EffectType: "payment.charge"}, "[hook slack]"},
		{ledger.Event{Type: ledger.EventBudgetThreshold, Namespace: "ops"}, "[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(route(c.ev)); got != c.want {
			t.Errorf("%+v: %s, want %s", c.ev, got, c.want)
		}
	}
}

// A webhook that answers with a redirect has not taken the event: the
// worker does not follow it (it would send the signed event to wherever
// the receiver, or whoever controls its DNS or ingress, points, such as an
// internal address), and the delivery failed.
func TestAWebhookRedirectIsAFailedDeliveryAndNotFollowed(t *testing.T) {
	var hits atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer internal.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/v1/internal-admin", http.StatusTemporaryRedirect)
	}))
	defer hook.Close()
	en := ledger.OutboxEntry{Sink: "h", Event: ledger.Event{ID: "evt_1", Type: ledger.EventApprovalRequested}}
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"the default client", nil}, {"a client of the caller's, which follows redirects", &http.Client{}}} {
		t.Run(c.name, func(t *testing.T) {
			w := &notify.Webhook{URL: hook.URL, Secret: []byte("s"), Client: c.client}
			err := w.Deliver(context.Background(), en)
			if hits.Load() > 0 || err == nil {
				t.Fatalf("the worker followed a redirect to %s (%d requests); Deliver err=%v (nil: counted as delivered)", internal.URL, hits.Load(), err)
			}
			if errors.Is(err, notify.ErrPermanent) {
				t.Fatalf("a redirect is permanent: %v (want tried again)", err)
			}
		})
	}
}
