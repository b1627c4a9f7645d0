package main

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/proxy"
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

// TestApplyRules: every failure stops --apply (the pod must not start
// unguarded), but for the IPv6 rules where the namespace has no IPv6.
func TestApplyRules(t *testing.T) {
	cmds, err := proxy.TransparentRules(proxy.RulesOptions{ListenPort: 15001, ExcludeUID: 65532})
	if err != nil {
		t.Fatal(err)
	}
	fake := func(fail string) (func([]string) ([]byte, error), *[]string) {
		var ran []string
		return func(args []string) ([]byte, error) {
			line := strings.Join(args, " ")
			ran = append(ran, line)
			if strings.Contains(line, " -C ") || (fail != "" && strings.HasPrefix(line, fail)) {
				return []byte("no"), errors.New("exit status 1")
			}
			return nil, nil
		}, &ran
	}
	var out strings.Builder
	run, ran := fake("")
	if err := applyRules(cmds, run, true, &out); err != nil || !strings.Contains(out.String(), "12 rules applied") {
		t.Fatalf("%v %q (ran %q)", err, out.String(), *ran)
	}
	run, _ = fake("iptables -w -t nat -A RATCHET_OUTPUT")
	if err := applyRules(cmds, run, false, &out); err == nil {
		t.Fatal("a failed IPv4 rule did not stop --apply")
	}
	run, _ = fake("ip6tables")
	if err := applyRules(cmds, run, true, &out); err == nil {
		t.Fatal("a failed IPv6 rule did not stop --apply where the namespace has IPv6")
	}
	out.Reset()
	run, ran = fake("ip6tables")
	if err := applyRules(cmds, run, false, &out); err != nil || !strings.Contains(out.String(), "IPv6 is off") || !strings.Contains(out.String(), "6 rules applied") {
		t.Fatalf("without IPv6: %v %q (ran %q)", err, out.String(), *ran)
	}
}

// TestTransparentRulesApplyInNetns runs `ratchet transparent rules
// --apply` as the init container does, twice, in a network namespace of
// its own, and reads the rules back: one set, in both families.
func TestTransparentRulesApplyInNetns(t *testing.T) {
	skip := func(why string) {
		if os.Getenv("RATCHET_REQUIRE_NETNS") != "" {
			t.Fatalf("RATCHET_REQUIRE_NETNS is set and %s", why)
		}
		t.Skipf("needs root, ip and iptables (the machine cannot create network namespaces): %s", why)
	}
	if os.Geteuid() != 0 {
		skip("not running as root")
	}
	for _, bin := range []string{"ip", "iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			skip(bin + " is not installed")
		}
	}
	ns := "rtrules" + strconv.Itoa(os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		skip("ip netns add: " + strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	in := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for range 2 {
		if out := in(binary, "transparent", "rules", "--uid", "65532", "--listen-port", "15001", "--apply"); !strings.Contains(out, "rules applied") {
			t.Fatalf("--apply said %q", out)
		}
	}
	for _, fam := range []string{"iptables", "ip6tables"} {
		out := in(fam, "-w", "-t", "nat", "-S")
		for _, want := range []string{
			"-A OUTPUT -p tcp -j RATCHET_OUTPUT",
			"-A RATCHET_OUTPUT -m owner --uid-owner 65532 -j RETURN",
			"-A RATCHET_OUTPUT -p tcp -m multiport --dports 443,80 -j REDIRECT --to-ports 15001",
		} {
			if strings.Count(out, want) != 1 {
				t.Errorf("%s after two --apply: want %q once:\n%s", fam, want, out)
			}
		}
	}
}
