package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ratchet-mcp/ratchet/internal/fileperm"
)

// LoadOrCreateSecret reads the HMAC key from path, creating it (32 random
// bytes, hex, mode 0600, in a directory created 0700) if it does not exist.
// The file holds hex text so operators can move it into a Kubernetes Secret.
// A key file that others can read, or that its group can write, is refused:
// whoever reads it can test guesses of payloads and dimension values against
// the ledger. Group read is allowed because Kubernetes mounts Secrets that
// way when a pod sets fsGroup.
func LoadOrCreateSecret(path string) ([]byte, error) {
	key, err := ReadKeyFile(path)
	if err == nil {
		if len(key) < 32 {
			return nil, fmt.Errorf("HMAC key in %s is %d bytes; at least 32 are required", path, len(key))
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating directory for HMAC key: %w", err)
	}
	key = make([]byte, 32)
	_, _ = rand.Read(key)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) { // another process won the race
			return LoadOrCreateSecret(path)
		}
		return nil, fmt.Errorf("creating HMAC key %s: %w", path, err)
	}
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing HMAC key %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing HMAC key %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("writing HMAC key %s: %w", path, err)
	}
	return key, nil
}

// ReadKeyFile reads a key file holding hex text (surrounding whitespace
// ignored) and refuses one that others can read or its group can write.
func ReadKeyFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading key file: %w", err)
	}
	if fileperm.Exposed(fi, 0o027) != 0 {
		return nil, fmt.Errorf("key file %s has mode %04o; others must not read it nor its group write it (chmod 600)", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading key file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("key file %s must hold hex text: %w", path, err)
	}
	return key, nil
}
