package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// runBackup is "ratchet backup --data-dir D > file": Badger's own backup
// stream of the whole ledger, taken offline (stop serve first; Badger allows
// one process per data dir). The HMAC key (and the encryption key, if any)
// are not in it: keep them with your other secrets, since a restored ledger
// needs the same HMAC key to recognise its keys and dimensions.
func runBackup(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	st, err := openOffline("backup", args, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.Backup(stdout); err != nil {
		return fmt.Errorf("writing backup: %w", err)
	}
	return nil
}

// runRestore is "ratchet restore --data-dir D < file", into a data dir
// whose ledger is empty, so a restore never merges two histories.
func runRestore(_ context.Context, args []string, stdin io.Reader, _, stderr io.Writer) error {
	st, err := openOffline("restore", args, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	empty, err := st.Empty()
	if err != nil {
		return err
	}
	if !empty {
		return errors.New("the data dir already holds a ledger; restore into an empty one")
	}
	if err := st.Restore(stdin); err != nil {
		return fmt.Errorf("restoring backup: %w", err)
	}
	return nil
}

// openOffline parses an offline command's flags and opens its Badger ledger.
func openOffline(verb string, args []string, stderr io.Writer) (*badgerstore.Store, error) {
	fs := flag.NewFlagSet(verb, flag.ContinueOnError)
	var cf commonFlags
	cf.register(fs)
	if err := parse(fs, args, stderr); err != nil {
		return nil, err
	}
	cfg, err := cf.load()
	if err != nil {
		return nil, err
	}
	if cfg.Ledger.Backend != "badger" {
		return nil, fmt.Errorf("%s covers the embedded Badger ledger; use the database's own tools (pg_dump) for PostgreSQL", verb)
	}
	return openStore(cfg, nil)
}
