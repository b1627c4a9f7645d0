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

// writeBuffers writes bufs to f in order with writev(2), at most
// tableWriteMax bytes a call, carrying on after a short write.
func writeBuffers(f *os.File, bufs [][]byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	chunk := make([][]byte, 0, 16)
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return nil
		}
		chunk, n := chunk[:0], 0
		for _, b := range bufs {
			if n == tableWriteMax || len(chunk) == cap(chunk) {
				break
			}
			b = b[:min(len(b), tableWriteMax-n)]
			chunk, n = append(chunk, b), n+len(b)
		}
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
		for n > 0 {
			k := min(n, len(bufs[0]))
			bufs[0], n = bufs[0][k:], n-k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
}

// tableWriteMax bounds each write of a table. The page cache keeps what
// one write(2) brings in as folios up to its size (ext4 on Linux 6.18
// here), and a read fault on a mapped file maps the whole folio: a table
// written in one 2 MiB writev was all resident after one read, where one
// read maps 64 KiB (the fault-around) of a table written in 64 KiB writes
// or through a mapping; under the million-effect MCP load, the tables'
// mapped pages went from 22 to 59 MiB.
const tableWriteMax = 64 << 10

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
