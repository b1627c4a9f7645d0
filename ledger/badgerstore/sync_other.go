//go:build !linux && !darwin && !windows

package badgerstore

import "os"

// fdatasync writes a file's data to stable storage with fsync(2), where
// this package does not know the platform's fdatasync.
func fdatasync(name string) error { return fsyncPath(name) }

// datasync is fsync(2) on an open file.
func datasync(f *os.File) error { return f.Sync() }

// syncDir makes the names in dir durable: an fsync of the directory.
func syncDir(dir string) error { return fsyncPath(dir) }
