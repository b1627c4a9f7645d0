package badgerstore

import "os"

// fdatasync writes a file's data to stable storage: FlushFileBuffers,
// which os.File.Sync calls on Windows and which needs a handle opened for
// writing (its documentation: "The handle must have the GENERIC_WRITE
// access right"). Badger opens its files sharing read and write, so a
// second handle is allowed; it is closed at once, before Badger may
// delete the file.
func fdatasync(name string) error { return syncFile(name, os.O_RDWR, datasync) }

// datasync is FlushFileBuffers on an open file (opened for writing).
func datasync(f *os.File) error { return f.Sync() }

// syncDir does nothing on Windows: a directory cannot be opened for the
// writing FlushFileBuffers needs, and NTFS journals a file's creation and
// rename itself (Go's own tooling and bbolt skip the directory sync there
// too).
func syncDir(string) error { return nil }
