package mcp

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestQuietSDKLogs checks that the SDK's informational lines (a session
// connected, which for a stateless client is every request) drop to debug
// while its warnings pass.
func TestQuietSDKLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(quiet{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})}).With("component", "sdk")
	log.Info("server connecting")
	log.Warn("rejecting request")
	if !log.Enabled(context.Background(), slog.LevelWarn) || log.Enabled(context.Background(), slog.LevelInfo) {
		t.Error("Enabled does not follow the demotion")
	}
	got := buf.String()
	if strings.Contains(got, "server connecting") || !strings.Contains(got, "level=WARN msg=\"rejecting request\" component=sdk") {
		t.Fatalf("logged:\n%s", got)
	}
}
