package main

import (
	"context"
	"fmt"
	"io"

	"github.com/ratchet-mcp/ratchet/internal/config"
)

// runConfig is "ratchet config validate FILE". Problems are errors (exit
// 1); warnings (see config.Warnings) go to stderr, one line each naming
// the file line, and leave the exit status 0: the file is valid. A valid
// file's "ok" line is followed by what answers without a credential
// (config.Open), one "open:" line each.
func runConfig(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) != 2 || args[0] != "validate" {
		return &exitError{code: 2, err: fmt.Errorf("usage: ratchet config validate FILE")}
	}
	cfg, err := config.Load(args[1])
	if err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "%s:%d: warning: %s: %s\n", args[1], w.Line, w.Path, w.Message)
	}
	fmt.Fprintf(stdout, "%s: ok (%d policies)\n", args[1], len(cfg.Policies))
	for _, line := range cfg.Open() {
		fmt.Fprintf(stdout, "open: %s\n", line)
	}
	return nil
}
