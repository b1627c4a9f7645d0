//go:build !linux

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Ratchet's patch (third_party/README.md): writing a new table's file.

package table

import "os"

// writeBuffers writes bufs to f in order.
func writeBuffers(f *os.File, bufs [][]byte) error {
	for _, b := range bufs {
		if _, err := f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// datasyncFile syncs f's data and size.
func datasyncFile(f *os.File) error { return f.Sync() }
