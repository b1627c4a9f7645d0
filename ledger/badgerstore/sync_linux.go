package badgerstore

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync writes a file's dirty pages and what is needed to read them
// back (fdatasync(2): the data and the size, not the times).
func fdatasync(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("syncing %s: %w", name, err)
	}
	return nil
}

// syncDir makes the names in dir durable: an fsync of the directory.
func syncDir(dir string) error { return fsyncPath(dir) }
