package notify_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// TestSlackShowsHowFarAnApprovalNeedingTwoHasCome: a request needing two
// approvers, routed with the events a route named before quorums
// (requested, decided, expired). Alice's click leaves the buttons on the
// message and adds "1 of 2: approved by @alice"; her second click counts
// once; bob's approves it, the message names both and loses its buttons,
// and the agent's next begin executes.
func TestSlackShowsHowFarAnApprovalNeedingTwoHasCome(t *testing.T) {
	fs := &fakeSlack{}
	api := httptest.NewServer(fs)
	t.Cleanup(api.Close)
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{
		Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(100_000_000), ApproversRequired: 2}},
		Route: notify.Router([]notify.Route{{Sinks: []string{"slack"}, Events: []string{
			ledger.EventApprovalRequested, ledger.EventApprovalDecided, ledger.EventApprovalExpired}}})})
	client := slack.New("xoxb-test", slack.OptionAPIURL(api.URL+"/api/"))
	runWorker(t, &notify.Worker{Outbox: eng, Poll: 20 * time.Millisecond,
		Sinks: map[string]notify.Sink{"slack": &notify.Slack{Name: "slack", Client: client, Channel: "C0APPROVE", Refs: eng}}})
	in := httptest.NewServer(&notify.SlackInteractions{Engine: eng, Sink: "slack", Refs: eng, SigningSecret: signingSecret,
		Deciders: map[string]bool{"U0ALICE": true, "U0BOB": true}})
	t.Cleanup(in.Close)

	ask := askApproval(t, eng, "order-q")
	eventually(t, time.Second, "the request reaches Slack", func() bool { return len(fs.get()) == 1 })
	posted(t, eng, ask.ApprovalID)
	post := fs.get()[0]
	if !strings.Contains(post.section(), "needs 2 approvers") {
		t.Errorf("request %q does not say it needs two approvers", post.section())
	}
	for range 2 {
		if resp := click(t, in.URL, signingSecret, "U0ALICE", notify.ActionApprove, ask.ApprovalID, post.ts, time.Now()); resp.StatusCode != 200 {
			t.Fatalf("alice's click: %d", resp.StatusCode)
		}
	}
	eventually(t, time.Second, "the message updated", func() bool { return len(fs.get()) >= 2 })
	upd := fs.get()[1]
	if upd.method != "chat.update" || upd.ts != post.ts {
		t.Errorf("after alice: %s of %s, want chat.update of %s", upd.method, upd.ts, post.ts)
	}
	if !strings.Contains(upd.section(), "1 of 2: approved by <@U0ALICE>") {
		t.Errorf("after alice the message says %q", upd.section())
	}
	if b := upd.buttons(); b[notify.ActionApprove] != ask.ApprovalID || b[notify.ActionReject] != ask.ApprovalID {
		t.Errorf("after alice the buttons are %v, want both kept for the next approver", b)
	}
	if res, err := eng.Begin(context.Background(), payment("order-q")); err != nil || res.Decision != ledger.DecisionApprovalRequired {
		t.Fatalf("begin after one of two: %+v %v", res, err)
	}
	if resp := click(t, in.URL, signingSecret, "U0BOB", notify.ActionApprove, ask.ApprovalID, post.ts, time.Now()); resp.StatusCode != 200 {
		t.Fatalf("bob's click: %d", resp.StatusCode)
	}
	eventually(t, time.Second, "the message updated again", func() bool { return len(fs.get()) >= 3 })
	calls := fs.get()
	if len(calls) != 3 {
		t.Errorf("%d Slack calls, want 3 (alice's second click changed nothing)", len(calls))
	}
	last := calls[len(calls)-1]
	if !strings.Contains(last.text, "Approved by") || !strings.Contains(last.section(), "<@U0ALICE>, <@U0BOB>") || len(last.buttons()) != 0 {
		t.Errorf("after bob: %q (%d buttons), want approved by both, no buttons", last.section(), len(last.buttons()))
	}
	if res, err := eng.Begin(context.Background(), payment("order-q")); err != nil || res.Decision != ledger.DecisionExecute {
		t.Fatalf("begin after two of two: %+v %v", res, err)
	}
}
