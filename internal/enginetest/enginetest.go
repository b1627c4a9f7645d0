// Package enginetest opens engines on temporary Badger ledgers for the
// tests of the packages around the engine (the proxy, the adapters,
// settlement), so that each does not repeat the same setup. It is used by
// tests only.
package enginetest

import (
	"context"
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
	st, err := badgerstore.Open(filepath.Join(dir, "ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(dir, "hmac.key"))
	if err != nil {
		st.Close()
		t.Fatal(err)
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
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close(context.Background()) })
	return eng
}
