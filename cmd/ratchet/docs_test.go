package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratchet-mcp/ratchet/internal/docscheck"
)

// TestEveryCommandTheDocsShowExists runs the real command tree for each
// `ratchet …` line README.md and docs/*.md show (shell blocks, code spans,
// MCP client configurations): its command must exist, its subcommand
// (`effects resolve`, `audit export/verify`) must be one the command takes,
// and each --flag must be in that subcommand's flag set. Only --help runs
// (and, for a subcommand without flags, the subcommand with no input and an
// admin URL nothing listens on), so nothing is served, written or sent.
func TestEveryCommandTheDocsShowExists(t *testing.T) {
	t.Setenv("RATCHET_ADMIN_URL", "http://127.0.0.1:1")
	t.Setenv("RATCHET_ADMIN_TOKEN", "")
	t.Setenv("RATCHET_CONFIG", "")
	root, err := docscheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := docscheck.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	tree := &commandTree{known: map[string]bool{}, flags: map[string]map[string]bool{}, verbs: map[string]bool{}}
	for _, c := range commands() {
		tree.known[c.name] = true
	}
	n := 0
	for _, d := range docs {
		for _, c := range d.Commands() {
			n++
			for _, p := range tree.check(c) {
				t.Errorf("%s: `%s`: %s", c.Pos, c, p)
			}
		}
	}
	if n == 0 {
		t.Fatal("found no ratchet command lines in the docs: the extractor is broken")
	}
}

// TestTheDocsCheckRefusesWhatIsNotThere: the check fails on a command, a
// subcommand and a flag that do not exist.
func TestTheDocsCheckRefusesWhatIsNotThere(t *testing.T) {
	t.Setenv("RATCHET_ADMIN_URL", "http://127.0.0.1:1")
	tree := &commandTree{known: map[string]bool{}, flags: map[string]map[string]bool{}, verbs: map[string]bool{}}
	for _, c := range commands() {
		tree.known[c.name] = true
	}
	for line, want := range map[string]string{
		"effects list --state indeterminate -o json":     "",
		"audit export/verify":                            "",
		"token hash":                                     "",
		"config validate FILE":                           "",
		"mcp --stdio --server http://127.0.0.1:8787/mcp": "",
		"--help":               "",
		"effect list":          `no command "effect"`,
		"effects delete eff_1": `"effects" has no subcommand "delete"`,
		"effects resolve eff_1 --outcome succeeded": `"effects resolve" has no flag --outcome`,
		"audit export/replay":                       `"audit" has no subcommand "replay"`,
		"serve --data-dir D --port 1":               `"serve" has no flag --port`,
		"token hash --raw":                          `"token hash" takes no flags, not --raw`,
	} {
		c := docscheck.Command{Args: strings.Fields(line)}
		got := strings.Join(tree.check(c), "; ")
		if got != want {
			t.Errorf("check(`ratchet %s`) = %q; want %q", line, got, want)
		}
	}
}

// commandTree answers questions about the real command tree by running
// it, and remembers the answers.
type commandTree struct {
	known map[string]bool            // top-level commands
	flags map[string]map[string]bool // "effects resolve" → its flags; nil: no flag set
	verbs map[string]bool            // "effects resolve" → whether it is a subcommand
}

// notAVerb is a subcommand no command has, to compare against.
const notAVerb = "zz-not-a-subcommand"

// probe runs ratchet with args, no input, and returns all it printed.
func probe(args ...string) string {
	var out bytes.Buffer
	run(context.Background(), args, strings.NewReader(""), &out, &out)
	return out.String()
}

// isVerb reports whether cmd takes verb: whether it answers otherwise than
// it answers a word it does not know, with --help or, when both answer
// --help alike (a subcommand without flags), with no arguments.
func (tr *commandTree) isVerb(cmd, verb string) bool {
	k := cmd + " " + verb
	if v, ok := tr.verbs[k]; ok {
		return v
	}
	differs := func(args ...string) bool {
		a := probe(append([]string{cmd, verb}, args...)...)
		b := strings.ReplaceAll(probe(append([]string{cmd, notAVerb}, args...)...), notAVerb, verb)
		return a != b
	}
	v := differs("--help") || differs()
	tr.verbs[k] = v
	return v
}

var flagLineRe = regexp.MustCompile(`(?m)^  -([A-Za-z0-9][A-Za-z0-9_-]*)`)

// flagSet returns the flags that path (a command, or a command and its
// subcommand) defines, from its --help, or nil when it has no flag set.
func (tr *commandTree) flagSet(path []string) map[string]bool {
	k := strings.Join(path, " ")
	if fs, ok := tr.flags[k]; ok {
		return fs
	}
	out := probe(append(path, "--help")...)
	var fs map[string]bool
	if strings.Contains(out, "Usage of "+k+":") {
		fs = map[string]bool{"h": true, "help": true}
		for _, m := range flagLineRe.FindAllStringSubmatch(out, -1) {
			fs[m[1]] = true
		}
	}
	tr.flags[k] = fs
	return fs
}

// check returns what is wrong with one documented command line.
func (tr *commandTree) check(c docscheck.Command) []string {
	if len(c.Args) == 0 {
		return []string{"no command"}
	}
	cmd := c.Args[0]
	if strings.HasPrefix(cmd, "-") || cmd == "help" {
		var out bytes.Buffer
		if code := run(context.Background(), []string{cmd}, strings.NewReader(""), &out, &out); code != 0 {
			return []string{"ratchet " + cmd + " exits " + strconv.Itoa(code)}
		}
		return nil
	}
	if !tr.known[cmd] {
		return []string{`no command "` + cmd + `"`}
	}
	var probs []string
	paths := [][]string{{cmd}}
	if verbs := c.Verbs(); verbs != nil {
		paths = nil
		for _, v := range verbs {
			if !tr.isVerb(cmd, v) {
				probs = append(probs, `"`+cmd+`" has no subcommand "`+v+`"`)
				continue
			}
			paths = append(paths, []string{cmd, v})
		}
	}
	for _, path := range paths {
		fs := tr.flagSet(path)
		for _, f := range c.Flags() {
			switch {
			case fs == nil:
				probs = append(probs, `"`+strings.Join(path, " ")+`" takes no flags, not --`+f)
			case !fs[f]:
				probs = append(probs, `"`+strings.Join(path, " ")+`" has no flag --`+f)
			}
		}
	}
	return probs
}
