// Package suites tells "make test" which optional suites ran: go test
// drops the output of packages that pass, so a skipped PostgreSQL or netns
// suite would otherwise go unseen. A suite's code calls Ran or Skipped; each
// appends one line to the file $RATCHET_SUITES_FILE names (nothing when it
// is unset, as under a plain go test), and the Makefile's test target
// prints Summary of it at the end. The interop and console browser suites
// are Node.js, run by the Makefile, which writes their lines itself in the
// same form: "<suite>\tran" or "<suite>\tskipped\t<why>".
//
// Rules: a line is small and written with one append, so concurrent test
// binaries do not interleave; a suite that ran anywhere counts as ran.
package suites

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// The optional suites, in the order the summary lists them.
const (
	PostgreSQL = "PostgreSQL"
	Interop    = "interop"
	Console    = "console browser"
	Netns      = "netns"
)

// All are the optional suites Summary reports on.
var All = []string{PostgreSQL, Interop, Console, Netns}

// FileEnv names the file the lines go to.
const FileEnv = "RATCHET_SUITES_FILE"

// Ran notes that a suite ran.
func Ran(suite string) { note(suite + "\tran\n") }

// Skipped notes that a suite was skipped and why.
func Skipped(suite, why string) {
	note(suite + "\tskipped\t" + strings.Join(strings.Fields(why), " ") + "\n")
}

func note(line string) {
	path := os.Getenv(FileEnv)
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "suites: %v\n", err)
		return
	}
	defer f.Close()
	f.WriteString(line)
}

// Summary writes one line per optional suite: ran, or skipped and the
// first reason given, or not reached (no test got as far as deciding).
func Summary(lines io.Reader, w io.Writer) error {
	ran := map[string]bool{}
	why := map[string]string{}
	sc := bufio.NewScanner(lines)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 3)
		switch {
		case len(f) >= 2 && f[1] == "ran":
			ran[f[0]] = true
		case len(f) == 3 && f[1] == "skipped" && why[f[0]] == "":
			why[f[0]] = f[2]
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	fmt.Fprintln(w, "optional suites:")
	for _, s := range All {
		switch {
		case ran[s]:
			fmt.Fprintf(w, "  %-16s ran\n", s)
		case why[s] != "":
			fmt.Fprintf(w, "  %-16s SKIPPED: %s\n", s, why[s])
		default:
			fmt.Fprintf(w, "  %-16s not reached (no test decided to run or skip it)\n", s)
		}
	}
	return nil
}
