package notify_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/notify"
)

// An agent names itself (agent_id is free text) with a URL, hoping that
// the mail client, PagerDuty or Teams makes a link of it beside the
// console's real one, a page that asks for an admin token: in a mail's
// text/plain body (which mail clients link), a Teams card and a PagerDuty
// alert, the agent's URL is shown defanged ("https[:]//", "www[.]"), and
// only Ratchet's own console link is a URL.
func TestAnAgentsURLIsNeverALinkInOnCallMessages(t *testing.T) {
	const console = "https://ratchet.example.com"
	ev := ledger.Event{ID: "evt_1", Type: ledger.EventIntegrationWarning, Namespace: "default",
		AgentID: "https://ratchet.example.com.evil.test/approvals/apr_1 or www.evil.test", RunID: "http://evil.test", Count: 2, EffectID: "eff_1"}
	leaks := func(where, text string) {
		t.Helper()
		for _, bad := range []string{"https://ratchet.example.com.evil", "http://evil", "www.evil"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s shows the agent's %q as it is, which becomes a link:\n%s", where, bad, text)
			}
		}
		if !strings.Contains(text, "https[:]//ratchet.example.com.evil.test") {
			t.Errorf("%s does not show the agent's id defanged:\n%s", where, text)
		}
	}

	card, err := json.Marshal((&notify.Teams{ConsoleURL: console}).TeamsCard(ev))
	if err != nil {
		t.Fatal(err)
	}
	leaks("the Teams card", string(card))
	if !strings.Contains(string(card), `"url":"`+console+`/effects/eff_1"`) {
		t.Errorf("the Teams card lost its console link:\n%s", card)
	}

	srv, pool := startSMTP(t, true)
	m := &notify.Email{Addr: srv.addr, From: "ratchet@example.com", To: []string{"oncall@example.com"}, Username: srv.user, Password: srv.password,
		TLSConfig: &tls.Config{RootCAs: pool}, ConsoleURL: console}
	if err := m.Deliver(context.Background(), ledger.OutboxEntry{Event: ev}); err != nil {
		t.Fatal(err)
	}
	mails, _ := srv.snapshot()
	msg, err := mail.ReadMessage(bytes.NewReader(mails[0].data))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	leaks("the mail's body", string(body))
	if !strings.Contains(string(body), console+"/effects/eff_1") {
		t.Errorf("the mail lost its console link:\n%s", body)
	}

	ev.Type = ledger.EventEffectIndeterminate // an event that pages
	var got []byte
	pd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer pd.Close()
	if err := (&notify.PagerDuty{RoutingKey: "rk", URL: pd.URL, ConsoleURL: console}).Deliver(context.Background(), ledger.OutboxEntry{Event: ev}); err != nil {
		t.Fatal(err)
	}
	leaks("the PagerDuty alert", string(got))
}
