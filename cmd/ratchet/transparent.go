package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/ratchet-mcp/ratchet/proxy"
)

// runTransparent is "ratchet transparent rules": it prints the iptables and
// ip6tables rules that redirect a pod's outbound connections to Ratchet's
// transparent listener (listen.transparent), excluding Ratchet's own UID,
// as a shell script; with --apply it runs them (an init container with
// NET_ADMIN does, before the app starts).
func runTransparent(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "rules" {
		return &exitError{code: 2, err: errors.New("usage: ratchet transparent rules --uid UID [--listen-port 15001] [--ports 443,80] [--apply]")}
	}
	o, apply, err := parseRulesFlags(args[1:], stderr)
	if err != nil {
		return err
	}
	cmds, err := proxy.TransparentRules(o)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if !apply {
		// Printing works anywhere (a script for a Linux pod, written on
		// a laptop); applying only where the rules can work.
		_, err := io.WriteString(stdout, proxy.RulesScript(cmds))
		return err
	}
	if err := proxy.TransparentSupported(); err != nil {
		return err
	}
	run := func(args []string) ([]byte, error) {
		return exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	}
	return applyRules(cmds, run, hasIPv6(), stdout)
}

// parseRulesFlags reads the flags of "transparent rules".
func parseRulesFlags(args []string, stderr io.Writer) (proxy.RulesOptions, bool, error) {
	fs := flag.NewFlagSet("transparent rules", flag.ContinueOnError)
	uid := fs.Int("uid", -1, "Ratchet's own UID, whose connections are never redirected (required: the UID the sidecar runs as)")
	listenPort := fs.Int("listen-port", 15001, "the port of listen.transparent, where connections are redirected")
	ports := fs.String("ports", "443,80", "destination ports to redirect, comma-separated")
	apply := fs.Bool("apply", false, "run the rules (needs NET_ADMIN) instead of printing them")
	if err := parse(fs, args, stderr); err != nil {
		return proxy.RulesOptions{}, false, err
	}
	if *uid < 0 {
		return proxy.RulesOptions{}, false, &exitError{code: 2, err: errors.New("--uid is required: the UID Ratchet runs as, whose own vendor calls must not be redirected back to it")}
	}
	o := proxy.RulesOptions{ListenPort: *listenPort, ExcludeUID: *uid}
	for _, p := range strings.Split(*ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return proxy.RulesOptions{}, false, &exitError{code: 2, err: fmt.Errorf("--ports: %q is not a port", p)}
		}
		o.Ports = append(o.Ports, n)
	}
	return o, *apply, nil
}

// applyRules runs the rules in order, each as printed, with run. Any
// failure stops it (the init container fails, and the app never starts
// unguarded), but for the IPv6 rules where the network namespace has no
// IPv6 (ipv6 false): nothing can leave it over IPv6, and ip6tables' nat
// table may be missing there.
func applyRules(cmds []proxy.Command, run func([]string) ([]byte, error), ipv6 bool, stdout io.Writer) error {
	applied, skipped6 := 0, false
	for _, c := range cmds {
		if skipped6 && c.Args[0] == "ip6tables" {
			continue
		}
		if c.Unless != nil {
			if _, err := run(c.Unless); err == nil {
				continue
			}
		}
		out, err := run(c.Args)
		switch {
		case err == nil:
			applied++
		case c.MayFail:
		case c.Args[0] == "ip6tables" && !ipv6:
			fmt.Fprintf(stdout, "ratchet transparent: IPv6 is off in this network namespace, so its rules are not needed (%s: %s)\n",
				strings.Join(c.Args, " "), strings.TrimSpace(string(out)))
			skipped6 = true
		default:
			return fmt.Errorf("%s: %w: %s", strings.Join(c.Args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	fmt.Fprintf(stdout, "ratchet transparent: %d rules applied\n", applied)
	return nil
}

// hasIPv6 reports whether this network namespace has an IPv6 address.
func hasIPv6() bool {
	b, err := os.ReadFile("/proc/net/if_inet6")
	return err == nil && len(strings.TrimSpace(string(b))) > 0
}

// listenTransparent opens the transparent listeners for listen.transparent
// (none when it is empty): the address given and, when that is 127.0.0.1,
// [::1] at the same port, where ip6tables' REDIRECT sends IPv6
// connections (skipped with a warning on a host without IPv6).
func listenTransparent(addr string, log *slog.Logger) ([]net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	if err := proxy.TransparentSupported(); err != nil {
		return nil, fmt.Errorf("listen.transparent is %s: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for transparent mode on %s: %w", addr, err)
	}
	lns := []net.Listener{ln}
	if host, port, _ := net.SplitHostPort(addr); host == "127.0.0.1" {
		ln6, err := net.Listen("tcp", net.JoinHostPort("::1", port))
		if err != nil {
			log.Warn("transparent mode listens on IPv4 only: connections the ip6tables rules redirect will fail", "err", err)
		} else {
			lns = append(lns, ln6)
		}
	}
	for _, l := range lns {
		// The UID to give the rules' --uid: theirs must be this one.
		log.Info("transparent mode listening", "listen", l.Addr().String(), "uid", os.Geteuid())
	}
	return lns, nil
}
