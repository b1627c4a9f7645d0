package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestDeviceWrittenCountsASyncedFile: 4 MiB written and fdatasynced to a
// file in a directory show up in its device's counter (at least that
// much; other processes may write meanwhile).
func TestDeviceWrittenCountsASyncedFile(t *testing.T) {
	dir := t.TempDir()
	before := deviceWritten(dir)
	if before < 0 {
		t.Skipf("no block device counter for %s (tmpfs?)", dir)
	}
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{1}, 4<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := deviceWritten(dir) - before; got < 4<<20 {
		t.Fatalf("device wrote %d bytes around a 4 MiB synced write, want at least %d", got, 4<<20)
	}
}
