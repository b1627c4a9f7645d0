package main

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// TestServeTransparent: serve opens listen.transparent, refuses a
// connection made to it directly (never redirected), and shuts down
// cleanly with it open.
func TestServeTransparent(t *testing.T) {
	dir := t.TempDir()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	cfg := filepath.Join(dir, "ratchet.yaml")
	writeFile(t, cfg, "listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0', transparent: '"+addr+"'}\n")
	cmd := exec.Command(binary, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"))
	logs := &logBuf{}
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	serving, scanned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		once := sync.Once{}
		for sc.Scan() {
			logs.add(sc.Text())
			if strings.Contains(sc.Text(), "ratchet serving") {
				once.Do(func() { close(serving) })
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not start:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "transparent mode listening") {
		t.Fatalf("no transparent listener:\n%s", logs)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: api.stripe.com\r\n\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("a direct connection was answered: %q", b)
	}
	c.Close()
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	pw.Close()
	<-scanned // every line is in logs
	if err != nil || !strings.Contains(logs.String(), "transparent connection refused") || !strings.Contains(logs.String(), "ledger closed") {
		t.Fatalf("serve: %v\n%s", err, logs)
	}
}
