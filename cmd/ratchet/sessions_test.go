package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// metricValue reads one unlabelled (or fully labelled) series from
// /metrics; -1 when it is absent.
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// rssMiB reads a process's resident set from /proc (Linux).
func rssMiB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}

// TestAbandonedSessionsExpireInServe (issue 32.2), from outside: a real
// "ratchet serve" with mcp.session_idle 15s and listen.idle_timeout 2s.
// 2,000 agents open sessions over plain HTTP, as an SDK does, and vanish
// with their keep-alive connections left open. After the idle time
// ratchet_mcp_sessions is back to 0, the idle connections were closed and
// counted, the live Go heap (its collector's goal, halved) is back near what it was
// before they came, and a Go SDK client whose session expired gets the
// SDK's ErrSessionMissing (HTTP 404), after which a new session works.
func TestAbandonedSessionsExpireInServe(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 sessions and their expiry")
	}
	const agents = 2000
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ratchet.yaml")
	writeFile(t, cfg, "listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0', idle_timeout: 2s}\nmcp:\n  session_idle: 15s\n")
	// GOGC 100 (which turns internal/gcpace off) keeps the collector's
	// goal at twice the live heap, which heap below reads.
	t.Setenv("GOGC", "100")
	s := startServeConfig(t, cfg, filepath.Join(dir, "data"))
	pid := s.cmd.Process.Pid

	c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, nil)
	// A session exists only under a protocol version before the
	// stateless one (the TypeScript SDK 1.x's, the desktop clients').
	kept, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: s.mcp, DisableStandaloneSSE: true},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	list := func(cs *sdk.ClientSession) error {
		_, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_list_effects", Arguments: map[string]any{}})
		return err
	}
	if err := list(kept); err != nil {
		t.Fatal(err)
	}
	// The live heap, as the last collection left it, from outside: the
	// collector's next goal is twice it (GOGC 100).
	heap := func() float64 { return metricValue(t, s.admin, "go_memstats_next_gc_bytes") / 2 / (1 << 20) }
	gcs := func() float64 { return metricValue(t, s.admin, "go_gc_duration_seconds_count") }
	// collect makes calls on cs until the collector has run twice more
	// (on an idle server calls give it reason to run).
	collect := func(cs *sdk.ClientSession) {
		before := gcs()
		for end := time.Now().Add(30 * time.Second); gcs() < before+2 && time.Now().Before(end); {
			for range 50 {
				if err := list(cs); err != nil {
					t.Fatalf("list: %v", err)
				}
			}
		}
	}
	collect(kept)
	baseHeap, baseRSS := heap(), rssMiB(t, pid)

	// Each abandoned agent: its own connection (a transport of its own,
	// never closed), initialize and the initialized notification.
	post := func(hc *http.Client, body, session string) string {
		req, _ := http.NewRequest("POST", s.mcp, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("%s: %s", body, resp.Status)
		}
		return resp.Header.Get("Mcp-Session-Id")
	}
	for range agents - 1 {
		hc := &http.Client{Transport: &http.Transport{}}
		id := post(hc, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`, "")
		post(hc, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, id)
	}
	if got := metricValue(t, s.admin, "ratchet_mcp_sessions"); got != agents {
		t.Fatalf("ratchet_mcp_sessions = %v with %d agents connected, want %d", got, agents, agents)
	}
	fullHeap, fullRSS := heap(), rssMiB(t, pid)

	deadline := time.Now().Add(40 * time.Second)
	for metricValue(t, s.admin, "ratchet_mcp_sessions") > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if got := metricValue(t, s.admin, "ratchet_mcp_sessions"); got != 0 {
		t.Errorf("ratchet_mcp_sessions = %v 40 s after the agents vanished (session_idle 15s), want 0", got)
	}
	if got := metricValue(t, s.admin, `ratchet_http_idle_connections_closed_total{listener="mcp"}`); got < agents-1 {
		t.Errorf("idle MCP connections closed: %v, want at least %d (listen.idle_timeout 2s)", got, agents-1)
	}

	fresh, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: s.mcp, DisableStandaloneSSE: true},
		&sdk.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	collect(fresh) // a new session after the expiry works
	afterHeap, afterRSS := heap(), rssMiB(t, pid)
	t.Logf("live Go heap: %.0f MiB idle, %.0f MiB with %d sessions, %.0f MiB after the expiry; RSS %.0f, %.0f, %.0f MiB",
		baseHeap, fullHeap, agents, afterHeap, baseRSS, fullRSS, afterRSS)
	if grown, left := fullHeap-baseHeap, afterHeap-baseHeap; left > grown/4 {
		t.Errorf("after the expiry the live heap is %.1f MiB above idle, more than a quarter of the %.1f MiB the sessions took", left, grown)
	}

	err = list(kept)
	if !errors.Is(err, sdk.ErrSessionMissing) {
		t.Errorf("a call on an expired session: %v, want the SDK's ErrSessionMissing (HTTP 404)", err)
	}
}
