package mcp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

func heapInuse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func openSessions(s *sdk.Server) int {
	n := 0
	for range s.Sessions() {
		n++
	}
	return n
}

// TestAbandonedSessionsExpire (issue 32.2): 2,000 agents connect with the
// Go SDK over streamable HTTP and vanish without closing their sessions.
// After the idle timeout every session is gone from the server and the
// heap is back near where it was before they came; a client that comes
// back with its expired session gets the protocol's 404 (the SDK's
// ErrSessionMissing), and a new session works.
func TestAbandonedSessionsExpire(t *testing.T) {
	const agents = 2000
	const idle = 10 * time.Second
	s := mcp.New(newEngine(t, &clock{t: time.Now()}), nil)
	srv := httptest.NewServer(mcp.Handler(s, &mcp.HTTPOptions{SessionIdle: idle}))
	defer srv.Close()
	connect := func() *sdk.ClientSession {
		c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, nil)
		// A session exists only under a protocol version before the
		// stateless one (the TypeScript SDK 1.x's, the desktop clients').
		cs, err := c.Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: srv.URL, DisableStandaloneSSE: true},
			&sdk.ClientSessionOptions{ProtocolVersion: "2025-06-18"})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	// abandon opens a session as an SDK does (initialize, then the
	// initialized notification) over plain HTTP, and vanishes: nothing is
	// left of it in this process, as of a crashed agent's.
	hc := &http.Client{}
	abandon := func() {
		post := func(body, session string) string {
			req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(body))
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
		id := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`, "")
		post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, id)
	}
	base := heapInuse()
	kept := connect() // the one that comes back
	for range agents - 1 {
		abandon()
	}
	if n := openSessions(s); n != agents {
		t.Fatalf("%d sessions open, want %d", n, agents)
	}
	full := heapInuse()
	deadline := time.Now().Add(idle + 10*time.Second)
	for openSessions(s) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	srv.CloseClientConnections() // the abandoned clients' idle keep-alives
	after := heapInuse()
	t.Logf("heap: %d MiB idle, %d MiB with %d sessions, %d MiB after the expiry", base>>20, full>>20, agents, after>>20)
	if n := openSessions(s); n != 0 {
		t.Errorf("%d sessions still open %v after the idle timeout", n, idle+10*time.Second)
	}
	if grown, left := full-base, int64(after)-int64(base); left > int64(grown)/5 {
		t.Errorf("after the expiry the heap is %d KiB above idle, more than a fifth of the %d KiB the sessions took", left>>10, grown>>10)
	}

	_, err := kept.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_list_effects", Arguments: map[string]any{}})
	if !errors.Is(err, sdk.ErrSessionMissing) {
		t.Errorf("a call on an expired session: %v, want the SDK's ErrSessionMissing (HTTP 404)", err)
	}
	if err != nil && !strings.Contains(err.Error(), "session") {
		t.Errorf("the error does not say the session is gone: %v", err)
	}
	fresh := connect()
	defer fresh.Close()
	if _, err := fresh.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_list_effects", Arguments: map[string]any{}}); err != nil {
		t.Errorf("a new session after the expiry: %v", err)
	}
}
