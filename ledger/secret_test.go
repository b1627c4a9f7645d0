package ledger_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "hmac.key")
	k1, err := ledger.LoadOrCreateSecret(path)
	if err != nil {
		t.Fatalf("err != nil: create: %v", err)
	}
	if len(k1) != 32 {
		t.Fatalf("len(k1) != 32: create: %v", err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", fi.Mode().Perm())
	}
	k2, err := ledger.LoadOrCreateSecret(path)
	if err != nil {
		t.Fatal("err != nil:", "key changed on reload")
	}
	if string(k1) != string(k2) {
		t.Fatal("string(k1) != string(k2):", "key changed on reload")
	}
	os.Chmod(path, 0o644)
	if _, err := ledger.LoadOrCreateSecret(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
	os.Chmod(path, 0o660)
	if _, err := ledger.LoadOrCreateSecret(path); err == nil {
		t.Fatal("group-writable key accepted")
	}
	os.Chmod(path, 0o440) // a Secret mounted with fsGroup
	if _, err := ledger.LoadOrCreateSecret(path); err != nil {
		t.Fatalf("group-readable key refused: %v", err)
	}
}
