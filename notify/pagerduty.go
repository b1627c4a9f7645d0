package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// PagerDutyEventsURL is the Events API v2 endpoint (PagerDuty's developer
// docs, "Send an Alert Event": POST https://events.pagerduty.com/v2/enqueue).
const PagerDutyEventsURL = "https://events.pagerduty.com/v2/enqueue"

// PagerDuty is the PagerDuty sink: it pages through the Events API v2.
//
// It triggers an alert for effect.indeterminate (someone must check at
// the vendor), budget.threshold and halt.started, and resolves it on
// effect.determined (the effect's outcome is known again) and halt.lifted.
// Trigger and resolve of one incident share a dedup_key, derived from
// what the incident is about rather than from either event's id, so that
// they pair up in PagerDuty: ratchet:effect:<effect id>:<attempt> and
// ratchet:halt:<halt id>. A budget threshold is resolved by a person (no
// event says a window is over), so its key is its event's id. Retries of
// a delivery send the same key, which PagerDuty dedupes into the open
// alert. Other events routed here are delivered as no-ops: they page no
// one.
//
// The request is the documented shape (PagerDuty developer docs,
// events-API-v2 "Send an Alert Event"): routing_key, event_action
// (trigger or resolve), dedup_key (at most 255 characters) and, for a
// trigger, payload.summary (at most 1024), payload.source,
// payload.severity (critical, error, warning or info), payload.timestamp,
// component, group, class and custom_details, with links. PagerDuty
// answers 202; a 400 is not to be retried (the event is dead at once), a
// 429 or 5xx is (the Events API v2 overview, "Response Codes & Retry
// Logic").
type PagerDuty struct {
	// RoutingKey is the integration key of an Events API v2 integration:
	// a secret (it lets anyone page the service), read from a file or the
	// environment, never logged. Required.
	RoutingKey string
	// URL is the Events API endpoint; empty means PagerDutyEventsURL.
	URL string
	// Source is payload.source; empty means "ratchet".
	Source string
	// ConsoleURL, when set, is the console's address: each alert links
	// the effect's page (see ConsoleLink).
	ConsoleURL string
	// Client sends the requests; nil means one with DefaultTimeout.
	// Redirects are never followed.
	Client *http.Client

	mu       sync.Mutex
	resolved map[string]string // dedup key -> the id of the event that resolved it
}

var _ Sink = (*PagerDuty)(nil)

// maxResolvedKeys bounds what a PagerDuty sink remembers of the incidents
// it resolved.
const maxResolvedKeys = 4096

// pdEvent is an Events API v2 alert event.
type pdEvent struct {
	RoutingKey  string     `json:"routing_key"`
	EventAction string     `json:"event_action"`
	DedupKey    string     `json:"dedup_key"`
	Payload     *pdPayload `json:"payload,omitempty"`
	Client      string     `json:"client,omitempty"`
	ClientURL   string     `json:"client_url,omitempty"`
	Links       []pdLink   `json:"links,omitempty"`
}

type pdPayload struct {
	Summary       string            `json:"summary"`
	Source        string            `json:"source"`
	Severity      string            `json:"severity"`
	Timestamp     string            `json:"timestamp,omitempty"`
	Component     string            `json:"component,omitempty"`
	Group         string            `json:"group,omitempty"`
	Class         string            `json:"class,omitempty"`
	CustomDetails map[string]string `json:"custom_details,omitempty"`
}

type pdLink struct {
	Href string `json:"href"`
	Text string `json:"text,omitempty"`
}

// PagerDutyDedupKey is the dedup_key of the incident an event opens or
// closes, and the action ("trigger" or "resolve"); "" for an event that
// pages no one.
func PagerDutyDedupKey(ev ledger.Event) (key, action string) {
	switch ev.Type {
	case ledger.EventEffectIndeterminate:
		return "ratchet:effect:" + ev.EffectID + ":" + strconv.Itoa(ev.Attempt), "trigger"
	case ledger.EventEffectDetermined:
		return "ratchet:effect:" + ev.EffectID + ":" + strconv.Itoa(ev.Attempt), "resolve"
	case ledger.EventHaltStarted:
		return "ratchet:halt:" + ev.HaltID, "trigger"
	case ledger.EventHaltLifted:
		return "ratchet:halt:" + ev.HaltID, "resolve"
	case ledger.EventBudgetThreshold:
		return "ratchet:budget:" + ev.ID, "trigger"
	}
	return "", ""
}

// severity is an alert's payload.severity: a halt stops everything in its
// scope (critical); an effect whose outcome is unknown may be money spent
// twice or not at all (error); a ceiling nearing its limit is a warning
// until it is reached.
func severity(ev ledger.Event) string {
	switch ev.Type {
	case ledger.EventHaltStarted:
		return "critical"
	case ledger.EventBudgetThreshold:
		if ev.Budget != nil && ev.Budget.Threshold >= 1 {
			return "error"
		}
		return "warning"
	}
	return "error"
}

// Deliver implements Sink.
func (p *PagerDuty) Deliver(ctx context.Context, en ledger.OutboxEntry) error {
	ev := en.Event
	key, action := PagerDutyDedupKey(ev)
	if key == "" {
		return nil // pages no one
	}
	if action == "trigger" && p.resolvedAfter(key, ev.ID) {
		// A trigger retried after its incident's resolve went through
		// (the worker retries each entry on its own): sending it now
		// would open a new alert for something already settled.
		return nil
	}
	body := pdEvent{RoutingKey: p.RoutingKey, EventAction: action, DedupKey: clip(key, 255)}
	if action == "trigger" {
		title, lines := plainText(ev)
		details := map[string]string{"event_id": ev.ID, "event_type": ev.Type, "namespace": ev.Namespace}
		for k, v := range map[string]string{"effect_id": ev.EffectID, "effect_type": ev.EffectType, "agent_id": ev.AgentID,
			"run_id": ev.RunID, "reason": ev.Reason, "halt_id": ev.HaltID, "note": ev.Note, "vendor": ev.Vendor} {
			if v != "" {
				details[k] = inert(v)
			}
		}
		for i, l := range lines {
			details["detail_"+strconv.Itoa(i+1)] = l
		}
		source := p.Source
		if source == "" {
			source = "ratchet"
		}
		body.Payload = &pdPayload{Summary: clip(title, 1024), Source: source, Severity: severity(ev),
			Timestamp: ev.At.UTC().Format(time.RFC3339Nano), Component: "ratchet", Group: inert(ev.Namespace), Class: ev.Type,
			CustomDetails: details}
		body.Client = "Ratchet"
		if link := ConsoleLink(p.ConsoleURL, ev); link != "" {
			body.ClientURL = link
			body.Links = []pdLink{{Href: link, Text: "Open in the Ratchet console"}}
		}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%w: encoding the event: %v", ErrPermanent, err)
	}
	u := p.URL
	if u == "" {
		u = PagerDutyEventsURL
	}
	if err := postJSON(ctx, p.Client, u, b, "PagerDuty", "ratchet-pagerduty/1"); err != nil {
		return err
	}
	if action == "resolve" {
		p.remember(key, ev.ID)
	}
	return nil
}

// resolvedAfter reports whether this process resolved key with an event
// later than id (event ids sort by time).
func (p *PagerDuty) resolvedAfter(key, id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.resolved[key]
	return ok && r > id
}

func (p *PagerDuty) remember(key, id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resolved == nil {
		p.resolved = map[string]string{}
	}
	if len(p.resolved) >= maxResolvedKeys {
		for k := range p.resolved { // forget one at random: a bound, not a cache policy
			delete(p.resolved, k)
			break
		}
	}
	p.resolved[key] = id
}

// clip cuts s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// clientOf is c without following redirects, or the default client.
func clientOf(c *http.Client) *http.Client {
	if c == nil {
		return webhookClient
	}
	cc := *c
	cc.CheckRedirect = noRedirects
	return &cc
}
