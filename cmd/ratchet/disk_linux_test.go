package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// TestDiskFull runs the real binary on a small tmpfs, fills the disk under
// it, and checks that begins answer an error (never execute without a
// durable record), /readyz turns red, and service resumes once space is
// freed. Mounting needs root, which this project's machines and CI have.
func TestDiskFull(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (needs root): %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	data := filepath.Join(mnt, "data")
	s := startServe(t, data, "ledger: {min_free_bytes: 134217728}\n") // 128 MiB floor
	cs := connect(t, s.mcp)
	// beginKey returns the answer, or the error's code for a tool error
	// (which carries no structured content).
	beginKey := func(key string) (map[string]any, string) {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect",
			Arguments: map[string]any{"idempotency_key": key, "effect_type": "email.send"}})
		if err != nil {
			t.Fatal(err)
		}
		if e := mcp.ErrorOf(res); e != nil {
			return nil, string(e.Code)
		}
		return res.StructuredContent.(map[string]any), ""
	}
	ready := func() int {
		resp, err := http.Get(s.admin + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if out, code := beginKey("before"); code != "" || out["decision"] != "execute" || ready() != 200 {
		t.Fatalf("before: %v %s", out, code)
	}

	// Fill the disk until less than the floor is free.
	var st unix.Statfs_t
	unix.Statfs(mnt, &st)
	free := int64(st.Bavail) * int64(st.Bsize)
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, free-64<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, code := beginKey("during"); code != "unavailable" {
		t.Fatalf("begin on a full disk: %v %s", out, code)
	}
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz on a full disk: %d", code)
	}

	// Space comes back: service resumes, and the refused begin left nothing.
	os.Remove(filler)
	deadline := time.Now().Add(10 * time.Second)
	for ready() != 200 {
		if time.Now().After(deadline) {
			t.Fatal("/readyz stayed red after space was freed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, code := beginKey("during"); code != "" || out["decision"] != "execute" {
		t.Fatalf("after space returned: %v %s", out, code)
	}
	if out, _ := beginKey("before"); out["decision"] != "in_flight" {
		t.Fatalf("the earlier effect was lost: %v", out)
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-s.done; err != nil {
		t.Fatalf("exit: %v", err)
	}
}
