package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/notify"
)

// slackAPI is a fake Slack Web API: it records chat.postMessage and
// chat.update calls.
type slackAPI struct {
	mu    sync.Mutex
	calls []url.Values
	paths []string
}

func (f *slackAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.ParseForm()
	f.mu.Lock()
	f.calls = append(f.calls, r.Form)
	f.paths = append(f.paths, r.URL.Path)
	n := len(f.calls)
	f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer xoxb-serve-test" && r.Form.Get("token") != "xoxb-serve-test" {
		json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": "invalid_auth"})
		return
	}
	json.NewEncoder(w).Encode(map[string]any{"ok": true, "channel": r.Form.Get("channel"), "ts": fmt.Sprintf("1700000000.%06d", n)})
}

func (f *slackAPI) get() ([]string, []url.Values) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...), append([]url.Values(nil), f.calls...)
}

var interactivityRe = regexp.MustCompile(`url=(http://\S+/slack/interactivity)`)

// TestSlackApprovalsThroughServe: the real serve, configured with a Slack
// sink on a fake Slack API, posts the request, takes a signed click on its
// own listener, and the agent's next begin executes.
func TestSlackApprovalsThroughServe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "token"), "xoxb-serve-test\n")
	writeFile(t, filepath.Join(dir, "signing"), "serve-signing-secret\n")
	api := &slackAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	extra := `policies:
  - match: "payment.*"
    approval_threshold_micros: 100000000
notify:
  sinks:
    - name: approvals
      type: slack
      channel: C0APPROVE
      token_file: ` + filepath.Join(dir, "token") + `
      signing_secret_file: ` + filepath.Join(dir, "signing") + `
      deciders: [U0ALICE]
      listen: 127.0.0.1:0
      api_url: ` + srv.URL + `/api/
  routes:
    - {sinks: [approvals], events: [approval.requested, approval.decided]}
`
	s := startServe(t, filepath.Join(dir, "data"), extra)
	m := interactivityRe.FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("no interactivity listener in the log:\n%s", s.stderr)
	}
	cs := connect(t, s.mcp)
	pay := map[string]any{"idempotency_key": "inv:slack", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	start := time.Now()
	ask := callTool(t, cs, "ratchet_begin_effect", pay)
	if ask["decision"] != "approval_required" {
		t.Fatalf("begin: %v", ask)
	}
	waitFor(t, time.Second, "the request in Slack", func() bool { p, _ := api.get(); return len(p) == 1 })
	t.Logf("in Slack after %v", time.Since(start))
	paths, calls := api.get()
	if paths[0] != "/api/chat.postMessage" || calls[0].Get("channel") != "C0APPROVE" || !strings.Contains(calls[0].Get("blocks"), ask["approval_id"].(string)) {
		t.Fatalf("post: %s %v", paths[0], calls[0])
	}

	clickAs := func(user string, at time.Time) int {
		payload, _ := json.Marshal(map[string]any{"type": "block_actions", "user": map[string]any{"id": user},
			"container": map[string]any{"type": "message", "message_ts": "1700000000.000001", "channel_id": "C0APPROVE"},
			"actions": []map[string]any{{"action_id": notify.ActionApprove, "block_id": "ratchet:" + ask["approval_id"].(string),
				"value": ask["approval_id"], "type": "button"}}})
		body := "payload=" + url.QueryEscape(string(payload))
		ts := strconv.FormatInt(at.Unix(), 10)
		mac := hmac.New(sha256.New, []byte("serve-signing-secret"))
		fmt.Fprintf(mac, "v0:%s:%s", ts, body)
		req, _ := http.NewRequest(http.MethodPost, m[1], strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Slack-Request-Timestamp", ts)
		req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := clickAs("U0MALLORY", time.Now()); code != http.StatusForbidden {
		t.Fatalf("a click by someone not listed: %d", code)
	}
	if code := clickAs("U0ALICE", time.Now().Add(-10*time.Minute)); code != http.StatusUnauthorized {
		t.Fatalf("a stale click: %d", code)
	}
	if ex := callTool(t, cs, "ratchet_begin_effect", pay); ex["decision"] != "approval_required" {
		t.Fatalf("refused clicks changed something: %v", ex)
	}
	// The sink records the posted message right after Slack answers; a
	// click it cannot bind to its message yet is refused (403), so the
	// signed click is sent until that record is there.
	waitFor(t, 2*time.Second, "a signed click accepted", func() bool { return clickAs("U0ALICE", time.Now()) == http.StatusOK })
	if ex := callTool(t, cs, "ratchet_begin_effect", pay); ex["decision"] != "execute" {
		t.Fatalf("after the click: %v\n%s", ex, s.stderr)
	}
	waitFor(t, 2*time.Second, "the message updated", func() bool { p, _ := api.get(); return len(p) == 2 })
	paths, calls = api.get()
	if paths[1] != "/api/chat.update" || calls[1].Get("ts") != "1700000000.000001" || !strings.Contains(calls[1].Get("text"), "Approved by") {
		t.Fatalf("update: %s %v", paths[1], calls[1])
	}
}
