// Package fileperm is the one rule for "may others read this key file":
// the permission bits of a file's mode, where the platform has them.
//
// Rules a change must keep: every check of a secret file's mode goes
// through Exposed, so that a platform without Unix permission bits
// (Windows, whose access control is by ACL and where Go reports every
// writable file as 0666) does not refuse every key file.
package fileperm

import "io/fs"

// Exposed returns the bits of mask that fi's permissions grant (for
// example mask 0o077: any access for the group or others), or 0 where the
// platform keeps no such bits (see modeBits).
func Exposed(fi fs.FileInfo, mask fs.FileMode) fs.FileMode {
	if !modeBits {
		return 0
	}
	return fi.Mode().Perm() & mask
}
