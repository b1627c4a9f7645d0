//go:build !linux && !darwin && !windows

package badgerstore

// fdatasync writes a file's data to stable storage with fsync(2), where
// this package does not know the platform's fdatasync.
func fdatasync(name string) error { return fsyncPath(name) }

// syncDir makes the names in dir durable: an fsync of the directory.
func syncDir(dir string) error { return fsyncPath(dir) }
