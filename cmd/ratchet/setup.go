package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/ratchet-mcp/ratchet/internal/config"
	"github.com/ratchet-mcp/ratchet/internal/gcpace"
	"github.com/ratchet-mcp/ratchet/internal/loopback"
	"github.com/ratchet-mcp/ratchet/internal/tracing"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// commonFlags are the flags every long-running command takes.
type commonFlags struct {
	config, dataDir, logFormat, logLevel string
}

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "config file (default $RATCHET_CONFIG; none: built-in defaults)")
	fs.StringVar(&c.dataDir, "data-dir", "", "data directory (overrides data_dir)")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// load applies defaults → file → env → flags, then validates.
func (c *commonFlags) load() (*config.Config, error) {
	path := c.config
	if path == "" {
		path = os.Getenv("RATCHET_CONFIG")
	}
	cfg := config.Default()
	if path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
	}
	if c.dataDir != "" {
		cfg.DataDir = c.dataDir
	}
	return cfg, cfg.Validate()
}

func (c *commonFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.logFormat {
	case "text":
		return slog.New(tracing.LogHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
}

// parse parses flags, reporting errors without printing usage twice.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &exitError{code: 0}
		}
		return &exitError{code: 2}
	}
	if fs.NArg() > 0 {
		return &exitError{code: 2, err: fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

// openEngine opens the configured ledger.
func openEngine(cfg *config.Config, log *slog.Logger, obs ledger.Observer) (*ledger.Engine, error) {
	limitMemory(log)
	if gcpace.Start() {
		log.Debug("Go collector paced", "headroom_bytes", gcpace.Headroom)
	}
	secret, err := ledger.LoadOrCreateSecret(cfg.HMACKeyPath())
	if err != nil {
		return nil, err
	}
	var store ledger.Store
	switch cfg.Ledger.Backend {
	case "postgres":
		// Every replica of a fleet must share the HMAC key (mount the same
		// Secret): fingerprints, dimension hashes and vendor keys derive
		// from it.
		dsn, err := postgresDSN(cfg)
		if err != nil {
			return nil, err
		}
		store, err = pgstore.Open(context.Background(), dsn, &pgstore.Options{Schema: cfg.Ledger.Schema, Logger: log})
		if err != nil {
			return nil, err
		}
	default:
		if store, err = openStore(cfg, log); err != nil {
			return nil, err
		}
	}
	eng, err := ledger.New(ledger.Options{Store: store, Secret: secret, Policies: cfg.Policies,
		Defaults: cfg.LedgerDefaults(), Logger: log, Observer: obs,
		Audit: cfg.Audit.On(), AuditRetention: cfg.Audit.Retention.Value(),
		Route: routeOf(cfg), BudgetThresholds: cfg.Notify.BudgetThresholds, Vendors: cfg.Registry()})
	if err != nil {
		store.Close()
		if errors.Is(err, ledger.ErrSecretMismatch) {
			err = fmt.Errorf("%w (the HMAC key in use is %s)", err, cfg.HMACKeyPath())
		}
		return nil, err
	}
	return eng, nil
}

// defaultMemoryLimit is the Go runtime's soft memory limit when GOMEMLIMIT
// is not set. Badger keeps its memtables and caches in Go memory (about
// 130 MiB as configured, see ledger/badgerstore), and each memtable flush
// leaves 16 MiB of garbage; without a limit the collector lets the heap
// grow to twice what is live and RSS under load was seen anywhere from
// 150 to 660 MiB. With it the collector works harder near the limit
// instead. A container with a memory limit should set GOMEMLIMIT to about
// 80% of it.
const defaultMemoryLimit = 384 << 20

// limitMemory applies defaultMemoryLimit unless GOMEMLIMIT says otherwise.
func limitMemory(log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(defaultMemoryLimit)
	log.Debug("Go memory limit", "bytes", defaultMemoryLimit)
}

// postgresDSN reads the DSN from the environment variable or file the
// config names; it is a secret, so never from the config itself or a flag.
func postgresDSN(cfg *config.Config) (string, error) {
	if cfg.Ledger.DSNEnv != "" {
		dsn := os.Getenv(cfg.Ledger.DSNEnv)
		if dsn == "" {
			return "", fmt.Errorf("ledger.dsn_env names %s, which is empty", cfg.Ledger.DSNEnv)
		}
		return dsn, nil
	}
	b, err := os.ReadFile(cfg.Ledger.DSNFile)
	if err != nil {
		return "", fmt.Errorf("reading ledger.dsn_file: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// openStore opens the Badger ledger in the data dir, with encryption at
// rest when a key file is configured.
func openStore(cfg *config.Config, log *slog.Logger) (*badgerstore.Store, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating data dir: %w", err)
	}
	bo := &badgerstore.Options{Logger: log, MinFreeBytes: cfg.Ledger.MinFreeBytes}
	if f := cfg.Secrets.EncryptionKeyFile; f != "" {
		var err error
		if bo.EncryptionKey, err = ledger.ReadKeyFile(f); err != nil {
			return nil, err
		}
		if n := len(bo.EncryptionKey); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("encryption key in %s is %d bytes; it must be 16, 24 or 32", f, n)
		}
	}
	return badgerstore.Open(filepath.Join(cfg.DataDir, "ledger"), bo)
}

// isLoopback reports whether a listen address only accepts local callers.
func isLoopback(addr string) bool { return loopback.Is(addr) }
