package main

import (
	"log/slog"
	"net"
	"strings"
	"testing"
)

func TestTransparentRulesCommand(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		code     int
		out, err string
	}{
		{"usage", []string{"transparent"}, 2, "", "usage: ratchet transparent rules --uid UID"},
		{"uid required", []string{"transparent", "rules"}, 2, "", "--uid is required"},
		{"bad port", []string{"transparent", "rules", "--uid", "65532", "--ports", "443,x"}, 2, "", `--ports: "x" is not a port`},
		{"the listener's own port", []string{"transparent", "rules", "--uid", "65532", "--ports", "15001"}, 2, "", "is the transparent listener's own"},
		{"printed", []string{"transparent", "rules", "--uid", "65532"}, 0,
			"iptables -w -t nat -A RATCHET_OUTPUT -m owner --uid-owner 65532 -j RETURN\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out, errs := runArgs(t, "", c.args...)
			if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(errs, c.err) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want %d, %q, %q", code, out, errs, c.code, c.out, c.err)
			}
		})
	}
	_, out, _ := runArgs(t, "", "transparent", "rules", "--uid", "1337", "--listen-port", "15006", "--ports", "443")
	for _, want := range []string{
		"ip6tables -w -t nat -A RATCHET_OUTPUT -m owner --uid-owner 1337 -j RETURN",
		"ip6tables -w -t nat -A RATCHET_OUTPUT -p tcp -m multiport --dports 443 -j REDIRECT --to-ports 15006",
		"iptables -w -t nat -C OUTPUT -p tcp -j RATCHET_OUTPUT 2>/dev/null || iptables -w -t nat -A OUTPUT -p tcp -j RATCHET_OUTPUT",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the script lacks %q:\n%s", want, out)
		}
	}
}

func TestListenTransparentOnBothLoopbacks(t *testing.T) {
	lns, err := listenTransparent("", slog.New(slog.DiscardHandler))
	if err != nil || len(lns) != 0 {
		t.Fatalf("off: %v %v", lns, err)
	}
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	lns, err = listenTransparent(addr, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	if v6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		v6.Close()
		_, port, _ := net.SplitHostPort(addr)
		if len(lns) != 2 || lns[1].Addr().String() != "[::1]:"+port {
			t.Fatalf("this machine has IPv6 loopback, but Ratchet listens only on %v", lns[0].Addr())
		}
	}
	if lns[0].Addr().String() != addr {
		t.Fatalf("listening on %v, want %s", lns[0].Addr(), addr)
	}
}
