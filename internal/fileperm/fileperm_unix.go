//go:build !windows

package fileperm

// modeBits: Unix permission bits say who may read a file.
const modeBits = true
