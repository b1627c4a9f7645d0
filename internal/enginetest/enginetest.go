// Package enginetest opens engines on temporary Badger ledgers for the
// tests of the packages around the engine (the proxy, the adapters,
// settlement), so that each does not repeat the same setup. It is used by
// tests only.
package enginetest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// Open starts an engine on a new Badger ledger in dir (dir/ledger, its
// HMAC key in dir/hmac.key), closed when the test ends. opts may set
// anything but Store and Secret; background loops are off unless opts
// turns them on (a zero interval means off here, not the engine's
// default).
func Open(t testing.TB, dir string, opts ledger.Options) *ledger.Engine {
	t.Helper()
	eng, err := New(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	return eng
}

// Temp is Open for an Example, which has no testing.T: an engine on a new
// ledger in a temporary directory, and a func that closes it and removes
// the directory.
func Temp(opts ledger.Options) (*ledger.Engine, func(), error) {
	dir, err := os.MkdirTemp("", "ratchet-example")
	if err != nil {
		return nil, nil, err
	}
	eng, err := New(dir, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return eng, func() { eng.Close(context.Background()); os.RemoveAll(dir) }, nil
}

// New opens the engine Open does, without a testing.T: the caller closes
// it, which closes its store.
func New(dir string, opts ledger.Options) (*ledger.Engine, error) {
	st, err := badgerstore.Open(filepath.Join(dir, "ledger"), nil)
	if err != nil {
		return nil, err
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(dir, "hmac.key"))
	if err != nil {
		st.Close()
		return nil, err
	}
	opts.Store, opts.Secret = st, secret
	if opts.ReapInterval == 0 {
		opts.ReapInterval = -1
	}
	if opts.PurgeInterval == 0 {
		opts.PurgeInterval = -1
	}
	eng, err := ledger.New(opts)
	if err != nil {
		st.Close()
		return nil, err
	}
	return eng, nil
}
