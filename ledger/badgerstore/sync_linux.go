package badgerstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync writes a file's dirty pages and what is needed to read them
// back (fdatasync(2): the data and the size, not the times).
func fdatasync(name string) error { return syncFile(name, os.O_RDONLY, datasync) }

// datasync is fdatasync on an open file.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// syncDir makes the names in dir durable: an fsync of the directory.
func syncDir(dir string) error { return fsyncPath(dir) }
