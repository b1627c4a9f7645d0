package suites_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/suites"
)

// What the suites note reaches the summary: ran wins over a skip (another
// package ran it), a skip says why, a suite nothing noted says so.
func TestSummaryOfWhatTheSuitesNoted(t *testing.T) {
	file := filepath.Join(t.TempDir(), "suites")
	t.Setenv(suites.FileEnv, file)
	suites.Skipped(suites.PostgreSQL, "no server answers:\n dial tcp 127.0.0.1:5432: connection refused")
	suites.Ran(suites.PostgreSQL)
	suites.Skipped(suites.Netns, "not running as root")
	suites.Skipped(suites.Netns, "no iptables")
	suites.Ran(suites.Interop)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	if err := suites.Summary(f, &out); err != nil {
		t.Fatal(err)
	}
	want := "optional suites:\n" +
		"  PostgreSQL       ran\n" +
		"  interop          ran\n" +
		"  console browser  not reached (no test decided to run or skip it)\n" +
		"  netns            SKIPPED: not running as root\n"
	if out.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out.String(), want)
	}
}

// Without the variable (a plain go test) nothing is written anywhere.
func TestNothingNotedWithoutTheFile(t *testing.T) {
	t.Setenv(suites.FileEnv, "")
	dir := t.TempDir()
	t.Chdir(dir)
	suites.Ran(suites.PostgreSQL)
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}
