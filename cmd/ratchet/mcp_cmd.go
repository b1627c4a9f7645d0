package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// runMCP is "ratchet mcp --stdio": the tools over stdin/stdout for a local
// MCP client. It opens the ledger itself, or with --server URL bridges to a
// running sidecar (Badger allows one process per data dir), authenticating
// with the token in $RATCHET_TOKEN (never a flag, which ps would show).
func runMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var cf commonFlags
	cf.register(fs)
	stdio := fs.Bool("stdio", false, "serve over stdin and stdout (required)")
	server := fs.String("server", "", "bridge to a running sidecar's MCP URL, e.g. http://127.0.0.1:8787/mcp")
	ns := fs.String("namespace", "", "namespace for this client (default \"default\")")
	agent := fs.String("agent-id", "", "fix the agent_id of this client")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if !*stdio {
		return &exitError{code: 2, err: errors.New("only --stdio is supported: ratchet mcp --stdio [--config FILE] [--data-dir DIR] [--server URL]")}
	}
	log, err := cf.logger(stderr) // stdout carries the protocol
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	transport := &sdk.IOTransport{Reader: io.NopCloser(stdin), Writer: nopCloser{stdout}}
	var srv *sdk.Server
	if *server != "" {
		token := os.Getenv("RATCHET_TOKEN")
		connect := func(ctx context.Context) (*sdk.ClientSession, error) {
			return mcp.Connect(ctx, *server, token, version)
		}
		var closeRemote func()
		if srv, closeRemote, err = mcp.Bridge(ctx, connect, version); err != nil {
			return err
		}
		defer closeRemote()
	} else {
		cfg, err := cf.load()
		if err != nil {
			return err
		}
		eng, err := openEngine(cfg, log, nil)
		if err != nil {
			return err
		}
		defer eng.Close(context.Background())
		traced, flushTraces, err := startTracing(ctx, cfg, eng, log) // trace.go
		if err != nil {
			return err
		}
		defer flushTraces()
		srv = mcp.New(traced, &mcp.Options{Version: version, Logger: log, Identity: mcp.Identity{Namespace: *ns, AgentID: *agent},
			Defaults: cfg.LedgerDefaults()})
	}
	if err := srv.Run(ctx, transport); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
