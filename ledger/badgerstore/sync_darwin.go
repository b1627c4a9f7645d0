package badgerstore

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync writes a file's data to stable storage (see datasync).
func fdatasync(name string) error { return syncFile(name, os.O_RDONLY, datasync) }

// datasync writes an open file's data to stable storage. On macOS fsync(2)
// and fdatasync only hand the data to the drive, whose cache may lose it in
// a power cut; F_FULLFSYNC asks the drive to flush too (fsync(2)'s man
// page, and what SQLite and bbolt do for durability on darwin). A
// filesystem without it (some network and FUSE mounts answer ENOTSUP or
// EINVAL) gets a plain fsync, as Go's own os.File.Sync falls back.
func datasync(f *os.File) error {
	_, err := unix.FcntlInt(f.Fd(), unix.F_FULLFSYNC, 0)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) {
		err = unix.Fsync(int(f.Fd()))
	}
	return err
}

// syncDir makes the names in dir durable: a full fsync of the directory
// (os.File.Sync is F_FULLFSYNC on darwin).
func syncDir(dir string) error { return fsyncPath(dir) }
