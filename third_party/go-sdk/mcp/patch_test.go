package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/internal/jsonrpc2"
)

// Ratchet's tests of its patch to streamable.go (third_party/README.md, the
// fourth patch): a server-to-client request bound for the standalone SSE
// stream waits for the client's GET instead of being rejected when the
// GET has not arrived yet. A client that opens its GET without waiting
// (the TypeScript SDK 1.x does, after notifications/initialized) and calls
// a tool at once races the tool's elicitation: the request was lost.

// jsonStatefulConn is a connected stateful, JSON-response transport with no
// event store (what ratchet serve runs), and its connection.
func jsonStatefulConn(t *testing.T) (*StreamableServerTransport, *streamableServerConn) {
	t.Helper()
	tr := &StreamableServerTransport{SessionID: "s1", jsonResponse: true}
	conn, err := tr.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return tr, conn.(*streamableServerConn)
}

func elicitCall(t *testing.T) *jsonrpc2.Request {
	t.Helper()
	call, err := jsonrpc2.NewCall(jsonrpc2.Int64ID(1), methodElicit, map[string]any{"message": "confirm?"})
	if err != nil {
		t.Fatal(err)
	}
	return call
}

// openStandalone opens the client's standalone GET stream on tr and
// returns the data of the first message event it carries.
func openStandalone(ctx context.Context, t *testing.T, tr *StreamableServerTransport) <-chan string {
	t.Helper()
	srv := httptest.NewServer(tr)
	t.Cleanup(srv.Close)
	got := make(chan string, 1)
	go func() {
		defer close(got)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		for evt, err := range scanEventsLimited(resp.Body, 0) {
			if err != nil {
				return
			}
			if evt.Name == "message" {
				got <- string(evt.Data)
				return
			}
		}
	}()
	return got
}

func TestAServerRequestWaitsForTheClientToOpenItsStandaloneStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, c := jsonStatefulConn(t)
	waiting := make(chan struct{})
	c.onStandaloneWait = func() { close(waiting) }
	call := elicitCall(t)

	wrote := make(chan error, 1)
	go func() { wrote <- c.Write(ctx, call) }()
	select {
	case err := <-wrote:
		t.Fatalf("Write of a request before the client's GET returned %v; want it to wait for the GET", err)
	case <-waiting:
	case <-ctx.Done():
		t.Fatal("Write neither returned nor waited for the client's GET")
	}

	got := openStandalone(ctx, t, tr)
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("Write once the client's GET arrived: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Write did not return once the client's GET arrived")
	}
	want, err := jsonrpc2.EncodeMessage(call)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), <-got); diff != "" {
		t.Errorf("the GET stream's first message (-want +got):\n%s", diff)
	}
}

func TestAServerRequestWaitingForTheStandaloneStreamEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, c := jsonStatefulConn(t)
	callCtx, cancelCall := context.WithCancel(ctx)
	c.onStandaloneWait = cancelCall

	err := c.Write(callCtx, elicitCall(t))
	if !errors.Is(err, context.Canceled) || !errors.Is(err, jsonrpc2.ErrRejected) {
		t.Errorf("Write cancelled while waiting for the client's GET: %v; want it to wrap context.Canceled and ErrRejected", err)
	}
}

func TestAServerRequestWaitingForTheStandaloneStreamEndsWithTheSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, c := jsonStatefulConn(t)
	c.onStandaloneWait = func() { c.Close() }

	if err := c.Write(ctx, elicitCall(t)); err == nil || ctx.Err() != nil {
		t.Errorf("Write when the session closed while it waited for the client's GET: %v (test context: %v); want an error before the test's deadline", err, ctx.Err())
	}
}

func TestANotificationIsNotHeldForTheStandaloneStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, c := jsonStatefulConn(t)
	c.onStandaloneWait = func() { t.Error("Write of a notification waited for the client's GET") }
	note, err := jsonrpc2.NewNotification(notificationLoggingMessage, map[string]any{"level": "info", "data": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, note); !errors.Is(err, jsonrpc2.ErrRejected) {
		t.Errorf("Write of a notification with no GET stream open: %v; want ErrRejected (dropped, as before)", err)
	}
}

// Every tool result of the 2026-07-28 protocol carries the server's
// Implementation in _meta (annotateServerInfo), so the direct encoding
// (result_encode.go) must take a result with _meta, or it never runs for
// that protocol. Ratchet's TestAToolResultEncodesAsTheSDKDid compares its
// bytes with v1.8.0's.
func TestAResultWithServerInfoIsWrittenDirectly(t *testing.T) {
	r := &CallToolResult{
		Meta:              Meta{MetaKeyServerInfo: &Implementation{Name: "ratchet", Version: "1.0"}},
		Content:           []Content{&TextContent{Text: "execute"}, &TextContent{Text: `{"decision":"execute"}`}},
		StructuredContent: json.RawMessage(`{"decision":"execute"}`),
		resultType:        resultTypeComplete,
	}
	b, ok := r.simpleResultJSON()
	if !ok {
		t.Fatal("a result with serverInfo in _meta went through the encoder")
	}
	want := `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"ratchet","version":"1.0"}},"content":[{"type":"text","text":"execute"},{"type":"text","text":"{\"decision\":\"execute\"}"}],"structuredContent":{"decision":"execute"},"resultType":"complete"}`
	if diff := cmp.Diff(want, string(b)); diff != "" {
		t.Fatalf("encoded (-want +got):\n%s", diff)
	}
}
