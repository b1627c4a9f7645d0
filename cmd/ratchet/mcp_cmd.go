package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// runMCP is "ratchet mcp --stdio": the tools over stdin/stdout for a local
// MCP client. It opens the ledger itself, or with --server URL bridges to a
// running sidecar (Badger allows one process per data dir), authenticating
// with the token in $RATCHET_TOKEN (never a flag, which ps would show) or
// read from --token-file before every request (a rotated service account
// token).
func runMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	var cf commonFlags
	cf.register(fs)
	stdio := fs.Bool("stdio", false, "serve over stdin and stdout (required)")
	server := fs.String("server", "", "bridge to a running sidecar's MCP URL, e.g. http://127.0.0.1:8787/mcp")
	ns := fs.String("namespace", "", "namespace for this client (default \"default\")")
	agent := fs.String("agent-id", "", "fix the agent_id of this client")
	tokenFile := fs.String("token-file", os.Getenv("RATCHET_TOKEN_FILE"), "with --server: read the bearer token from this file before every request (a projected service account token the kubelet rotates); default $RATCHET_TOKEN_FILE, else the token in $RATCHET_TOKEN")
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
		var source func() (string, error)
		switch {
		case *tokenFile != "":
			if source, err = mcp.TokenFile(*tokenFile); err != nil {
				return err
			}
			token = "(from --token-file)"
		case token != "":
			source = func() (string, error) { return token, nil }
		}
		connect := func(ctx context.Context) (*sdk.ClientSession, error) {
			cs, err := mcp.ConnectWith(ctx, *server, source, version)
			if err != nil && token == "" {
				return nil, fmt.Errorf("%w (RATCHET_TOKEN is not set: set it to this agent's token when the sidecar has auth.agents)", err)
			}
			return cs, err
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
	return serveStdio(ctx, srv, transport, log)
}

// serveStdio serves one session until the client closes stdin or the
// process is told to stop (a desktop client ends its server with SIGTERM).
// Both are a normal end: the SDK's Server.Run logs a signal as an ERROR
// line ("server run cancelled"), which a client shows its user as a
// failure, so the session is run here instead.
func serveStdio(ctx context.Context, srv *sdk.Server, t sdk.Transport, log *slog.Logger) error {
	ss, err := srv.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("starting the stdio session: %w", err)
	}
	ended := make(chan error, 1)
	go func() { ended <- ss.Wait() }()
	select {
	case <-ctx.Done():
		ss.Close()
		<-ended
		log.Info("stdio session closed on signal")
		return nil
	case err := <-ended:
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, sdk.ErrConnectionClosed) {
			return fmt.Errorf("stdio session: %w", err)
		}
		return nil
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
