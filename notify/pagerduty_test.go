package notify_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// pagerDutyAPI is a fake of PagerDuty's Events API v2, shaped after its
// documentation (PagerDuty developer docs, events-API-v2 "Send an Alert
// Event" and the overview's "Response Codes & Retry Logic"): POST
// /v2/enqueue with a JSON body of routing_key (the integration key),
// event_action trigger, acknowledge or resolve, dedup_key (at most 255
// characters) and, for a trigger, payload.summary (required, at most 1024),
// payload.source (required) and payload.severity (required: critical,
// error, warning or info). It answers 202 {"status":"success",
// "message":"Event processed","dedup_key":…} or 400 {"status":"invalid
// event",…}, and keeps the open alerts by dedup_key as PagerDuty does: a
// trigger opens one (or adds to the open one), a resolve closes it.
type pagerDutyAPI struct {
	key  string
	mu   sync.Mutex
	got  []map[string]any
	open map[string]string // dedup key -> summary
	bad  []string          // why requests were refused
	fail int               // answer 503 to this many requests first
}

func (p *pagerDutyAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v2/enqueue" {
		http.NotFound(w, r)
		return
	}
	if p.fail > 0 {
		p.fail--
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	refuse := func(why string) {
		p.bad = append(p.bad, why)
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]any{"status": "invalid event", "message": "Event object is invalid", "errors": []string{why}})
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		refuse("content type " + ct)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var ev map[string]any
	if err := json.Unmarshal(body, &ev); err != nil {
		refuse("not JSON")
		return
	}
	p.got = append(p.got, ev)
	if ev["routing_key"] != p.key {
		refuse("routing_key")
		return
	}
	key, _ := ev["dedup_key"].(string)
	if len(key) > 255 {
		refuse("dedup_key longer than 255")
		return
	}
	switch ev["event_action"] {
	case "trigger":
		pl, _ := ev["payload"].(map[string]any)
		summary, _ := pl["summary"].(string)
		source, _ := pl["source"].(string)
		sev, _ := pl["severity"].(string)
		switch {
		case summary == "" || len(summary) > 1024:
			refuse("payload.summary")
			return
		case source == "":
			refuse("payload.source")
			return
		case sev != "critical" && sev != "error" && sev != "warning" && sev != "info":
			refuse("payload.severity " + sev)
			return
		}
		if p.open == nil {
			p.open = map[string]string{}
		}
		p.open[key] = summary
	case "resolve", "acknowledge":
		if key == "" {
			refuse("dedup_key is required to " + ev["event_action"].(string))
			return
		}
		if ev["event_action"] == "resolve" {
			delete(p.open, key)
		}
	default:
		refuse("event_action")
		return
	}
	w.WriteHeader(http.StatusAccepted)
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "message": "Event processed", "dedup_key": key})
}

func (p *pagerDutyAPI) snapshot() (got []map[string]any, open map[string]string, bad []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	open = map[string]string{}
	for k, v := range p.open {
		open[k] = v
	}
	return append([]map[string]any(nil), p.got...), open, append([]string(nil), p.bad...)
}

const testRoutingKey = "R0UT1NGKEYR0UT1NGKEYR0UT1NGKEY01"

// An effect whose outcome is unknown pages the on-call person, and its
// resolution closes that very page: trigger and resolve carry one dedup
// key, derived from the effect and its attempt. A halt opens a page of its
// own that its lifting closes. The routing key, a secret, reaches only
// PagerDuty: never the outbox.
func TestPagerDutyPagesForAnIndeterminateEffectAndAHaltAndResolvesWhenSettled(t *testing.T) {
	api := &pagerDutyAPI{key: testRoutingKey}
	srv := httptest.NewServer(api)
	defer srv.Close()
	eng := newEngine(t, []notify.Route{{Sinks: []string{"pager"}}})
	obs := &counts{}
	runWorker(t, &notify.Worker{Outbox: eng, Observer: obs, Poll: 5 * time.Millisecond, Sinks: map[string]notify.Sink{"pager": &notify.PagerDuty{
		RoutingKey: testRoutingKey, URL: srv.URL + "/v2/enqueue", ConsoleURL: "https://ratchet.example.com/"}}})
	ctx := context.Background()

	res, err := eng.Begin(ctx, ledger.BeginRequest{Namespace: "shop", IdempotencyKey: "mail-1", EffectType: "email.send", AgentID: "bot",
		Payload: json.RawMessage(`{"to":"secret-recipient@example.com"}`)})
	if err != nil || res.Decision != ledger.DecisionExecute {
		t.Fatalf("begin: %v %+v", err, res)
	}
	if _, err := eng.Report(ctx, ledger.ReportRequest{Namespace: "shop", EffectID: res.EffectID, Outcome: ledger.OutcomeUnknown, AgentID: "bot"}); err != nil {
		t.Fatal(err)
	}
	effectKey := "ratchet:effect:" + res.EffectID + ":1"
	eventually(t, 2*time.Second, "the indeterminate effect pages", func() bool { _, open, _ := api.snapshot(); return open[effectKey] != "" })
	got, open, _ := api.snapshot()
	trig := got[0]
	if diff := cmp.Diff(map[string]any{"event_action": "trigger", "dedup_key": effectKey, "severity": "error", "source": "ratchet",
		"client_url": "https://ratchet.example.com/effects/" + res.EffectID}, map[string]any{
		"event_action": trig["event_action"], "dedup_key": trig["dedup_key"], "severity": trig["payload"].(map[string]any)["severity"],
		"source": trig["payload"].(map[string]any)["source"], "client_url": trig["client_url"]}); diff != "" {
		t.Errorf("the trigger (-want +got):\n%s", diff)
	}
	if s := open[effectKey]; !strings.Contains(s, res.EffectID) || !strings.Contains(s, "indeterminate") {
		t.Errorf("the alert's summary %q does not name the effect and its state", s)
	}

	if _, err := eng.Resolve(ctx, ledger.ResolveRequest{EffectID: res.EffectID, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:alice"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "the resolve closes the alert", func() bool { _, open, _ := api.snapshot(); return open[effectKey] == "" })

	h, err := eng.Halt(ctx, ledger.HaltRequest{HaltScope: ledger.HaltScope{Namespace: "shop"}, Note: "refund loop", CreatedBy: "admin:alice"})
	if err != nil {
		t.Fatal(err)
	}
	haltKey := "ratchet:halt:" + h.HaltID
	eventually(t, 2*time.Second, "the halt pages", func() bool { _, open, _ := api.snapshot(); return open[haltKey] != "" })
	if _, err := eng.Lift(ctx, h.HaltID, "admin:bob"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "lifting the halt closes its alert", func() bool { _, open, _ := api.snapshot(); return len(open) == 0 })

	got, _, bad := api.snapshot()
	if len(bad) > 0 {
		t.Errorf("the fake Events API refused requests: %v", bad)
	}
	var actions []string
	for _, g := range got {
		actions = append(actions, g["event_action"].(string)+" "+g["dedup_key"].(string))
	}
	if diff := cmp.Diff([]string{"trigger " + effectKey, "resolve " + effectKey, "trigger " + haltKey, "resolve " + haltKey}, actions); diff != "" {
		t.Errorf("the requests PagerDuty got (-want +got):\n%s", diff)
	}
	entries, _ := eng.Outbox(ctx, false)
	b, _ := json.Marshal(entries)
	if strings.Contains(string(b), testRoutingKey) {
		t.Errorf("the routing key is in the outbox: %s", b)
	}
	for _, g := range got {
		if b, _ := json.Marshal(g); strings.Contains(string(b), "secret-recipient") {
			t.Errorf("a payload reached PagerDuty: %s", b)
		}
	}
}

// A trigger whose delivery failed, and is retried only after the resolve
// of its incident went through, opens nothing: the incident is over, and
// PagerDuty would open a new alert for it (a trigger with the dedup_key of
// a resolved alert creates a new one, per "Alert De-Duplication").
func TestAPagerDutyTriggerRetriedAfterItsResolveOpensNothing(t *testing.T) {
	api := &pagerDutyAPI{key: testRoutingKey}
	srv := httptest.NewServer(api)
	defer srv.Close()
	pd := &notify.PagerDuty{RoutingKey: testRoutingKey, URL: srv.URL + "/v2/enqueue"}
	trigger := ledger.OutboxEntry{Sink: "pager", Event: ledger.Event{ID: "evt_01A", Type: ledger.EventEffectIndeterminate, EffectID: "eff_1", Attempt: 1}}
	resolve := ledger.OutboxEntry{Sink: "pager", Event: ledger.Event{ID: "evt_01B", Type: ledger.EventEffectDetermined, EffectID: "eff_1", Attempt: 1}}
	if err := pd.Deliver(context.Background(), resolve); err != nil {
		t.Fatal(err)
	}
	if err := pd.Deliver(context.Background(), trigger); err != nil {
		t.Fatal(err)
	}
	got, open, _ := api.snapshot()
	if len(open) != 0 || len(got) != 1 {
		t.Errorf("PagerDuty got %d requests, open alerts %v; want only the resolve and no alert", len(got), open)
	}
}

// A request PagerDuty refuses with 400 is not retried (its docs: "Bad
// Request - Check that the JSON is valid", retry: no): a dead letter at
// once. A 503 is retried.
func TestAPagerDutyRefusalIsPermanentAndAnOutageIsRetried(t *testing.T) {
	api := &pagerDutyAPI{key: "another-key"}
	srv := httptest.NewServer(api)
	defer srv.Close()
	en := ledger.OutboxEntry{Sink: "pager", Event: ledger.Event{ID: "evt_1", Type: ledger.EventHaltStarted, HaltID: "hlt_1"}}
	err := (&notify.PagerDuty{RoutingKey: testRoutingKey, URL: srv.URL + "/v2/enqueue"}).Deliver(context.Background(), en)
	if !isPermanent(err) {
		t.Errorf("a 400: %v, want a permanent failure", err)
	}
	if err != nil && strings.Contains(err.Error(), testRoutingKey) {
		t.Errorf("the error names the routing key: %v", err)
	}
	api.mu.Lock()
	api.key, api.fail = testRoutingKey, 1
	api.mu.Unlock()
	err = (&notify.PagerDuty{RoutingKey: testRoutingKey, URL: srv.URL + "/v2/enqueue"}).Deliver(context.Background(), en)
	if err == nil || isPermanent(err) {
		t.Errorf("a 503: %v, want a failure to retry", err)
	}
}
