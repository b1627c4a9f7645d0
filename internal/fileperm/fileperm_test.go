package fileperm

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestExposedReportsTheBitsOthersHave: a 0640 key file exposes 0040 to a
// 0o027 check and 0o040 to a 0o077 one; a 0600 file exposes nothing.
func TestExposedReportsTheBitsOthersHave(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no permission bits on Windows")
	}
	dir := t.TempDir()
	for _, c := range []struct {
		mode, mask, want os.FileMode
	}{{0o600, 0o077, 0}, {0o640, 0o077, 0o040}, {0o640, 0o027, 0}, {0o644, 0o027, 0o004}, {0o660, 0o027, 0o020}} {
		p := filepath.Join(dir, c.mode.String())
		if err := os.WriteFile(p, []byte("k"), c.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, c.mode); err != nil { // past the umask
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := Exposed(fi, c.mask); got != c.want {
			t.Errorf("Exposed(%04o, %04o) = %04o, want %04o", c.mode, c.mask, got, c.want)
		}
	}
}
