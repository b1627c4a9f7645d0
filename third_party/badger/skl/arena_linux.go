/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Ratchet's patch (third_party/README.md): memtable arenas outside the Go heap.

package skl

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// NewArenaBuffer returns n zeroed bytes for a memtable's arena, mapped
// anonymously outside the Go heap (Ratchet's patch): the collector's heap
// goal is twice the live heap, and two arenas of about 21 MiB were most of
// the live heap of "ratchet serve" under load, so the goal counted each of
// them twice. The kernel maps a page in only when it is first written.
// Only FreeArenaBuffer gives the bytes back: the collector never does, and
// nothing may read them after it.
func NewArenaBuffer(n int64) []byte {
	buf, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		panic(fmt.Sprintf("mapping a memtable arena of %d bytes: %v", n, err))
	}
	arenaMapped.Add(n)
	return buf
}

// FreeArenaBuffer unmaps a buffer NewArenaBuffer returned.
func FreeArenaBuffer(buf []byte) {
	if buf == nil {
		return
	}
	n := int64(len(buf))
	if err := unix.Munmap(buf); err != nil {
		panic(fmt.Sprintf("unmapping a memtable arena: %v", err))
	}
	arenaMapped.Add(-n)
}
