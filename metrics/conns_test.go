package metrics_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/metrics"
)

// TestIdleConnectionsAreClosedAndCounted: a listener with an idle timeout
// closes a keep-alive connection nobody uses, and the metrics count it,
// beside the open MCP sessions' gauge.
func TestIdleConnectionsAreClosedAndCounted(t *testing.T) {
	m := metrics.New()
	m.WatchSessions(func() int { return 7 })
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	srv.Config.IdleTimeout = 200 * time.Millisecond
	srv.Config.ConnState = m.ConnState("mcp")
	srv.Start()
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c) // the answer, then EOF when the idle timeout closes it
	if !strings.HasPrefix(string(b), "HTTP/1.1 200") {
		t.Fatalf("answer %q", b)
	}
	var body string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if body = rec.Body.String(); strings.Contains(body, `ratchet_http_idle_connections_closed_total{listener="mcp"} 1`) {
			break
		}
	}
	for _, want := range []string{`ratchet_http_idle_connections_closed_total{listener="mcp"} 1`, "ratchet_mcp_sessions 7"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
