// Package stripemock starts stripe-mock (pinned in go.mod as a tool) on
// loopback for tests that need a real Stripe-shaped peer.
package stripemock

import (
	"bufio"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

var addrRe = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// Start runs stripe-mock on 127.0.0.1 for the duration of the test and
// returns its base URL (http://127.0.0.1:PORT). stripe-mock is stateless and
// ignores idempotency keys (it only echoes them), so it checks request and
// response shapes, not replay behaviour.
//
// The binary is run itself, not through "go tool stripe-mock": that runs
// it as a child of the go command, which killing go leaves running.
func Start(t testing.TB) string {
	t.Helper()
	bin, err := exec.Command("go", "tool", "-n", "stripe-mock").Output() // builds it on a first run
	if err != nil {
		t.Fatalf("building stripe-mock: %v", err)
	}
	cmd := exec.Command(strings.TrimSpace(string(bin)), "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting stripe-mock: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case addr := <-found:
		return "http://" + addr
	case <-time.After(time.Minute):
		t.Fatalf("stripe-mock did not start")
	}
	return ""
}
