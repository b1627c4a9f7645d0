package badgerstore

import "golang.org/x/sys/unix"

// diskSpace reports the bytes an unprivileged writer may still use on the
// filesystem holding dir, and whether it is mounted read-only.
func diskSpace(dir string) (free int64, readOnly bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Bavail) * int64(st.Bsize), st.Flags&unix.ST_RDONLY != 0, nil
}
