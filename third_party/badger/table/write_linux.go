/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Ratchet's patch (third_party/README.md): writing a new table's file.

package table

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// writeBuffers writes bufs to f in order with writev(2), at most IOV_MAX
// (1024) slices a call, carrying on after a short write.
func writeBuffers(f *os.File, bufs [][]byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), 1024)]
		var n int
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			n, werr = unix.Writev(int(fd), chunk)
			return true
		}); err != nil {
			return err
		}
		if errors.Is(werr, unix.EINTR) {
			continue
		}
		if werr != nil {
			return werr
		}
		if n == 0 {
			return errors.New("writev wrote nothing")
		}
		for n > 0 && len(bufs) > 0 {
			if k := min(n, len(bufs[0])); k < len(bufs[0]) {
				bufs[0] = bufs[0][k:]
				n = 0
			} else {
				n -= k
				bufs = bufs[1:]
			}
		}
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
	}
	return nil
}

// datasyncFile is fdatasync(2): the data and the size that reading it needs.
func datasyncFile(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); !errors.Is(serr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}
