// Command ratchet is the Ratchet side-effect gate: one binary whose
// subcommands run the sidecar (serve), serve MCP over stdio, and operate it.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// A second signal after the first forces exit.
		<-ctx.Done()
		stop()
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		fmt.Fprintln(os.Stderr, "ratchet: second signal, exiting now")
		os.Exit(2)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// command is one subcommand.
type command struct {
	name, usage string
	run         func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"serve", "run the sidecar: MCP, admin API, metrics, outbound proxy", runServe},
		{"mcp", "serve the MCP tools over stdio (ratchet mcp --stdio)", runMCP},
		{"config", "validate a config file (ratchet config validate FILE)", runConfig},
		{"ca", "print the proxy's CA certificate (ratchet ca export)", runCA},
		{"transparent", "print or apply the iptables rules of transparent mode (ratchet transparent rules)", runTransparent},
		{"approvals", "list, approve or reject approval requests (admin API)", runApprovals},
		{"effects", "list, show or resolve effects (admin API)", runEffects},
		{"budgets", "show every ceiling's counted and remaining (admin API)", runBudgets},
		{"policy", "explain which rules, ceilings and decision a begin or a proxied request would get (ratchet policy explain)", runPolicy},
		{"grants", "list, create or revoke grants: scoped approvals (admin API)", runGrants},
		{"outbox", "list notification events waiting for delivery, or dead letters (admin API)", runOutbox},
		{"halt", "halt a scope: its new begins are denied until resumed (admin API)", runHalt},
		{"resume", "lift a halt (admin API)", runResume},
		{"halts", "list the active halts (admin API)", runHalts},
		{"audit", "export the audit log (admin API) or verify an export offline", runAudit},
		{"backup", "write a backup of a data dir to stdout (offline)", runBackup},
		{"restore", "restore a backup from stdin into an empty data dir (offline)", runRestore},
		{"token", "print the SHA-256 of a token read from stdin (ratchet token hash)", runToken},
		{"version", "print the version", func(_ context.Context, _ []string, _ io.Reader, stdout, _ io.Writer) error {
			fmt.Fprintln(stdout, "ratchet", version)
			return nil
		}},
	}
}

// exitError carries a specific exit code. err is nil when there is nothing
// more to say (the flag package printed the usage, or -h was asked for).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// run is the whole program, testable without exec.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		return runCommand(ctx, c, args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "ratchet: unknown command %q\n", args[0])
	usage(stderr)
	return 2
}

// runCommand runs c and returns its exit code: an exitError's, found
// however the command wrapped it, or 1 for any other error.
func runCommand(ctx context.Context, c command, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	err := c.run(ctx, args, stdin, stdout, stderr)
	if err == nil {
		return 0
	}
	code := 1
	if ee := (*exitError)(nil); errors.As(err, &ee) {
		code = ee.code
		if ee.err == nil && err == error(ee) {
			return code // nothing more to say
		}
	}
	fmt.Fprintln(stderr, "ratchet "+c.name+":", err)
	return code
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ratchet <command> [flags]   (ratchet <command> -h for its flags)\n\ncommands:")
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.usage)
	}
	fmt.Fprintln(w, "\nthe commands marked (admin API) read the environment:\n"+adminEnvVars)
}
