package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"path/filepath"

	"github.com/ratchet-mcp/ratchet/proxy"
)

// runCA is "ratchet ca export": it prints the proxy CA's certificate (PEM)
// so pods can trust it, creating the CA in the data dir if this is the first
// use. The private key never leaves the data dir.
func runCA(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "export" {
		return &exitError{code: 2, err: errors.New("usage: ratchet ca export [--config FILE] [--data-dir DIR]")}
	}
	fs := flag.NewFlagSet("ca export", flag.ContinueOnError)
	var cf commonFlags
	cf.register(fs)
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	ca, err := proxy.LoadOrCreateCA(filepath.Join(cfg.DataDir, "ca"))
	if err != nil {
		return err
	}
	_, err = stdout.Write(ca.PEM())
	return err
}
