// Package stripemock starts stripe-mock (pinned in go.mod as a tool) on
// loopback for tests that need a real Stripe-shaped peer.
package stripemock

import (
	"bufio"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

var addrRe = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// Start runs stripe-mock on 127.0.0.1 for the duration of the test and
// returns its base URL (http://127.0.0.1:PORT). stripe-mock is stateless and
// ignores idempotency keys (it only echoes them), so it checks request and
// response shapes, not replay behaviour.
func Start(t testing.TB) string {
	t.Helper()
	cmd := exec.Command("go", "tool", "stripe-mock", "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
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
	case <-time.After(2 * time.Minute): // the first run compiles it
		t.Fatalf("stripe-mock did not start")
	}
	return ""
}
