package notify_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// fakeSlack is Slack's Web API as far as the sink uses it: it records
// every chat.postMessage and chat.update, as the real one receives them.
type fakeSlack struct {
	mu           sync.Mutex
	calls        []slackCall
	n            int
	groupLookups int
}

type slackCall struct {
	method, channel, ts, text string
	blocks                    []map[string]any
	at                        time.Time
}

func (f *fakeSlack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	if r.Form.Get("token") != "xoxb-test" && r.Header.Get("Authorization") != "Bearer xoxb-test" {
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	method := strings.TrimPrefix(r.URL.Path, "/api/")
	if method == "usergroups.users.list" {
		f.mu.Lock()
		f.groupLookups++
		f.mu.Unlock()
		if r.Form.Get("usergroup") == "S0BROKEN" {
			json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "no_such_subteam"})
			return
		}
		users := []string{}
		if r.Form.Get("usergroup") == "S0APPROVERS" {
			users = []string{"U0GROUPIE"}
		}
		json.NewEncoder(w).Encode(map[string]any{"ok": true, "users": users})
		return
	}
	c := slackCall{method: method, channel: r.Form.Get("channel"), ts: r.Form.Get("ts"), text: r.Form.Get("text"), at: time.Now()}
	json.Unmarshal([]byte(r.Form.Get("blocks")), &c.blocks)
	f.mu.Lock()
	if method == "chat.postMessage" {
		f.n++
		c.ts = fmt.Sprintf("1700000000.%06d", f.n)
	}
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": c.channel, "ts": c.ts, "text": c.text})
}

func (f *fakeSlack) get() []slackCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slackCall(nil), f.calls...)
}

// buttons returns the action ids and values of a call's buttons.
func (c slackCall) buttons() map[string]string {
	out := map[string]string{}
	for _, b := range c.blocks {
		if b["type"] != "actions" {
			continue
		}
		for _, el := range b["elements"].([]any) {
			e := el.(map[string]any)
			out[e["action_id"].(string)] = e["value"].(string)
		}
	}
	return out
}

// section returns the mrkdwn text of a call's section blocks.
func (c slackCall) section() string {
	var out []string
	for _, b := range c.blocks {
		if t, ok := b["text"].(map[string]any); ok && b["type"] == "section" {
			out = append(out, t["text"].(string))
		}
	}
	return strings.Join(out, "\n")
}

const signingSecret = "8f742231b10e8888abcd99yyyzzz85a5"

// click is Slack's interactivity request for a button of the approval's
// message msgTS in channel C0APPROVE, signed with secret at ts.
func click(t *testing.T, target, secret, user, actionID, approvalID, msgTS string, ts time.Time) *http.Response {
	t.Helper()
	return signedPayload(t, target, secret, ts, map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user, "username": "someone"},
		"container": map[string]any{"type": "message", "message_ts": msgTS, "channel_id": "C0APPROVE"},
		"channel":   map[string]any{"id": "C0APPROVE"},
		"actions":   []map[string]any{{"action_id": actionID, "block_id": "ratchet:" + approvalID, "value": approvalID, "type": "button"}},
	})
}

// signedPayload posts an interactivity payload as Slack would, signed with
// secret at ts.
func signedPayload(t *testing.T, target, secret string, ts time.Time, payload map[string]any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(payload)
	body := "payload=" + url.QueryEscape(string(b))
	sts := strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%s:%s", sts, body)
	req, _ := http.NewRequest(http.MethodPost, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Slack-Request-Timestamp", sts)
	req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(m.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// slackSetup is an engine routing approvals to a Slack sink on a fake
// Slack, its worker running, and the interactivity endpoint.
func slackSetup(t *testing.T) (*ledger.Engine, *fakeSlack, string) {
	t.Helper()
	fs := &fakeSlack{}
	api := httptest.NewServer(fs)
	t.Cleanup(api.Close)
	eng := newEngine(t, []notify.Route{{Sinks: []string{"slack"}, Events: []string{
		ledger.EventApprovalRequested, ledger.EventApprovalDecided, ledger.EventApprovalExpired}}})
	client := slack.New("xoxb-test", slack.OptionAPIURL(api.URL+"/api/"))
	runWorker(t, &notify.Worker{Outbox: eng, Poll: 20 * time.Millisecond,
		Sinks: map[string]notify.Sink{"slack": &notify.Slack{Name: "slack", Client: client, Channel: "C0APPROVE", Refs: eng}}})
	in := httptest.NewServer(&notify.SlackInteractions{Engine: eng, Sink: "slack", Refs: eng, SigningSecret: signingSecret, Deciders: map[string]bool{"U0ALICE": true}})
	t.Cleanup(in.Close)
	return eng, fs, in.URL
}

func TestASignedClickInSlackApprovesAndTheNextBeginExecutes(t *testing.T) {
	eng, fs, interactions := slackSetup(t)
	start := time.Now()
	ask := askApproval(t, eng, "order-1")
	eventually(t, time.Second, "the request reaches Slack", func() bool { return len(fs.get()) == 1 })
	posted(t, eng, ask.ApprovalID)
	post := fs.get()[0]
	t.Logf("reached Slack in %v", post.at.Sub(start))
	if post.method != "chat.postMessage" || post.channel != "C0APPROVE" || !strings.Contains(post.text, "payment.charge") {
		t.Fatalf("post: %+v", post)
	}
	if b := post.buttons(); b[notify.ActionApprove] != ask.ApprovalID || b[notify.ActionReject] != ask.ApprovalID {
		t.Fatalf("buttons: %v", b)
	}

	if resp := click(t, interactions, signingSecret, "U0ALICE", notify.ActionApprove, ask.ApprovalID, post.ts, time.Now()); resp.StatusCode != 200 {
		t.Fatalf("click: %d", resp.StatusCode)
	}
	res, err := eng.Begin(context.Background(), payment("order-1"))
	if err != nil || res.Decision != ledger.DecisionExecute {
		t.Fatalf("the agent's next begin: %+v %v", res, err)
	}
	eff, _ := eng.Get(context.Background(), "", res.EffectID, "")
	if eff.Approval.DecidedBy != "slack:U0ALICE" {
		t.Fatalf("decided_by %q", eff.Approval.DecidedBy)
	}
	// The message is updated in place: the same ts, no buttons left.
	eventually(t, time.Second, "the message updated", func() bool { return len(fs.get()) == 2 })
	upd := fs.get()[1]
	if upd.method != "chat.update" || upd.ts != post.ts || len(upd.buttons()) != 0 || !strings.Contains(upd.text, "Approved by") {
		t.Fatalf("update: %+v", upd)
	}

	// Decided elsewhere (the CLI): the message is updated too.
	ask2 := askApproval(t, eng, "order-2")
	eventually(t, time.Second, "the second request", func() bool { return len(fs.get()) == 3 })
	if _, err := eng.Reject(context.Background(), ask2.ApprovalID, "bob", "no"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Second, "the second message updated", func() bool { return len(fs.get()) == 4 })
	if upd := fs.get()[3]; upd.method != "chat.update" || upd.ts != fs.get()[2].ts || !strings.Contains(upd.text, "Rejected by bob") {
		t.Fatalf("update after a CLI decision: %+v", upd)
	}
}

func TestForgedStaleOrUnauthorisedClicksChangeNothing(t *testing.T) {
	eng, fs, interactions := slackSetup(t)
	ask := askApproval(t, eng, "order-1")
	eventually(t, time.Second, "the request reaches Slack", func() bool { return len(fs.get()) == 1 })
	posted(t, eng, ask.ApprovalID)
	cases := []struct {
		name, secret, user string
		at                 time.Time
		want               int
	}{
		{"forged: another signing secret", "not-the-signing-secret", "U0ALICE", time.Now(), http.StatusUnauthorized},
		{"stale: signed six minutes ago", signingSecret, "U0ALICE", time.Now().Add(-6 * time.Minute), http.StatusUnauthorized},
		{"unauthorised: a user not among the deciders", signingSecret, "U0MALLORY", time.Now(), http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if resp := click(t, interactions, c.secret, c.user, notify.ActionApprove, ask.ApprovalID, fs.get()[0].ts, c.at); resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	// Unsigned, and a body altered after signing.
	resp, err := http.Post(interactions, "application/x-www-form-urlencoded", strings.NewReader("payload={}"))
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned: %v %v", resp, err)
	}
	pending, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalPending)
	if len(pending) != 1 || pending[0].ApprovalID != ask.ApprovalID {
		t.Fatalf("an approval changed: %+v", pending)
	}
	if res, _ := eng.Begin(context.Background(), payment("order-1")); res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("the agent's begin: %s", res.Decision)
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(fs.get()); n != 1 {
		t.Fatalf("%d Slack calls, want the request only", n)
	}
}

func TestARequestDecidedBeforeSlackHeardOfItGetsNoButtons(t *testing.T) {
	fs := &fakeSlack{}
	api := httptest.NewServer(fs)
	defer api.Close()
	eng := newEngine(t, []notify.Route{{Sinks: []string{"slack"}}})
	sink := &notify.Slack{Name: "slack", Client: slack.New("xoxb-test", slack.OptionAPIURL(api.URL+"/api/")), Channel: "C1", Refs: eng}
	// Both events in the outbox before any delivery: one worker round
	// sends them in order, the request then its update.
	ask := askApproval(t, eng, "order-1")
	if _, err := eng.Approve(context.Background(), ask.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	w := &notify.Worker{Outbox: eng, Sinks: map[string]notify.Sink{"slack": sink}}
	if n, err := w.RunOnce(context.Background()); err != nil || n != 2 {
		t.Fatalf("run: %d %v", n, err)
	}
	calls := fs.get()
	if len(calls) != 2 || calls[0].method != "chat.postMessage" || calls[1].method != "chat.update" || calls[1].ts != calls[0].ts {
		t.Fatalf("calls: %+v", calls)
	}
	// The decision delivered first (the request's delivery failing
	// meanwhile): the outcome is posted, and the request, delivered late,
	// posts no buttons.
	ask2 := askApproval(t, eng, "order-2")
	if _, err := eng.Reject(context.Background(), ask2.ApprovalID, "bob", ""); err != nil {
		t.Fatal(err)
	}
	es, _ := eng.ClaimEvents(context.Background(), "t", time.Minute, 10)
	if len(es) != 2 {
		t.Fatalf("claimed %d", len(es))
	}
	for _, i := range []int{1, 0} { // decided, then requested
		if err := sink.Deliver(context.Background(), es[i]); err != nil {
			t.Fatal(err)
		}
	}
	calls = fs.get()[2:]
	if len(calls) != 1 || calls[0].method != "chat.postMessage" || len(calls[0].buttons()) != 0 || !strings.Contains(calls[0].text, "Rejected by") {
		t.Fatalf("calls: %+v", calls)
	}
}

func TestMembersOfADeciderGroupMayDecide(t *testing.T) {
	fs := &fakeSlack{}
	api := httptest.NewServer(fs)
	defer api.Close()
	eng := newEngine(t, nil)
	in := httptest.NewServer(&notify.SlackInteractions{Engine: eng, Sink: "slack", Refs: eng, SigningSecret: signingSecret, DeciderGroups: []string{"S0APPROVERS"},
		Client: slack.New("xoxb-test", slack.OptionAPIURL(api.URL+"/api/"))})
	defer in.Close()
	ask := askApproval(t, eng, "order-1")
	const msgTS = "1700000000.000001" // as if the sink had posted it
	if err := eng.PutSinkRef(context.Background(), "slack", ask.ApprovalID, []byte(`{"channel":"C0APPROVE","ts":"`+msgTS+`"}`)); err != nil {
		t.Fatal(err)
	}
	if resp := click(t, in.URL, signingSecret, "U0OUTSIDER", notify.ActionApprove, ask.ApprovalID, msgTS, time.Now()); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a user outside the group: %d", resp.StatusCode)
	}
	if resp := click(t, in.URL, signingSecret, "U0GROUPIE", notify.ActionReject, ask.ApprovalID, msgTS, time.Now()); resp.StatusCode != http.StatusOK {
		t.Fatalf("a member of the group: %d", resp.StatusCode)
	}
	eff, _ := eng.Get(context.Background(), "", ask.EffectID, "")
	if eff.Approval.State != ledger.ApprovalRejected || eff.Approval.DecidedBy != "slack:U0GROUPIE" {
		t.Fatalf("approval: %+v", eff.Approval)
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.groupLookups != 1 {
		t.Fatalf("%d group lookups for two clicks within a minute, want 1", fs.groupLookups)
	}
}

// A click decides only the approval of the message it was made on: the
// button's block must be the one the sink gave that approval's buttons,
// and the message and channel the ones the sink posted it in. A button
// value naming another approval, on another approval's message or block,
// changes nothing.
func TestAClickIsBoundToItsApprovalsMessage(t *testing.T) {
	eng, fs, target := slackSetup(t)
	x := askApproval(t, eng, "order-x")
	y := askApproval(t, eng, "order-y")
	eventually(t, 2*time.Second, "both posted", func() bool { return len(fs.get()) == 2 })
	posted(t, eng, x.ApprovalID) // the sink records each message after Slack answered
	posted(t, eng, y.ApprovalID)
	tsOf := map[string]string{}
	for _, c := range fs.get() {
		tsOf[c.buttons()[notify.ActionApprove]] = c.ts
	}
	clickWith := func(blockID, value, msgTS, channel string) int {
		return signedPayload(t, target, signingSecret, time.Now(), map[string]any{
			"type": "block_actions", "user": map[string]any{"id": "U0ALICE"},
			"container": map[string]any{"type": "message", "message_ts": msgTS, "channel_id": channel},
			"channel":   map[string]any{"id": channel},
			"actions":   []map[string]any{{"action_id": notify.ActionApprove, "block_id": blockID, "value": value, "type": "button"}},
		}).StatusCode
	}
	cases := []struct {
		name                           string
		blockID, value, msgTS, channel string
		want                           int
	}{
		{"y's value on x's message and block", "ratchet:" + x.ApprovalID, y.ApprovalID, tsOf[x.ApprovalID], "C0APPROVE", http.StatusBadRequest},
		{"y's value and block on x's message", "ratchet:" + y.ApprovalID, y.ApprovalID, tsOf[x.ApprovalID], "C0APPROVE", http.StatusForbidden},
		{"y's button on a message in another channel", "ratchet:" + y.ApprovalID, y.ApprovalID, tsOf[y.ApprovalID], "C0ELSEWHERE", http.StatusForbidden},
		{"y's button on no message", "ratchet:" + y.ApprovalID, y.ApprovalID, "", "", http.StatusForbidden},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := clickWith(c.blockID, c.value, c.msgTS, c.channel); got != c.want {
				t.Fatalf("status %d, want %d", got, c.want)
			}
		})
	}
	if pending, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalPending); len(pending) != 2 {
		t.Fatalf("an unbound click decided an approval: %d pending, want 2", len(pending))
	}
	// y's own button, on y's message: decided.
	if got := clickWith("ratchet:"+y.ApprovalID, y.ApprovalID, tsOf[y.ApprovalID], "C0APPROVE"); got != http.StatusOK {
		t.Fatalf("y's own button: %d", got)
	}
	aps, _ := eng.ListApprovals(context.Background(), "", ledger.ApprovalApproved)
	if len(aps) != 1 || aps[0].ApprovalID != y.ApprovalID {
		t.Fatalf("approved: %+v, want y only", aps)
	}
}

// A Slack sink's interactivity endpoint decides only approvals whose
// request that sink posted: a click carrying the id of an approval never
// routed to it (another namespace, another sink) changes nothing.
func TestASlackDeciderDecidesOnlyApprovalsRoutedToItsSink(t *testing.T) {
	eng, _, target := slackSetup(t)
	// Asked, but its request never reached this sink (there is no
	// reference of the sink's message for it).
	res, err := eng.Begin(context.Background(), ledger.BeginRequest{Namespace: "hr", IdempotencyKey: "k", EffectType: "payment.charge", AgentID: "bot",
		Payload: json.RawMessage(`{}`), EstimatedCostMicros: i64(150_000_000)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.PutSinkRef(context.Background(), "another-slack", res.ApprovalID, []byte(`{"channel":"C0OTHER","ts":"1.2"}`)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []map[string]any{
		{"type": "block_actions", "user": map[string]any{"id": "U0ALICE"},
			"actions": []map[string]any{{"action_id": notify.ActionReject, "block_id": "ratchet:" + res.ApprovalID, "value": res.ApprovalID, "type": "button"}}},
		{"type": "block_actions", "user": map[string]any{"id": "U0ALICE"},
			"container": map[string]any{"type": "message", "message_ts": "1.2", "channel_id": "C0OTHER"}, "channel": map[string]any{"id": "C0OTHER"},
			"actions": []map[string]any{{"action_id": notify.ActionReject, "block_id": "ratchet:" + res.ApprovalID, "value": res.ApprovalID, "type": "button"}}},
	} {
		if resp := signedPayload(t, target, signingSecret, time.Now(), p); resp.StatusCode != http.StatusForbidden {
			t.Fatalf("status %d, want 403", resp.StatusCode)
		}
	}
	if aps, _ := eng.ListApprovals(context.Background(), "hr", ledger.ApprovalRejected); len(aps) != 0 {
		t.Fatalf("a click decided approval %s, which was never routed to this sink", res.ApprovalID)
	}
}

// What an agent writes (its run id, agent id, effect type, …) is inert in
// the approver's Slack message and its notification text: no link,
// mention, channel ping or formatting of its own reaches the approver.
func TestAgentWrittenValuesAreInertInSlackMessages(t *testing.T) {
	eng, fs, _ := slackSetup(t)
	req := payment("inj")
	req.RunID = "r` <!channel> <https://evil.example/approve|Approve: amount is really $1.50> *pre-approved by <@U0ALICE>* `"
	req.AgentID = "<!here>&<@U0BOB>"
	if res, err := eng.Begin(context.Background(), req); err != nil || res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("%+v %v", res, err)
	}
	eventually(t, 2*time.Second, "posted", func() bool { return len(fs.get()) == 1 })
	c := fs.get()[0]
	b, _ := json.Marshal(c.blocks)
	for _, where := range []struct{ name, s string }{{"blocks", string(b)}, {"notification text", c.text}} {
		for _, bad := range []string{"<!channel>", "<!here>", "<https://evil.example", "<@U0ALICE>", "<@U0BOB>"} {
			if strings.Contains(where.s, bad) {
				t.Errorf("the %s carry the agent's %q: %s", where.name, bad, where.s)
			}
		}
	}
	// Every agent value is in a code span of its own (within which Slack
	// formats nothing): only Ratchet's spans, none closed or left open by
	// the agent.
	var text string
	for _, bl := range c.blocks {
		if bl["type"] == "section" {
			text = bl["text"].(map[string]any)["text"].(string)
		}
	}
	if !strings.Contains(text, "run `r' &lt;!channel&gt; &lt;https://evil.example/approve|Approve: amount is really $1.50&gt; *pre-approved by &lt;@U0ALICE&gt;* '`") ||
		!strings.Contains(text, "agent `&lt;!here&gt;&amp;&lt;@U0BOB&gt;`") {
		t.Fatalf("the section's mrkdwn: %s", text)
	}
	if strings.Count(text, "`")%2 != 0 {
		t.Fatalf("an odd number of backticks: %s", text)
	}
}

// A decider group that cannot be looked up lets no one through it, and is
// not asked about again for every click: the failure is remembered for a
// few seconds.
func TestAFailedDeciderGroupLookupRefusesAndIsNotRepeatedAtOnce(t *testing.T) {
	fs := &fakeSlack{}
	api := httptest.NewServer(fs)
	defer api.Close()
	eng := newEngine(t, nil)
	in := httptest.NewServer(&notify.SlackInteractions{Engine: eng, Sink: "slack", Refs: eng, SigningSecret: signingSecret,
		DeciderGroups: []string{"S0APPROVERS", "S0BROKEN"}, Client: slack.New("xoxb-test", slack.OptionAPIURL(api.URL+"/api/"))})
	defer in.Close()
	ask := askApproval(t, eng, "order-1")
	const msgTS = "1700000000.000001"
	if err := eng.PutSinkRef(context.Background(), "slack", ask.ApprovalID, []byte(`{"channel":"C0APPROVE","ts":"`+msgTS+`"}`)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if resp := click(t, in.URL, signingSecret, "U0GROUPIE", notify.ActionApprove, ask.ApprovalID, msgTS, time.Now()); resp.StatusCode != http.StatusForbidden {
				t.Errorf("a click while the groups cannot be looked up: %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.groupLookups > 2 { // S0APPROVERS then S0BROKEN, once
		t.Fatalf("%d group lookups for four clicks, want one lookup of the groups", fs.groupLookups)
	}
}

// posted waits until the sink has recorded the message it posted for an
// approval, which it does right after Slack answers the post: a click
// before that cannot be bound to its message and is refused (403), so a
// test that clicks as soon as the fake Slack saw the post would race it.
func posted(t *testing.T, eng *ledger.Engine, approvalID string) {
	t.Helper()
	eventually(t, time.Second, "the posted message is recorded", func() bool {
		_, err := eng.SinkRef(context.Background(), "slack", approvalID)
		return err == nil
	})
}

// TestTheSlackApprovalRequestNamesTheDeclaredUndo: the approver sees what
// undo approving the step allows, on one line however the agent wrote it.
func TestTheSlackApprovalRequestNamesTheDeclaredUndo(t *testing.T) {
	eng, fs, _ := slackSetup(t)
	req := payment("order-undo")
	req.GroupKey = "order-undo"
	req.Compensation = &ledger.Compensation{EffectType: "payment.refund", Vendor: "stripe", EstimatedCostMicros: i64(150_000_000),
		Payload: json.RawMessage(`{"secret":"PAYLOAD-MARKER"}`), Description: "refund it\n*Approved by admin*"}
	if res, err := eng.Begin(context.Background(), req); err != nil || res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("begin: %+v %v", res, err)
	}
	eventually(t, time.Second, "the request reaches Slack", func() bool { return len(fs.get()) == 1 })
	text := fs.get()[0].section()
	if !strings.Contains(text, "Undo declared: `payment.refund` at `stripe` for $150.00: `refund it *Approved by admin*`") {
		t.Errorf("the request %q does not name the declared undo on one line", text)
	}
	if strings.Contains(text, "PAYLOAD-MARKER") {
		t.Errorf("the request %q shows the undo's payload", text)
	}
	askApproval(t, eng, "order-permanent")
	eventually(t, time.Second, "the second request", func() bool { return len(fs.get()) == 2 })
	if text := fs.get()[1].section(); !strings.Contains(text, "Undo declared: none") {
		t.Errorf("the request %q does not say the step is permanent", text)
	}
}

// TestAHaltAndItsLiftReachSlackWithWhoScopeAndNote: the on-call channel
// hears of a halt (who, scope, note, how to lift) and of its lifting.
func TestAHaltAndItsLiftReachSlackWithWhoScopeAndNote(t *testing.T) {
	fs := &fakeSlack{}
	api := httptest.NewServer(fs)
	t.Cleanup(api.Close)
	eng := newEngine(t, []notify.Route{{Sinks: []string{"slack"}, Events: []string{ledger.EventHaltStarted, ledger.EventHaltLifted}}})
	client := slack.New("xoxb-test", slack.OptionAPIURL(api.URL+"/api/"))
	runWorker(t, &notify.Worker{Outbox: eng, Poll: 20 * time.Millisecond,
		Sinks: map[string]notify.Sink{"slack": &notify.Slack{Name: "slack", Client: client, Channel: "C0ONCALL", Refs: eng}}})
	ctx := context.Background()
	h, err := eng.Halt(ctx, ledger.HaltRequest{HaltScope: ledger.HaltScope{Vendor: "stripe"}, Note: "stripe incident", CreatedBy: "slack:U0ALICE"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Lift(ctx, h.HaltID, "admin:bob"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, "two Slack messages", func() bool { return len(fs.get()) >= 2 })
	var texts []string
	for _, c := range fs.get() {
		texts = append(texts, c.text+c.section())
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"*Halted* by <@U0ALICE>", "vendor=stripe", "stripe incident", "ratchet resume " + h.HaltID, "*Halt lifted* by `admin:bob`"} {
		if !strings.Contains(all, want) {
			t.Errorf("Slack messages lack %q:\n%s", want, all)
		}
	}
}
