//go:build unix

package mcp_test

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// TestATokenFileSwappedForAnEndlessStreamIsRefusedUnread: the bridge's
// token file is a symlink (the kubelet's ..data); one swapped to point at
// a FIFO fed without end (or /dev/zero) is refused with an error, having
// read at most a token's worth, instead of reading until memory runs out.
func TestATokenFileSwappedForAnEndlessStreamIsRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	link := filepath.Join(dir, "token")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	// O_RDWR: the open does not wait for a reader (Linux), and the FIFO
	// never ends, as /dev/zero does not.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var written atomic.Int64
	go func() {
		chunk := make([]byte, 64<<10)
		for i := range chunk {
			chunk[i] = 'a'
		}
		for written.Load() < 64<<20 {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() {
		_, err := mcp.TokenFile(link)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("a token file that is an endless stream was accepted")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("reading the token file still had not returned after 5s, %d bytes in", written.Load())
	}
	w.Close()
	if n := written.Load(); n > 1<<20 {
		t.Errorf("%d bytes were taken from the stream, want at most a pipe's buffer", n)
	}
}
