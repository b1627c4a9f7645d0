package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVerifyAgainstAnEarlierExportFindsAnEmptiedOne: a file that holds only
// a trailer verifies on its own (an empty range is a real export), with a
// note that the file alone shows only its own consistency; against the
// heads of an earlier export it does not.
func TestVerifyAgainstAnEarlierExportFindsAnEmptiedOne(t *testing.T) {
	dir := t.TempDir()
	emptied := filepath.Join(dir, "audit.jsonl")
	os.WriteFile(emptied, []byte(`{"heads":{},"first":{},"records":0,"exported_at":"2026-01-01T00:00:00Z"}`+"\n"), 0o600)
	earlier := filepath.Join(dir, "earlier.jsonl")
	os.WriteFile(earlier, []byte(`{"heads":{"local":{"seq":15,"hash":"ab"}},"first":{"local":1},"records":15,"exported_at":"2025-12-31T00:00:00Z"}`+"\n"), 0o600)
	var out, errb bytes.Buffer
	if err := runAudit(context.Background(), []string{"verify", emptied}, nil, &out, &errb); err != nil || !strings.Contains(out.String(), "without --heads") {
		t.Fatalf("alone: %v %q", err, out.String())
	}
	out.Reset()
	err := runAudit(context.Background(), []string{"verify", "--heads", earlier, emptied}, nil, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "holds none of a chain") {
		t.Fatalf("against the earlier heads: %v %q", err, out.String())
	}
}
