/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

// Ratchet's patch (third_party/README.md): writing a new table's file.

package table

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestWriteTableFileWritesEveryBufferInOrder: buffers of every size, empty
// ones and ones larger than a write included, arrive whole and in order.
func TestWriteTableFileWritesEveryBufferInOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		var bufs [][]byte
		var want []byte
		for range r.IntN(40) {
			b := make([]byte, []int{0, 1, 100, 16 << 10, 64 << 10, 64<<10 + 1, 300 << 10}[r.IntN(7)])
			for i := range b {
				b[i] = byte(r.Uint32())
			}
			bufs, want = append(bufs, b), append(want, b...)
		}
		name := filepath.Join(t.TempDir(), "000001.sst")
		f, err := writeTableFile(name, bufs)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: the file holds %d bytes, not the %d written in order", round, len(got), len(want))
		}
		if _, err := writeTableFile(name, bufs); err == nil {
			t.Fatalf("round %d: a table written over an existing file", round)
		}
	}
}
