package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// binary is the ratchet binary built once for the process tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ratchet-bin")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "ratchet")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building ratchet: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// server is a running "ratchet serve".
type server struct {
	cmd               *exec.Cmd
	mcp, admin, proxy string
	stderr            *logBuf
	done              chan error
}

// logBuf collects a process's log lines; the test reads while a goroutine
// writes.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) add(line string) {
	l.mu.Lock()
	l.b.WriteString(line + "\n")
	l.mu.Unlock()
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var listenRe = regexp.MustCompile(`mcp=(http://\S+/mcp) admin=(http://\S+) proxy=(http://\S+)`)

// startServe runs "ratchet serve" on dataDir and waits until it listens.
func startServe(t *testing.T, dataDir string, extraConfig string) *server {
	t.Helper()
	cfg := filepath.Join(dataDir, "..", filepath.Base(dataDir)+".yaml")
	writeFile(t, cfg, "listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\n"+extraConfig)
	return startServeConfig(t, cfg, dataDir)
}

// startServeConfig runs "ratchet serve --config cfg" on dataDir and waits
// until it listens.
func startServeConfig(t *testing.T, cfg, dataDir string) *server {
	t.Helper()
	cmd := exec.Command(binary, "serve", "--config", cfg, "--data-dir", dataDir)
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stderr: &logBuf{}, done: make(chan error, 1)}
	found := make(chan []string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.stderr.add(sc.Text())
			if m := listenRe.FindStringSubmatch(sc.Text()); m != nil {
				found <- m
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		<-scanned // every line is in s.stderr before done is signalled
		s.done <- err
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	select {
	case m := <-found:
		s.mcp, s.admin, s.proxy = m[1], m[2], m[3]
	case err := <-s.done:
		t.Fatalf("serve exited early: %v\n%s", err, s.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not start:\n%s", s.stderr)
	}
	return s
}

// connect opens an MCP session to url with token (may be empty), closed
// when the test ends.
func connect(t *testing.T, url string, token ...string) *sdk.ClientSession {
	t.Helper()
	tok := ""
	if len(token) > 0 {
		tok = token[0]
	}
	cs, err := mcp.Connect(context.Background(), url, tok, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func begin(t *testing.T, cs *sdk.ClientSession, key string) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
		Arguments: map[string]any{"idempotency_key": key, "effect_type": "email.send"}})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	return res.StructuredContent.(map[string]any)
}

func TestServeShutdownAndLock(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	s := startServe(t, data, "")
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(s.admin + path)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	// The proxy listener answers: an unknown vendor path is a 404 from Ratchet.
	if resp, err := http.Get(s.proxy + "/nowhere/v1/x"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("proxy listener: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	cs := connect(t, s.mcp)
	first := begin(t, cs, "k1")
	if first["decision"] != "execute" {
		t.Fatalf("begin: %v", first)
	}

	// A second process on the same data dir fails at once, naming the lock.
	second := filepath.Join(t.TempDir(), "second.yaml")
	writeFile(t, second, "listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\n")
	for _, args := range [][]string{
		{"serve", "--data-dir", data, "--config", second},
		{"mcp", "--stdio", "--data-dir", data},
	} {
		start := time.Now()
		cmd := exec.Command(binary, args...)
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "locked by another process") || time.Since(start) > 10*time.Second {
			t.Fatalf("%v: err %v after %v:\n%s", args, err, time.Since(start), out)
		}
	}

	// SIGTERM: the process exits 0 and closes the ledger.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if !strings.Contains(s.stderr.String(), "ledger closed") {
		t.Fatalf("ledger not closed cleanly:\n%s", s.stderr)
	}

	// Restarted on the same dir, the effect is still there.
	s2 := startServe(t, data, "")
	again := begin(t, connect(t, s2.mcp), "k1")
	if again["decision"] != "in_flight" || again["effect_id"] != first["effect_id"] {
		t.Fatalf("after restart: %v", again)
	}
}

func TestStdioSubprocess(t *testing.T) {
	data := t.TempDir()
	cmd := exec.Command(binary, "mcp", "--stdio", "--data-dir", data, "--namespace", "local")
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).
		Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ServerInfo.Name; got != "ratchet" {
		t.Fatalf("server name %q", got)
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 6 {
		t.Fatalf("tools/list: %v %v", tools, err)
	}
	r := begin(t, cs, "stdio:1")
	eff, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_get_effect", Arguments: map[string]any{"effect_id": r["effect_id"]}})
	if err != nil || eff.StructuredContent.(map[string]any)["namespace"] != "local" {
		t.Fatalf("get: %v %v", eff, err)
	}
}

func TestStdioBridge(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	sum := sha256.Sum256([]byte("bridge-token"))
	s := startServe(t, data, "auth:\n  agents:\n    - {token_sha256: '"+hex.EncodeToString(sum[:])+"', namespace: team, agent_id: bridged}\n")

	cmd := exec.Command(binary, "mcp", "--stdio", "--server", s.mcp)
	cmd.Env = append(os.Environ(), "RATCHET_TOKEN=bridge-token")
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, nil).
		Connect(context.Background(), &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil || len(tools.Tools) != 6 {
		t.Fatalf("tools/list through the bridge: %v %v", tools, err)
	}
	r := begin(t, cs, "bridged:1")
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_get_effect", Arguments: map[string]any{"effect_id": r["effect_id"]}})
	if err != nil {
		t.Fatal(err)
	}
	eff := res.StructuredContent.(map[string]any)
	if eff["namespace"] != "team" || eff["agent_id"] != "bridged" {
		t.Fatalf("the bridge did not carry the token's identity: %v", eff)
	}
	// Without the token the sidecar refuses the bridge.
	bad := exec.Command(binary, "mcp", "--stdio", "--server", s.mcp)
	bad.Stdin = strings.NewReader("")
	out, err := bad.CombinedOutput()
	if err == nil {
		t.Fatalf("the bridge started without a token:\n%s", out)
	}
	for _, want := range []string{"connecting to", "no bearer token", "RATCHET_TOKEN is not set"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("bridge without token does not say %q:\n%s", want, out)
		}
	}
}

// A desktop MCP client ends its stdio server with SIGTERM: that is a normal
// end (exit 0), and no ERROR line goes to the client's log.
func TestStdioSIGTERMIsQuiet(t *testing.T) {
	data := t.TempDir()
	cmd := exec.Command(binary, "mcp", "--stdio", "--data-dir", data)
	var stderr strings.Builder // read after Wait, when the copy has ended
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.Contains(line, `"serverInfo"`) {
		t.Fatalf("initialize: %q %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if strings.Contains(stderr.String(), "level=ERROR") {
		t.Errorf("an ERROR line on SIGTERM:\n%s", stderr.String())
	}
}

// Ctrl-C on "make run" ends it cleanly: serve exits 0 on SIGINT, and make
// runs the built binary itself (go run answered a Ctrl-C with exit status
// 1, which make reported as "make: *** [run] Error 1").
func TestCtrlCOnMakeRunIsACleanEnd(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "")
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("exit after SIGINT: %v\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGINT")
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	_, recipe, _ := strings.Cut(string(mk), "\nrun:")
	recipe, _, _ = strings.Cut(recipe, "\n\n")
	if strings.Contains(recipe, "go run") || strings.Contains(recipe, "$(GO) run") || !strings.Contains(recipe, "./bin/ratchet serve") {
		t.Errorf("make run's recipe must run ./bin/ratchet, not go run:%s", recipe)
	}
}
