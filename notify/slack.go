package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// The action ids of the buttons; each button's value is the approval id.
const (
	ActionApprove = "ratchet_approve"
	ActionReject  = "ratchet_reject"
)

// Refs is where the Slack sink remembers the message of each approval
// request (the engine: PutSinkRef, SinkRef).
type Refs interface {
	PutSinkRef(ctx context.Context, sink, ref string, value []byte) error
	SinkRef(ctx context.Context, sink, ref string) ([]byte, error)
}

// Slack is the Slack sink.
type Slack struct {
	// Name is the sink's name, under which its references are kept.
	// Required.
	Name string
	// Client is the Slack Web API client (slack.New with the bot token;
	// slack.OptionAPIURL points it elsewhere, as tests do). Required.
	Client *slack.Client
	// Channel is the channel id the messages go to. Required.
	Channel string
	// Refs keeps the messages of approval requests. Required.
	Refs Refs
}

var _ Sink = (*Slack)(nil)

// messageRef is where a request's message is.
type messageRef struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// Deliver implements Sink.
func (s *Slack) Deliver(ctx context.Context, en ledger.OutboxEntry) error {
	ev := en.Event
	switch ev.Type {
	case ledger.EventApprovalRequested:
		if ev.ApprovalID == "" {
			return s.post(ctx, summary(ev))
		}
		if _, err := s.Refs.SinkRef(ctx, s.Name, ev.ApprovalID); err == nil {
			return nil // posted by an attempt whose record was lost
		}
		blocks := []slack.Block{
			slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, requestText(ev), false, false), nil, nil),
			slack.NewActionBlock("ratchet:"+ev.ApprovalID,
				slack.NewButtonBlockElement(ActionApprove, ev.ApprovalID, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)).WithStyle(slack.StylePrimary),
				slack.NewButtonBlockElement(ActionReject, ev.ApprovalID, slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false)).WithStyle(slack.StyleDanger),
			),
		}
		ch, ts, err := s.Client.PostMessageContext(ctx, s.Channel, slack.MsgOptionText(plain(requestText(ev)), false), slack.MsgOptionBlocks(blocks...))
		if err != nil {
			return slackError("posting the approval request", err)
		}
		b, _ := json.Marshal(messageRef{Channel: ch, TS: ts})
		return s.Refs.PutSinkRef(ctx, s.Name, ev.ApprovalID, b)
	case ledger.EventApprovalDecided, ledger.EventApprovalExpired:
		text := outcomeText(ev)
		if ev.ApprovalID != "" {
			if b, err := s.Refs.SinkRef(ctx, s.Name, ev.ApprovalID); err == nil {
				var ref messageRef
				if json.Unmarshal(b, &ref) == nil && ref.TS != "" {
					blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
					_, _, _, err := s.Client.UpdateMessageContext(ctx, ref.Channel, ref.TS, slack.MsgOptionText(plain(text), false), slack.MsgOptionBlocks(blocks...))
					return slackError("updating the approval's message", err)
				}
			} else if !errors.Is(err, ledger.ErrNotFound) {
				return err
			}
		}
		// Its request was not posted here (yet: its delivery may be
		// failing). Post the outcome, and keep it as the request's message,
		// so that a late delivery of the request posts no buttons.
		ch, ts, err := s.Client.PostMessageContext(ctx, s.Channel, slack.MsgOptionText(plain(text), false),
			slack.MsgOptionBlocks(slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)))
		if err != nil {
			return slackError("posting the approval's outcome", err)
		}
		if ev.ApprovalID == "" {
			return nil
		}
		b, _ := json.Marshal(messageRef{Channel: ch, TS: ts})
		return s.Refs.PutSinkRef(ctx, s.Name, ev.ApprovalID, b)
	}
	return s.post(ctx, summary(ev))
}

func (s *Slack) post(ctx context.Context, text string) error {
	_, _, err := s.Client.PostMessageContext(ctx, s.Channel, slack.MsgOptionText(text, false))
	return slackError("posting a message", err)
}

// slackError wraps err; Slack's refusals that no retry fixes (a wrong
// channel, a revoked token) are permanent.
func slackError(doing string, err error) error {
	if err == nil {
		return nil
	}
	switch err.Error() {
	case "channel_not_found", "not_in_channel", "invalid_auth", "not_authed", "account_inactive", "token_revoked", "is_archived":
		return fmt.Errorf("%w: %s: %v", ErrPermanent, doing, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// money renders micro-USD as dollars.
func money(micros *int64) string {
	if micros == nil {
		return "no declared cost"
	}
	return fmt.Sprintf("$%.2f", float64(*micros)/1e6)
}

func labels(ev ledger.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "namespace `%s`", ev.Namespace)
	if ev.AgentID != "" {
		fmt.Fprintf(&b, ", agent `%s`", ev.AgentID)
	}
	if ev.RunID != "" {
		fmt.Fprintf(&b, ", run `%s`", ev.RunID)
	}
	return b.String()
}

func requestText(ev ledger.Event) string {
	return fmt.Sprintf("*Approval requested:* `%s` for %s (%s)\nApproval `%s`, effect `%s`",
		ev.EffectType, money(ev.CostMicros), labels(ev), ev.ApprovalID, ev.EffectID)
}

func outcomeText(ev ledger.Event) string {
	what := "Expired"
	switch {
	case ev.Type == ledger.EventApprovalDecided && ev.State == ledger.StateRejected:
		what = "Rejected by " + who(ev.Actor)
	case ev.Type == ledger.EventApprovalDecided:
		what = "Approved by " + who(ev.Actor)
	}
	return fmt.Sprintf("*%s:* `%s` for %s (%s)\nApproval `%s`, effect `%s`",
		what, ev.EffectType, money(ev.CostMicros), labels(ev), ev.ApprovalID, ev.EffectID)
}

// who renders an actor: a Slack user as a mention.
func who(actor string) string {
	if id, ok := strings.CutPrefix(actor, "slack:"); ok {
		return "<@" + id + ">"
	}
	if actor == "" {
		return "an operator"
	}
	return "`" + actor + "`"
}

func summary(ev ledger.Event) string {
	switch ev.Type {
	case ledger.EventEffectIndeterminate:
		return fmt.Sprintf("*Unresolved effect:* `%s` `%s` (%s) is indeterminate (%s): check at the vendor and resolve it (`ratchet effects resolve %s`).",
			ev.EffectType, ev.EffectID, labels(ev), ev.Reason, ev.EffectID)
	case ledger.EventIntegrationWarning:
		return fmt.Sprintf("*Integration warning:* agent `%s` in namespace `%s` has %d effects whose leases expired without a report.",
			ev.AgentID, ev.Namespace, ev.Count)
	}
	return fmt.Sprintf("*%s* (%s) %s", ev.Type, labels(ev), ev.Reason)
}

// plain is the notification text of a message with blocks.
func plain(md string) string {
	return strings.NewReplacer("*", "", "`", "").Replace(strings.SplitN(md, "\n", 2)[0])
}

// Decider is what the interactivity endpoint needs from the engine.
type Decider interface {
	Approve(ctx context.Context, approvalID, decidedBy, note string) (*ledger.Approval, error)
	Reject(ctx context.Context, approvalID, decidedBy, note string) (*ledger.Approval, error)
}

// SlackInteractions serves Slack's interactivity requests (the Request
// URL of the Slack app's Interactivity settings).
type SlackInteractions struct {
	// Engine decides. Required.
	Engine Decider
	// SigningSecret is the Slack app's signing secret. Required.
	SigningSecret string
	// Deciders are the Slack user ids who may approve or reject.
	Deciders map[string]bool
	// DeciderGroups are Slack user group ids (S…) whose members may
	// decide too, looked up through Client (scope usergroups:read) at most
	// once every GroupTTL.
	DeciderGroups []string
	// Client looks up DeciderGroups; required with them.
	Client *slack.Client
	// GroupTTL is how long a group's members are remembered; zero means a
	// minute.
	GroupTTL time.Duration
	// Logger gets a line per decision and per refusal; nil discards.
	Logger *slog.Logger

	mu      sync.Mutex
	members map[string]bool // of DeciderGroups, as last looked up
	fetched time.Time
}

// allowed reports whether a Slack user may decide: listed, or a member of
// a listed group. A group lookup that fails allows no one through it.
func (h *SlackInteractions) allowed(ctx context.Context, user string, log *slog.Logger) bool {
	if h.Deciders[user] {
		return true
	}
	if len(h.DeciderGroups) == 0 || h.Client == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	ttl := h.GroupTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	if h.members == nil || time.Since(h.fetched) > ttl {
		members := map[string]bool{}
		for _, g := range h.DeciderGroups {
			ids, err := h.Client.GetUserGroupMembersContext(ctx, g)
			if err != nil {
				log.Warn("looking up a Slack user group of deciders", "group", g, "err", err)
				return false
			}
			for _, id := range ids {
				members[id] = true
			}
		}
		h.members, h.fetched = members, time.Now()
	}
	return h.members[user]
}

// maxInteractionBytes bounds an interactivity request.
const maxInteractionBytes = 64 << 10

// ServeHTTP implements http.Handler: verify, authorise, decide.
func (h *SlackInteractions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxInteractionBytes+1))
	if err != nil || len(body) > maxInteractionBytes {
		http.Error(w, "body too large or unreadable", http.StatusBadRequest)
		return
	}
	// The signature and a timestamp within five minutes (slack-go's
	// verifier checks both) before anything in the body is believed.
	sv, err := slack.NewSecretsVerifier(r.Header, h.SigningSecret)
	if err == nil {
		sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		log.Warn("slack interaction refused: bad or stale signature", "err", err)
		http.Error(w, "invalid Slack signature", http.StatusUnauthorized)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "not a form", http.StatusBadRequest)
		return
	}
	var cb slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &cb); err != nil {
		http.Error(w, "no interaction payload", http.StatusBadRequest)
		return
	}
	if cb.Type != slack.InteractionTypeBlockActions {
		w.WriteHeader(http.StatusOK) // not ours to handle
		return
	}
	user := cb.User.ID
	if !h.allowed(r.Context(), user, log) {
		log.Warn("slack interaction refused: user may not decide", "slack_user", user)
		writeSlackText(w, http.StatusForbidden, "You are not allowed to decide Ratchet approvals.")
		return
	}
	acted := false
	for _, a := range cb.ActionCallback.BlockActions {
		decide := h.Engine.Approve
		switch a.ActionID {
		case ActionApprove:
		case ActionReject:
			decide = h.Engine.Reject
		default:
			continue
		}
		acted = true
		ap, err := decide(r.Context(), a.Value, "slack:"+user, "")
		if err != nil {
			le := ledger.Classify(err)
			log.Warn("slack decision not recorded", "approval_id", a.Value, "slack_user", user, "code", le.Code, "err", err)
			status := http.StatusOK // the message is updated (or says why) by the events; Slack shows an error for others
			if le.Code == ledger.CodeUnavailable || le.Code == ledger.CodeInternal {
				status = http.StatusServiceUnavailable
			}
			writeSlackText(w, status, le.Message)
			return
		}
		log.Info("approval decided in slack", "approval_id", ap.ApprovalID, "effect_id", ap.EffectID, "state", ap.State, "by", "slack:"+user)
	}
	if !acted {
		log.Warn("slack interaction without a Ratchet button", "slack_user", user)
	}
	w.WriteHeader(http.StatusOK)
}

func writeSlackText(w http.ResponseWriter, status int, text string) {
	b, _ := json.Marshal(map[string]any{"response_type": "ephemeral", "replace_original": false, "text": text})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}
