//go:build !linux

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Ratchet's patch (third_party/README.md): memtable arenas outside the Go
// heap on Linux; elsewhere they stay in it, as in v4.9.6.

package skl

// NewArenaBuffer returns n zeroed bytes for a memtable's arena: on this
// system a Go slice, as in v4.9.6 (on Linux an anonymous mapping).
func NewArenaBuffer(n int64) []byte {
	arenaMapped.Add(n)
	return make([]byte, n)
}

// FreeArenaBuffer gives up a buffer NewArenaBuffer returned; the collector
// frees it.
func FreeArenaBuffer(buf []byte) {
	arenaMapped.Add(-int64(len(buf)))
}
