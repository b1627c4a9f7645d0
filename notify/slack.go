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
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

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
		ch, ts, err := s.Client.PostMessageContext(ctx, s.Channel, fallback(requestText(plain, ev)), slack.MsgOptionBlocks(requestBlocks(requestText(mrkdwn, ev), ev.ApprovalID)...))
		if err != nil {
			return slackError("posting the approval request", err)
		}
		b, _ := json.Marshal(messageRef{Channel: ch, TS: ts})
		return s.Refs.PutSinkRef(ctx, s.Name, ev.ApprovalID, b)
	case ledger.EventApprovalPartiallyApproved:
		// One of several approvers: the request's message keeps its
		// buttons, for the others, and says who has approved.
		text := requestText(mrkdwn, ev) + "\n" + progressText(mrkdwn, ev)
		b, err := s.Refs.SinkRef(ctx, s.Name, ev.ApprovalID)
		var ref messageRef
		if err == nil && json.Unmarshal(b, &ref) == nil && ref.TS != "" {
			_, _, _, err := s.Client.UpdateMessageContext(ctx, ref.Channel, ref.TS, fallback(progressText(plain, ev)), slack.MsgOptionBlocks(requestBlocks(text, ev.ApprovalID)...))
			return slackError("updating the approval's message", err)
		}
		if err != nil && !errors.Is(err, ledger.ErrNotFound) {
			return err
		}
		return s.post(ctx, progressText(plain, ev)+" (approval "+ev.ApprovalID+")")
	case ledger.EventApprovalDecided, ledger.EventApprovalExpired:
		text, notification := outcomeText(mrkdwn, ev), fallback(outcomeText(plain, ev))
		if ev.ApprovalID != "" {
			if b, err := s.Refs.SinkRef(ctx, s.Name, ev.ApprovalID); err == nil {
				var ref messageRef
				if json.Unmarshal(b, &ref) == nil && ref.TS != "" {
					blocks := []slack.Block{slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil)}
					_, _, _, err := s.Client.UpdateMessageContext(ctx, ref.Channel, ref.TS, notification, slack.MsgOptionBlocks(blocks...))
					return slackError("updating the approval's message", err)
				}
			} else if !errors.Is(err, ledger.ErrNotFound) {
				return err
			}
		}
		// Its request was not posted here (yet: its delivery may be
		// failing). Post the outcome, and keep it as the request's message,
		// so that a late delivery of the request posts no buttons.
		ch, ts, err := s.Client.PostMessageContext(ctx, s.Channel, notification,
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

// format renders the messages' text: Slack mrkdwn (the blocks, and a
// message without blocks), or the plain notification text of a message
// with blocks (sent with mrkdwn off).
//
// Every value in them that is not Ratchet's own words (ids, effect types,
// labels, reasons, actors: an agent writes most of them) goes through val,
// which escapes &, < and > as Slack's formatting rules require (so no
// link, mention or command such as <!channel> can come from a value),
// replaces backticks and control characters (so none ends the code span it
// is put in, within which Slack applies no formatting and links nothing),
// and clips it.
type format struct{ md bool }

var (
	mrkdwn = format{md: true}
	plain  = format{}
)

// maxValueRunes bounds a value in a message.
const maxValueRunes = 200

var slackEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "`", "'")

// escape makes s inert text for Slack.
func escape(s string) string {
	if utf8.RuneCountInString(s) > maxValueRunes {
		s = string([]rune(s)[:maxValueRunes]) + "…"
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	return slackEscaper.Replace(s)
}

// val renders a value: escaped, in a code span in mrkdwn.
func (f format) val(s string) string {
	if f.md {
		return "`" + escape(s) + "`"
	}
	return escape(s)
}

// bold renders Ratchet's own words in bold in mrkdwn.
func (f format) bold(s string) string {
	if f.md {
		return "*" + s + "*"
	}
	return s
}

// fallback is the notification text of a message with blocks: its first
// line, with mrkdwn off.
func fallback(text string) slack.MsgOption {
	text, _, _ = strings.Cut(text, "\n")
	return slack.MsgOptionCompose(slack.MsgOptionText(text, false), slack.MsgOptionDisableMarkdown())
}

func (f format) labels(ev ledger.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "namespace %s", f.val(ev.Namespace))
	if ev.AgentID != "" {
		fmt.Fprintf(&b, ", agent %s", f.val(ev.AgentID))
	}
	if ev.RunID != "" {
		fmt.Fprintf(&b, ", run %s", f.val(ev.RunID))
	}
	return b.String()
}

func requestText(f format, ev ledger.Event) string {
	needs := ""
	if ev.ApproversRequired > 1 {
		needs = fmt.Sprintf(", needs %d approvers", ev.ApproversRequired)
	}
	return fmt.Sprintf("%s %s for %s (%s%s)\nApproval %s, effect %s%s",
		f.bold("Approval requested:"), f.val(ev.EffectType), money(ev.CostMicros), f.labels(ev), needs, f.val(ev.ApprovalID), f.val(ev.EffectID), undoText(f, ev.Compensation))
}

// undoText is the line naming the undo an approval's step declared:
// approving the step lets it run unchecked up to the step's estimate.
func undoText(f format, c *ledger.Compensation) string {
	if c == nil {
		return "\nUndo declared: none (the step is permanent)"
	}
	s := "\nUndo declared: " + f.val(c.EffectType)
	if c.Vendor != "" {
		s += " at " + f.val(c.Vendor)
	}
	if c.EstimatedCostMicros != nil {
		s += " for " + money(c.EstimatedCostMicros)
	}
	// The agent wrote the description: on one line (a newline could
	// make it look like Ratchet's own words) and short.
	if d := strings.Join(strings.Fields(c.Description), " "); d != "" {
		if r := []rune(d); len(r) > 200 {
			d = string(r[:199]) + "…"
		}
		s += ": " + f.val(d)
	}
	return s
}

// requestBlocks are an approval request's message: text and its buttons.
func requestBlocks(text, approvalID string) []slack.Block {
	return []slack.Block{
		slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, text, false, false), nil, nil),
		slack.NewActionBlock("ratchet:"+approvalID,
			slack.NewButtonBlockElement(ActionApprove, approvalID, slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)).WithStyle(slack.StylePrimary),
			slack.NewButtonBlockElement(ActionReject, approvalID, slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false)).WithStyle(slack.StyleDanger),
		),
	}
}

// progressText is how far an approval needing several people has come:
// "1 of 2: approved by alice".
func progressText(f format, ev ledger.Event) string {
	return fmt.Sprintf("%d of %d: approved by %s", len(ev.ApprovedBy), ev.ApproversRequired, f.whoList(ev.ApprovedBy))
}

func (f format) whoList(actors []string) string {
	out := make([]string, len(actors))
	for i, a := range actors {
		out[i] = f.who(a)
	}
	return strings.Join(out, ", ")
}

func outcomeText(f format, ev ledger.Event) string {
	what := "Expired"
	switch {
	case ev.Type == ledger.EventApprovalDecided && ev.State == ledger.StateRejected:
		what = "Rejected by " + f.who(ev.Actor)
	case ev.Type == ledger.EventApprovalDecided && len(ev.ApprovedBy) > 1:
		what = "Approved by " + f.whoList(ev.ApprovedBy)
	case ev.Type == ledger.EventApprovalDecided:
		what = "Approved by " + f.who(ev.Actor)
	}
	return fmt.Sprintf("%s %s for %s (%s)\nApproval %s, effect %s",
		f.bold(what+":"), f.val(ev.EffectType), money(ev.CostMicros), f.labels(ev), f.val(ev.ApprovalID), f.val(ev.EffectID))
}

// slackUserID is the form of a Slack user id: only such an id becomes a
// mention.
var slackUserID = regexp.MustCompile(`^[UW][A-Z0-9]{1,31}$`)

// who renders an actor: a Slack user as a mention.
func (f format) who(actor string) string {
	if id, ok := strings.CutPrefix(actor, "slack:"); ok && slackUserID.MatchString(id) {
		return "<@" + id + ">"
	}
	if actor == "" {
		return "an operator"
	}
	return f.val(actor)
}

func summary(ev ledger.Event) string {
	f := mrkdwn
	switch ev.Type {
	case ledger.EventEffectIndeterminate:
		return fmt.Sprintf("*Unresolved effect:* %s %s (%s) is indeterminate (%s): check at the vendor and resolve it (`ratchet effects resolve %s`).",
			f.val(ev.EffectType), f.val(ev.EffectID), f.labels(ev), f.val(ev.Reason), escape(ev.EffectID))
	case ledger.EventIntegrationWarning:
		return fmt.Sprintf("*Integration warning:* agent %s in namespace %s has %d effects whose leases expired without a report.",
			f.val(ev.AgentID), f.val(ev.Namespace), ev.Count)
	case ledger.EventHaltStarted:
		return fmt.Sprintf("*Halted* by %s (%s): %s. New begins in this scope are denied until `ratchet resume %s`.",
			f.who(ev.Actor), f.val(haltScope(ev)), f.val(ev.Note), escape(ev.HaltID))
	case ledger.EventHaltLifted:
		return fmt.Sprintf("*Halt lifted* by %s (%s): begins in this scope are decided again.", f.who(ev.Actor), f.val(haltScope(ev)))
	}
	reason := ""
	if ev.Reason != "" {
		reason = " " + f.val(ev.Reason)
	}
	return fmt.Sprintf("*%s* (%s)%s", escape(ev.Type), f.labels(ev), reason)
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
	// Sink is the name of the Slack sink whose buttons these are, and
	// Refs where it remembers its messages (the engine). Required: a click
	// decides only an approval whose request that sink posted, and only
	// from the message it posted it in.
	Sink string
	Refs Refs
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
	// minute. A lookup that failed is not tried again for
	// groupRetryAfter (nor longer than GroupTTL).
	GroupTTL time.Duration
	// Logger gets a line per decision and per refusal; nil discards.
	Logger *slog.Logger

	mu       sync.Mutex
	members  map[string]bool // of DeciderGroups, as last looked up
	fetched  time.Time
	failedAt time.Time     // of the last lookup, when it failed
	fetching chan struct{} // closed when the lookup in progress ends
}

// groupRetryAfter is how long a failed group lookup is remembered.
const groupRetryAfter = 5 * time.Second

// groupLookupTimeout bounds a lookup of the decider groups.
const groupLookupTimeout = 10 * time.Second

// allowed reports whether a Slack user may decide: listed, or a member of
// a listed group. A group lookup that fails allows no one through it. The
// lock is never held while Slack is asked: one request looks the groups
// up, others wait for it (or their own context).
func (h *SlackInteractions) allowed(ctx context.Context, user string, log *slog.Logger) bool {
	if h.Deciders[user] {
		return true
	}
	if len(h.DeciderGroups) == 0 || h.Client == nil {
		return false
	}
	ttl := h.GroupTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	for {
		h.mu.Lock()
		if h.members != nil && time.Since(h.fetched) <= ttl {
			ok := h.members[user]
			h.mu.Unlock()
			return ok
		}
		if !h.failedAt.IsZero() && time.Since(h.failedAt) <= min(groupRetryAfter, ttl) {
			h.mu.Unlock()
			return false
		}
		if wait := h.fetching; wait != nil {
			h.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return false
			}
		}
		done := make(chan struct{})
		h.fetching = done
		h.mu.Unlock()

		members, err := h.lookupGroups(ctx, log)
		h.mu.Lock()
		if err != nil {
			h.failedAt = time.Now()
		} else {
			h.members, h.fetched, h.failedAt = members, time.Now(), time.Time{}
		}
		h.fetching = nil
		close(done)
		h.mu.Unlock()
		if err != nil {
			return false
		}
		return members[user]
	}
}

// lookupGroups asks Slack for the members of DeciderGroups, on a context
// of its own (a request that gives up does not fail the lookup for those
// waiting on it) bounded by groupLookupTimeout.
func (h *SlackInteractions) lookupGroups(ctx context.Context, log *slog.Logger) (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupLookupTimeout)
	defer cancel()
	members := map[string]bool{}
	for _, g := range h.DeciderGroups {
		ids, err := h.Client.GetUserGroupMembersContext(ctx, g)
		if err != nil {
			log.Warn("looking up a Slack user group of deciders", "group", g, "err", err)
			return nil, err
		}
		for _, id := range ids {
			members[id] = true
		}
	}
	return members, nil
}

// bound checks that a click on the button of approvalID came from the
// message this sink posted for it: the block id is the one the sink gave
// the buttons, and the message and channel are the ones it recorded. It
// returns the status and text of a refusal, or 0.
func (h *SlackInteractions) bound(ctx context.Context, cb *slack.InteractionCallback, a *slack.BlockAction) (int, string) {
	if a.Value == "" || a.BlockID != "ratchet:"+a.Value {
		return http.StatusBadRequest, "This button is not a Ratchet approval's."
	}
	if h.Refs == nil || h.Sink == "" {
		return http.StatusForbidden, "This Ratchet endpoint is not bound to a Slack sink."
	}
	b, err := h.Refs.SinkRef(ctx, h.Sink, a.Value)
	if errors.Is(err, ledger.ErrNotFound) {
		return http.StatusForbidden, "This approval was not sent to this Slack channel."
	}
	if err != nil {
		return http.StatusServiceUnavailable, "Ratchet is unavailable; try again."
	}
	var ref messageRef
	if json.Unmarshal(b, &ref) != nil || ref.TS == "" {
		return http.StatusForbidden, "This approval was not sent to this Slack channel."
	}
	ts, ch := cb.Container.MessageTs, cb.Container.ChannelID
	if ts == "" {
		ts = cb.Message.Timestamp
	}
	if ch == "" {
		ch = cb.Channel.ID
	}
	if ts != ref.TS || (ref.Channel != "" && ch != ref.Channel) {
		return http.StatusForbidden, "This button is not on this approval's message."
	}
	return 0, ""
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
	// Every Ratchet button of the payload must be on its approval's
	// message before any is decided.
	var ours []*slack.BlockAction
	for _, a := range cb.ActionCallback.BlockActions {
		if a.ActionID != ActionApprove && a.ActionID != ActionReject {
			continue
		}
		if status, text := h.bound(r.Context(), &cb, a); status != 0 {
			log.Warn("slack interaction refused: the click is not bound to its approval's message", "approval_id", a.Value,
				"block_id", a.BlockID, "message_ts", cb.Container.MessageTs, "slack_user", user, "status", status)
			writeSlackText(w, status, text)
			return
		}
		ours = append(ours, a)
	}
	for _, a := range ours {
		decide := h.Engine.Approve
		if a.ActionID == ActionReject {
			decide = h.Engine.Reject
		}
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
	if len(ours) == 0 {
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

// haltScope is a halt event's scope as people read it.
func haltScope(ev ledger.Event) string {
	return ledger.HaltScope{Namespace: ev.Namespace, EffectType: ev.EffectType, AgentID: ev.AgentID, Vendor: ev.Vendor}.String()
}
