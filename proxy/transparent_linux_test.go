package proxy

import (
	"net"
	"os"
	"testing"
	"time"
)

// TestSocketOwner finds the UID of this process's own client socket, as
// the loop check does for a connection redirected to Ratchet.
func TestSocketOwner(t *testing.T) {
	for _, network := range []string{"tcp4", "tcp6"} {
		ln, err := net.Listen(network, "localhost:0")
		if err != nil {
			t.Logf("%s: %v", network, err)
			continue
		}
		defer ln.Close()
		c, err := net.Dial(network, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The kernel's socket table can lag a connection just made (in a
		// sandboxed kernel especially): look for a moment.
		uid, ok := socketOwner(c.LocalAddr())
		for deadline := time.Now().Add(time.Second); !ok && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			uid, ok = socketOwner(c.LocalAddr())
		}
		if !ok {
			t.Errorf("!ok: %s: the socket %v is owned by %d (found %v), want %d", network, c.LocalAddr(), uid, ok, os.Geteuid())
		} else if uid != os.Geteuid() {
			t.Errorf("uid != os.Geteuid(): %s: the socket %v is owned by %d (found %v), want %d", network, c.LocalAddr(), uid, ok, os.Geteuid())
		}
		if _, ok := socketOwner(&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1}); ok {
			t.Error("found an owner for a socket that is not here")
		}
	}
}
