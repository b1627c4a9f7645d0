package mcp

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// rawSession is a streamable-HTTP MCP client at the wire, for tests that
// must order a client's requests themselves (the standalone GET after a
// call, a client that goes away mid-call). Each call sends one request
// with the headers a 2025-11-25 client sends and keeps the session id the
// server gives; it may be called from several goroutines.
func rawSession(t *testing.T, url string) func(ctx context.Context, method, body string) *http.Response {
	var mu sync.Mutex
	session := ""
	return func(ctx context.Context, method, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		mu.Lock()
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		mu.Unlock()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			mu.Lock()
			session = id
			mu.Unlock()
		}
		return resp
	}
}
