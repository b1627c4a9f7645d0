package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Teams is the Microsoft Teams sink: it posts each event to a Teams
// Workflows webhook (the "Send webhook alerts to a channel" flow) as an
// Adaptive Card, whose button opens the event's console page: the
// approval's for an approval request, where an approver decides.
//
// The request is the documented shape (Microsoft Teams docs, "Send
// Adaptive Cards using an Incoming Webhook", and Microsoft Support,
// "Create incoming webhooks with Workflows for Microsoft Teams"): a JSON
// object of type "message" whose attachments hold one card of contentType
// application/vnd.microsoft.card.adaptive, its content an AdaptiveCard;
// the button is an Action.OpenUrl, which Teams supports in cards sent to
// webhooks (Action.Submit it does not). The flow answers 202 Accepted.
//
// Values an agent wrote are TextRuns of a RichTextBlock, which support no
// Markdown (Adaptive Cards schema, TextRun: "Markdown is not supported"):
// no value can make a link or a mention. TextBlocks and FactSets, which
// Teams renders as Markdown, carry only Ratchet's own words.
type Teams struct {
	// URL is the Workflows webhook's URL: a secret (its sig parameter lets
	// anyone post to the channel), read from a file or the environment,
	// and kept out of errors and logs. Required.
	URL string
	// ConsoleURL is the console's address as approvers reach it; the
	// card's button opens ConsoleLink of it. Required by the config.
	ConsoleURL string
	// Client sends the requests; nil means one with DefaultTimeout.
	// Redirects are never followed.
	Client *http.Client
}

var _ Sink = (*Teams)(nil)

// AdaptiveCardContentType is the contentType of an Adaptive Card
// attachment.
const AdaptiveCardContentType = "application/vnd.microsoft.card.adaptive"

type teamsMessage struct {
	Type        string            `json:"type"`
	Attachments []teamsAttachment `json:"attachments"`
}

type teamsAttachment struct {
	ContentType string       `json:"contentType"`
	ContentURL  *string      `json:"contentUrl"`
	Content     adaptiveCard `json:"content"`
}

type adaptiveCard struct {
	Schema  string           `json:"$schema"`
	Type    string           `json:"type"`
	Version string           `json:"version"`
	Body    []map[string]any `json:"body"`
	Actions []map[string]any `json:"actions,omitempty"`
	MSTeams map[string]any   `json:"msteams,omitempty"`
}

// TeamsCard is the message a Teams sink posts for ev.
func (t *Teams) TeamsCard(ev ledger.Event) any {
	title, lines := plainText(ev)
	run := func(text string, bold bool) map[string]any {
		r := map[string]any{"type": "TextRun", "text": text}
		if bold {
			r["weight"] = "Bolder"
		}
		return r
	}
	body := []map[string]any{{"type": "RichTextBlock", "inlines": []any{run(title, true)}}}
	for _, l := range lines {
		body = append(body, map[string]any{"type": "RichTextBlock", "inlines": []any{run(l, false)}})
	}
	body = append(body, map[string]any{"type": "TextBlock", "text": "Ratchet " + ev.Type + " · " + ev.ID, "isSubtle": true, "size": "Small", "wrap": true})
	card := adaptiveCard{Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: "1.4",
		Body: body, MSTeams: map[string]any{"width": "Full"}}
	if link := ConsoleLink(t.ConsoleURL, ev); link != "" {
		label := "Open in the Ratchet console"
		if ev.Type == ledger.EventApprovalRequested {
			label = "Review the approval"
		}
		card.Actions = []map[string]any{{"type": "Action.OpenUrl", "title": label, "url": link}}
	}
	return teamsMessage{Type: "message", Attachments: []teamsAttachment{{ContentType: AdaptiveCardContentType, Content: card}}}
}

// Deliver implements Sink.
func (t *Teams) Deliver(ctx context.Context, en ledger.OutboxEntry) error {
	b, err := json.Marshal(t.TeamsCard(en.Event))
	if err != nil {
		return fmt.Errorf("%w: encoding the card: %v", ErrPermanent, err)
	}
	// A 400 is a card the flow cannot take: no retry changes it.
	return postJSON(ctx, t.Client, t.URL, b, "the Teams webhook", "ratchet-teams/1")
}
