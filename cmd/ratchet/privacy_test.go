package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestPrivacyEndToEnd drives the real binary with marker strings in
// payloads, dimension values, a proxied request body and every kind of
// token, then scans every file of the data dir and the whole server log:
// none of them may appear. It also checks the body limit of each listener.
func TestPrivacyEndToEnd(t *testing.T) {
	const (
		payloadMark = "PRIV-PAYLOAD-3f9a1c"
		dimMark     = "PRIV-DIMENSION-77b2e0"
		bodyMark    = "PRIV-PROXY-BODY-c41d"
		vendorAuth  = "sk_live_PRIV-VENDOR-KEY-9e8d"
		agentTok    = "agent-PRIV-TOKEN-5a5a"
		adminTok    = "admin-PRIV-TOKEN-6b6b"
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"pi_123","object":"payment_intent"}`)
	}))
	defer upstream.Close()
	data := filepath.Join(t.TempDir(), "data")
	s := startServe(t, data, "auth:\n  agents: [{token_sha256: '"+sha(agentTok)+"', namespace: default, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha(adminTok)+"', name: alice}]\n"+
		"proxy:\n  upstreams: {stripe: '"+upstream.URL+"'}\n")

	cs := connect(t, s.mcp, agentTok)
	r := callTool(t, cs, "ratchet_begin_effect", map[string]any{"idempotency_key": "priv:1", "effect_type": "email.send",
		"payload": map[string]any{"body": payloadMark}, "dimensions": map[string]any{"recipient": dimMark}})
	callTool(t, cs, "ratchet_report_effect", map[string]any{"effect_id": r["effect_id"], "outcome": "succeeded"})
	cs.Close()

	req, _ := http.NewRequest(http.MethodPost, s.proxy+"/stripe/v1/payment_intents",
		strings.NewReader("amount=100&currency=usd&customer="+dimMark+"&description="+bodyMark))
	req.Header.Set("Authorization", "Bearer "+vendorAuth)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("proxy: %v %v", resp, err)
	}
	resp.Body.Close()
	areq, _ := http.NewRequest(http.MethodGet, s.admin+"/v1/effects", nil)
	areq.Header.Set("Authorization", "Bearer "+adminTok)
	if resp, err := http.DefaultClient.Do(areq); err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// Every listener bounds request bodies.
	big := bytes.Repeat([]byte("x"), 2<<20)
	for name, u := range map[string]string{"mcp": s.mcp, "admin": s.admin + "/v1/approvals/apr_x/approve", "proxy": s.proxy + "/stripe/v1/charges"} {
		req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(big))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+map[string]string{"mcp": agentTok, "admin": adminTok, "proxy": vendorAuth}[name])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s accepted a 2 MiB body: %d", name, resp.StatusCode)
		}
	}

	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done
	logs := s.stderr.String()
	if !strings.Contains(logs, "decision=execute") {
		t.Fatalf("the log has no decisions; the scan would prove nothing:\n%s", logs)
	}
	marks := []string{payloadMark, dimMark, bodyMark, vendorAuth, agentTok, adminTok}
	for _, m := range marks {
		if strings.Contains(logs, m) {
			t.Errorf("the server log contains %q", m)
		}
	}
	files := 0
	filepath.Walk(data, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		files++
		b, _ := os.ReadFile(p)
		for _, m := range marks {
			if bytes.Contains(b, []byte(m)) {
				t.Errorf("%s contains %q", p, m)
			}
		}
		return nil
	})
	if files < 3 {
		t.Fatalf("scanned only %d files", files)
	}
}
