// Package recovery settles proxied effects whose outcome is unknown by
// sending the very same request again, with the very same vendor key,
// while the vendor still remembers the key: a vendor that enforces keys
// then either replays the first answer (it did act) or acts exactly once
// (it never saw the first request), and either way says how it went. The
// answer settles the effect through ledger.Engine.Settle, as a webhook
// would, with the source "recovery:<vendor>".
//
// To send the same request again Ratchet must keep it, credentials and
// all, until the effect settles. That is the one exception to "only
// hashes are stored", so it is opt-in per vendor (recovery.vendors), and
// the request is kept outside the ledger, in files of its own under the
// data dir (<data_dir>/recovery), sealed with AES-256-GCM under a key
// from a file (recovery.key_file), each file bound to its name. A file is
// deleted as soon as the vendor answers definitely (the proxy reports
// that answer), the effect settles in any way (webhook, late report,
// operator, recovery), its attempt moves on, or the vendor's key window
// closes; nothing else ever reads it.
//
// Recovery is automatic: a background loop (Recoverer) tries each
// indeterminate effect with a kept request, after a delay that lets the
// first request finish at the vendor, with exponential backoff, until the
// window closes; then the effect is left to an operator as before. It is
// automatic rather than an operator command because the resend is safe
// only under conditions a program checks better than a person does (the
// effect still indeterminate and on the same attempt, the key still
// inside the vendor's window, the vendor one that enforces keys), and
// because the point is that no human is needed.
package recovery

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/fileperm"
)

// Request is a gated request as it went to the vendor.
type Request struct {
	Vendor    string      `json:"vendor"`
	EffectID  string      `json:"effect_id"`
	Attempt   int         `json:"attempt"`
	VendorKey string      `json:"vendor_key"`
	Method    string      `json:"method"`
	URL       string      `json:"url"`
	Header    http.Header `json:"header"`
	Body      []byte      `json:"body"`
	SentAt    time.Time   `json:"sent_at"`
}

// name is the file a request is kept in: a hash of its effect and
// attempt, so the name says nothing about either.
func name(effectID string, attempt int) string {
	sum := sha256.Sum256([]byte(effectID + "\x00" + strconv.Itoa(attempt)))
	return hex.EncodeToString(sum[:16]) + ".req"
}

// Store keeps requests sealed in files of a directory.
type Store struct {
	dir  string
	aead cipher.AEAD
}

// OpenStore opens (creating) the directory dir with the 32-byte key.
func OpenStore(dir string, key []byte) (*Store, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("recovery key: %d bytes, want 32 (AES-256)", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recovery store: %w", err)
	}
	// Created earlier with a looser mode (or by hand): the sealed files'
	// names and times are nobody else's business either.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("recovery store: %w", err)
	}
	return &Store{dir: dir, aead: aead}, nil
}

// LoadOrCreateKey reads a 32-byte key (raw, or 64 hex digits) from path,
// creating one (mode 0600) if the file does not exist. A key file that
// its group or others may read is refused: it opens every kept request,
// credentials included (on Kubernetes, mount the secret with defaultMode
// 0400).
func LoadOrCreateKey(path string) ([]byte, error) {
	return LoadOrCreateKeyFor(path, "")
}

// LoadOrCreateKeyFor is LoadOrCreateKey for the store in dir: a missing
// key file while dir holds kept requests is an error, not a new key (which
// would open none of them: they would never be sent, and the effects they
// could settle would wait for an operator without anyone knowing why).
func LoadOrCreateKeyFor(path, dir string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		if dir != "" {
			if kept, _ := filepath.Glob(filepath.Join(dir, "*.req")); len(kept) > 0 {
				return nil, fmt.Errorf("the recovery key %s is missing, but %s holds %d kept request(s) sealed under it: "+
					"restore the key file, or delete those files (their effects are then left to an operator)", path, dir, len(kept))
			}
		}
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("creating the recovery key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the recovery key: %w", err)
	}
	if fi, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("reading the recovery key: %w", err)
	} else if perm := fi.Mode().Perm(); fileperm.Exposed(fi, 0o077) != 0 {
		return nil, fmt.Errorf("the recovery key %s may be read by others (mode %04o): chmod 600 it (on Kubernetes, mount the secret with defaultMode 0400)", path, perm)
	}
	if k, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil && len(k) == 32 {
		return k, nil
	}
	if len(b) == 32 {
		return b, nil
	}
	return nil, fmt.Errorf("recovery key %s: want 32 bytes or 64 hex digits", path)
}

// Put keeps r durably (written, synced, renamed into place) before it is
// sent: a crash after the send must find it.
func (s *Store) Put(r *Request) error {
	plain, err := json.Marshal(r)
	if err != nil {
		return err
	}
	n := name(r.EffectID, r.Attempt)
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(n))
	tmp, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(sealed); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, n)); err != nil {
		return err
	}
	if d, err := os.Open(s.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Delete forgets the request of an effect's attempt, if kept.
func (s *Store) Delete(effectID string, attempt int) error {
	err := os.Remove(filepath.Join(s.dir, name(effectID, attempt)))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// List returns every kept request. A file that does not open under the
// key (another key, or damaged) is returned in bad and never sent.
func (s *Store) List() (reqs []*Request, bad []string, err error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, nil, err
	}
	for _, en := range ents {
		n := en.Name()
		if !strings.HasSuffix(n, ".req") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, n))
		if err != nil {
			continue // deleted meanwhile
		}
		r, ok := s.open(n, b)
		if !ok {
			bad = append(bad, n)
			continue
		}
		reqs = append(reqs, r)
	}
	return reqs, bad, nil
}

// DeleteUnreadable deletes the kept file name (one List returned as bad)
// if it was written before cutoff; true when it did.
func (s *Store) DeleteUnreadable(name string, cutoff time.Time) (bool, error) {
	if name != filepath.Base(name) || !strings.HasSuffix(name, ".req") {
		return false, fmt.Errorf("not a kept request: %q", name)
	}
	p := filepath.Join(s.dir, name)
	fi, err := os.Stat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil || !fi.ModTime().Before(cutoff) {
		return false, err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}

func (s *Store) open(n string, b []byte) (*Request, bool) {
	ns := s.aead.NonceSize()
	if len(b) < ns {
		return nil, false
	}
	plain, err := s.aead.Open(nil, b[:ns], b[ns:], []byte(n))
	if err != nil {
		return nil, false
	}
	var r Request
	if json.Unmarshal(plain, &r) != nil || name(r.EffectID, r.Attempt) != n {
		return nil, false
	}
	return &r, true
}
