package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

func runArgs(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunCommands(t *testing.T) {
	cases := []struct {
		name     string
		stdin    string
		args     []string
		code     int
		out, err string
	}{
		{"version", "", []string{"version"}, 0, "ratchet dev", ""},
		{"no command", "", nil, 2, "", "usage: ratchet"},
		{"unknown", "", []string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{"validate ok", "", []string{"config", "validate", "testdata/valid.yaml"}, 0, "ok (2 policies)", ""},
		{"validate the example as copied", "", []string{"config", "validate", "../../configs/ratchet.example.yaml"}, 1, "", "auth.agents[0].token_sha256: must be 64 lowercase hex digits"},
		{"validate broken", "", []string{"config", "validate", "../../internal/config/testdata/broken.yaml"}, 1, "", "broken.yaml:6: policies[0].ceilings[1].window"},
		{"validate missing", "", []string{"config", "validate", "/nonexistent.yaml"}, 1, "", "no such file"},
		{"validate usage", "", []string{"config"}, 2, "", "usage: ratchet config validate FILE"},
		{"token hash", "test\n", []string{"token", "hash"}, 0, "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\n", ""},
		{"token empty", "", []string{"token", "hash"}, 1, "", "no token on stdin"},
		{"serve bad flag", "", []string{"serve", "--bogus"}, 2, "", "flag provided but not defined"},
		{"serve bad log format", "", []string{"serve", "--log-format", "xml"}, 2, "", "--log-format"},
		{"mcp needs stdio", "", []string{"mcp"}, 2, "", "only --stdio"},
		{"ca usage", "", []string{"ca"}, 2, "", "usage: ratchet ca export"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runArgs(t, c.stdin, c.args...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.err) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, c.code, c.out, c.err)
			}
		})
	}
}

func TestServeRefusesOpenUnauthenticatedListener(t *testing.T) {
	dir := t.TempDir()
	cfg := dir + "/c.yaml"
	writeFile(t, cfg, "listen: {mcp: '0.0.0.0:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\ndata_dir: "+dir+"\n")
	code, _, errs := runArgs(t, "", "serve", "--config", cfg)
	if code != 1 || !strings.Contains(errs, "refusing to listen on non-loopback") {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

func TestCAExport(t *testing.T) {
	dir := t.TempDir()
	// Without a CA in the data dir (not the server's), nothing is created:
	// the error names the flag that points at the server's.
	code, out, errs := runArgs(t, "", "ca", "export", "--data-dir", dir)
	if code != 1 || out != "" || !strings.Contains(errs, "no proxy CA in") || !strings.Contains(errs, "--config") {
		t.Errorf("export without a CA: exit %d, out %q, err %q; want exit 1 naming --config", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca")); !os.IsNotExist(err) {
		t.Errorf("export without a CA created %s: %v", filepath.Join(dir, "ca"), err)
	}
	code, out, errs = runArgs(t, "", "ca", "export", "--data-dir", dir, "--create")
	if code != 0 || !strings.HasPrefix(out, "-----BEGIN CERTIFICATE-----") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	// The same CA on every call; its key stays in the data dir, 0600.
	_, again, _ := runArgs(t, "", "ca", "export", "--data-dir", dir)
	if again != out || strings.Contains(out, "PRIVATE KEY") {
		t.Fatal("ca export is not stable or leaks the key")
	}
	fi, err := os.Stat(filepath.Join(dir, "ca", "ca.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("ca key: %v %v", fi, err)
	}
}

func TestServeStartupErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	cases := map[string]struct{ config, want string }{
		"port in use": {"listen: {mcp: '" + busy.Addr().String() + "', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\n",
			"listening for MCP on " + busy.Addr().String()},
		"unreadable key": {"listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\nsecrets: {hmac_key_file: '" + dir + "/bad.key'}\n",
			"bad.key"},
		"invalid config": {"listen: {mcp: '127.0.0.1:0'}\npolicies:\n  - match: 'a.*'\n    ceilings: [{name: x, limit_count: -1, window: 1h, per: global}]\n",
			"c.yaml:4: policies[0].ceilings[0].limit_count"},
		"open admin": {"listen: {mcp: '127.0.0.1:0', admin: '0.0.0.0:0', proxy: '127.0.0.1:0'}\n",
			"no auth.admins are configured"},
	}
	writeFile(t, dir+"/bad.key", "not hex\n")
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := dir + "/c.yaml"
			writeFile(t, cfg, c.config)
			code, _, errs := runArgs(t, "", "serve", "--config", cfg, "--data-dir", t.TempDir())
			if code == 0 || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d: %s", code, errs)
			}
		})
	}
}

func TestServeRefusesAnotherSecret(t *testing.T) {
	// A ledger created with one HMAC key, then served with a new one (the
	// key file lost, or another replica's): serve must stop with a clear
	// error rather than treat every retry as a new action.
	data := t.TempDir()
	st, err := badgerstore.Open(filepath.Join(data, "ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: bytes.Repeat([]byte{1}, 32), ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeFile(t, cfg, "listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\n")
	code, _, errs := runArgs(t, "", "serve", "--config", cfg, "--data-dir", data)
	if code == 0 || !strings.Contains(errs, "different HMAC secret") || !strings.Contains(errs, filepath.Join(data, "hmac.key")) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

func TestMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "")
	limitMemory(slog.New(slog.DiscardHandler))
	if got := debug.SetMemoryLimit(-1); got != defaultMemoryLimit {
		t.Fatalf("limit %d without GOMEMLIMIT, want %d", got, defaultMemoryLimit)
	}
	debug.SetMemoryLimit(1 << 40)
	t.Setenv("GOMEMLIMIT", "1TiB") // the runtime read it at start; an operator's value stands
	limitMemory(slog.New(slog.DiscardHandler))
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Fatalf("limit %d with GOMEMLIMIT set", got)
	}
}

// The help lines up every command's description, however long its name,
// and the operator commands' usage names the environment they read.
func TestHelpAlignsAndNamesTheAdminEnvironment(t *testing.T) {
	_, _, help := runArgs(t, "", "--help")
	col := -1
	for _, l := range strings.Split(help, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(l, "  "), " ")
		if !strings.HasPrefix(l, "  ") || !ok || strings.HasPrefix(name, "RATCHET_") {
			continue
		}
		at := len(l) - len(strings.TrimLeft(rest, " "))
		if col == -1 {
			col = at
		}
		if at != col {
			t.Errorf("%q: description at column %d, the others at %d", l, at, col)
		}
	}
	if col == -1 {
		t.Fatalf("no command lines in the help:\n%s", help)
	}
	for _, args := range [][]string{{"--help"}, {"approvals"}, {"effects", "nope"}, {"grants"}, {"audit"}, {"budgets", "-h"}} {
		_, _, errs := runArgs(t, "", args...)
		for _, want := range []string{"RATCHET_ADMIN_URL", "RATCHET_ADMIN_TOKEN"} {
			if !strings.Contains(errs, want) {
				t.Errorf("ratchet %v does not name %s:\n%s", args, want, errs)
			}
		}
	}
}

// An exitError without a cause (a -h answered, flag errors already
// printed by the flag package) formats as its exit status rather than
// panicking, and run finds one that a command wrapped.
func TestExitErrorWithoutCauseFormatsAndIsFoundWrapped(t *testing.T) {
	if got, want := fmt.Sprint(&exitError{code: 2}), "exit status 2"; got != want {
		t.Errorf("formatting an exitError without a cause: %q, want %q", got, want)
	}
	cause := errors.New("--since: bad time")
	if got, want := fmt.Sprint(&exitError{code: 2, err: cause}), cause.Error(); got != want {
		t.Errorf("formatting an exitError with a cause: %q, want %q", got, want)
	}
	var errb bytes.Buffer
	wrapped := command{name: "wrapped", run: func(context.Context, []string, io.Reader, io.Writer, io.Writer) error {
		return fmt.Errorf("doing it: %w", &exitError{code: 3, err: cause})
	}}
	if got, want := runCommand(context.Background(), wrapped, nil, nil, io.Discard, &errb), 3; got != want {
		t.Errorf("exit code of a wrapped exitError: %d, want %d", got, want)
	}
	if got, want := errb.String(), "ratchet wrapped: doing it: --since: bad time\n"; got != want {
		t.Errorf("stderr of a wrapped exitError: %q, want %q", got, want)
	}
}
