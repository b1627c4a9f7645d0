package notify_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
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

// workflowsWebhook is a fake of a Microsoft Teams Workflows webhook ("Send
// webhook alerts to a channel"), shaped after Microsoft's documentation
// (Microsoft Teams docs, "Send Adaptive Cards using an Incoming Webhook";
// Microsoft Support, "Create incoming webhooks with Workflows for
// Microsoft Teams"): a POST of JSON whose "type" must be "message", whose
// "attachments" hold cards, each with contentType
// application/vnd.microsoft.card.adaptive and the card in "content" (type
// AdaptiveCard, a version, a body); of actions only Action.OpenUrl,
// Action.ShowCard and Action.ToggleVisibility are supported. The flow
// answers 202 Accepted, and 400 to a body it cannot take.
type workflowsWebhook struct {
	mu    sync.Mutex
	cards []map[string]any
	bad   []string
}

func (f *workflowsWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	refuse := func(why string) { f.bad = append(f.bad, why); http.Error(w, why, http.StatusBadRequest) }
	if r.Method != http.MethodPost || r.URL.Query().Get("sig") == "" {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var msg struct {
		Type        string `json:"type"`
		Attachments []struct {
			ContentType string         `json:"contentType"`
			Content     map[string]any `json:"content"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		refuse("not JSON")
		return
	}
	if msg.Type != "message" || len(msg.Attachments) == 0 {
		refuse("type must be message, with attachments")
		return
	}
	for _, a := range msg.Attachments {
		if a.ContentType != "application/vnd.microsoft.card.adaptive" || a.Content["type"] != "AdaptiveCard" || a.Content["version"] == nil || a.Content["body"] == nil {
			refuse("an attachment that is not an Adaptive Card")
			return
		}
		acts, _ := a.Content["actions"].([]any)
		for _, ac := range acts {
			switch ac.(map[string]any)["type"] {
			case "Action.OpenUrl", "Action.ShowCard", "Action.ToggleVisibility":
			default:
				refuse("an unsupported action")
				return
			}
		}
		f.cards = append(f.cards, a.Content)
	}
	w.WriteHeader(http.StatusAccepted)
}

func (f *workflowsWebhook) snapshot() ([]map[string]any, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.cards...), append([]string(nil), f.bad...)
}

// An approval request reaches Teams as an Adaptive Card whose button opens
// the approval's page in the console, where an approver decides. What the
// agent wrote (here an agent id shaped as a Markdown link) is only ever
// in TextRuns, which Teams renders without Markdown, its URL defanged.
func TestATeamsCardOpensTheApprovalsConsolePage(t *testing.T) {
	hook := &workflowsWebhook{}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	eng := newEngine(t, []notify.Route{{Sinks: []string{"teams"}}})
	runWorker(t, &notify.Worker{Outbox: eng, Poll: 5 * time.Millisecond, Sinks: map[string]notify.Sink{"teams": &notify.Teams{
		URL: srv.URL + "/workflows/abc/triggers/manual/paths/invoke?api-version=1&sig=S3CRETSIG", ConsoleURL: "https://ratchet.example.com"}}})
	req := payment("order-1")
	req.AgentID = "[click me](https://evil.example.com)"
	res, err := eng.Begin(context.Background(), req)
	if err != nil || res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("begin: %v %+v", err, res)
	}
	eventually(t, 2*time.Second, "the card reaches Teams", func() bool { cards, _ := hook.snapshot(); return len(cards) == 1 })
	cards, bad := hook.snapshot()
	if len(bad) > 0 {
		t.Fatalf("the fake Workflows webhook refused: %v", bad)
	}
	card := cards[0]
	acts, _ := card["actions"].([]any)
	if len(acts) != 1 {
		t.Fatalf("card actions %v, want one button", card["actions"])
	}
	a := acts[0].(map[string]any)
	if diff := cmp.Diff(map[string]any{"type": "Action.OpenUrl", "title": "Review the approval", "url": "https://ratchet.example.com/approvals/" + res.ApprovalID}, a); diff != "" {
		t.Errorf("the button (-want +got):\n%s", diff)
	}
	b, _ := json.Marshal(card)
	if strings.Contains(string(b), `{"amount":150}`) || strings.Contains(string(b), "order-1") {
		t.Errorf("the card carries the payload or the idempotency key: %s", b)
	}
	for _, el := range card["body"].([]any) {
		el := el.(map[string]any)
		if el["type"] == "TextBlock" && strings.Contains(el["text"].(string), "evil.example.com") {
			t.Errorf("an agent's value is in a TextBlock, which Teams renders as Markdown: %v", el)
		}
	}
	if !strings.Contains(string(b), `"text":"namespace shop, agent [click me](https[:]//evil.example.com)"`) {
		t.Errorf("the agent's id is not shown as plain text in a TextRun: %s", b)
	}
}

// The Workflows URL is a secret (its sig lets anyone post to the
// channel): a failed delivery's error, which is logged and kept in the
// outbox, does not quote it.
func TestATeamsDeliveryErrorDoesNotQuoteTheWebhookURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	tm := &notify.Teams{URL: "http://" + addr + "/workflows/abc?sig=S3CRETSIG"}
	err = tm.Deliver(context.Background(), ledger.OutboxEntry{Event: ledger.Event{ID: "evt_1", Type: ledger.EventHaltStarted}})
	if err == nil {
		t.Fatal("a delivery to a dead address succeeded")
	}
	if strings.Contains(err.Error(), "S3CRETSIG") {
		t.Errorf("the error quotes the webhook's signature: %v", err)
	}
}
