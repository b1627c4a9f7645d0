package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/ratchet-mcp/ratchet/proxy"
)

// runCA is "ratchet ca export": it prints the proxy CA's certificate (PEM)
// so pods can trust it. The private key never leaves the data dir.
//
// It prints only a CA that exists: run anywhere but with the server's data
// dir, creating one would hand out a CA the proxy does not use, and the
// client then fails with an opaque certificate error. serve creates the CA
// on its first start; --create makes it beforehand (provisioning).
func runCA(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "export" {
		return &exitError{code: 2, err: errors.New("usage: ratchet ca export [--config FILE] [--data-dir DIR] [--create]")}
	}
	fs := flag.NewFlagSet("ca export", flag.ContinueOnError)
	var cf commonFlags
	cf.register(fs)
	create := fs.Bool("create", false, "create the CA in the data dir if it has none (before the first serve)")
	if err := parse(fs, args[1:], stderr); err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.DataDir, "ca")
	if !*create {
		if err := caExists(dir); err != nil {
			return err
		}
	}
	ca, err := proxy.LoadOrCreateCA(dir)
	if err != nil {
		return err
	}
	_, err = stdout.Write(ca.PEM())
	return err
}

// caExists refuses a data dir without a CA, naming the flags that point at
// the server's.
func caExists(dir string) error {
	_, err := os.Stat(filepath.Join(dir, proxy.CACertFile))
	if errors.Is(err, fs.ErrNotExist) {
		abs, _ := filepath.Abs(dir)
		return fmt.Errorf("no proxy CA in %s: run ca export with the server's --config FILE (or --data-dir DIR), "+
			"where ratchet serve created it; --create makes a new one there before the first serve", abs)
	}
	return err
}
