package main

import (
	"context"
	"fmt"
	"io"

	"github.com/ratchet-mcp/ratchet/internal/config"
)

// runConfig is "ratchet config validate FILE".
func runConfig(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	if len(args) != 2 || args[0] != "validate" {
		return &exitError{code: 2, err: fmt.Errorf("usage: ratchet config validate FILE")}
	}
	cfg, err := config.Load(args[1])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (%d policies)\n", args[1], len(cfg.Policies))
	return nil
}
