// Command summary prints the optional suites' summary of "make test" from
// the file the suites wrote (see package suites); a missing file means
// nothing noted anything.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/ratchet-mcp/ratchet/internal/suites"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: summary FILE")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if errors.Is(err, fs.ErrNotExist) {
		err = suites.Summary(strings.NewReader(""), os.Stdout)
	} else if err == nil {
		defer f.Close()
		err = suites.Summary(f, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(1)
	}
}
