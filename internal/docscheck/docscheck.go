// Package docscheck reads the reader-facing docs (README.md and docs/*.md)
// for what they say exists: the `ratchet` command lines they show, the
// config keys and YAML config snippets, and their internal links. Its own
// tests check the links, anchors and config keys against the files and the
// config schema (internal/config); cmd/ratchet's docs test runs each
// command line's subcommands and flags against the real command tree. Both
// run in `make test`, so a doc that names something that is not there, or
// no longer there, fails the build.
//
// Rules a change must keep: it only reads Markdown, never runs anything;
// what it extracts is what a reader would type or follow (code blocks and
// code spans, links outside code), so that a check never passes over text
// a reader sees.
package docscheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"
)

// Doc is one Markdown file.
type Doc struct {
	// Path is the file's path relative to the repository root, with
	// forward slashes ("docs/proxy.md").
	Path  string
	Lines []string
}

// Pos is where something was found: a file and a 1-based line.
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string { return fmt.Sprintf("%s:%d", p.File, p.Line) }

// Command is one `ratchet …` invocation a doc shows: the words after
// "ratchet", up to the end of the command (a pipe, a redirection, a
// comment, the end of the code span).
type Command struct {
	Pos
	Args []string
}

func (c Command) String() string { return "ratchet " + strings.Join(c.Args, " ") }

// Link is a Markdown link or image target outside code.
type Link struct {
	Pos
	Target string
}

// Snippet is the text of one fenced code block.
type Snippet struct {
	Pos  // the line of the opening fence
	Lang string
	Text string
}

// Ref is a dotted config key named in a code span, e.g. `proxy.upstreams`.
type Ref struct {
	Pos
	Key string
}

// Root returns the repository root: the nearest directory at or above the
// working directory that holds go.mod.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("docscheck: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

// Load reads README.md and every docs/*.md under root, in a stable order.
func Load(root string) ([]*Doc, error) {
	paths := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	sort.Strings(more)
	for _, m := range more {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			return nil, err
		}
		paths = append(paths, filepath.ToSlash(rel))
	}
	docs := make([]*Doc, 0, len(paths))
	for _, p := range paths {
		d, err := LoadFile(root, p)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// LoadFile reads one Markdown file, rel being its path under root.
func LoadFile(root, rel string) (*Doc, error) {
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		return nil, fmt.Errorf("docscheck: %w", err)
	}
	return Parse(rel, string(b)), nil
}

// Parse makes a Doc of Markdown text.
func Parse(path, text string) *Doc {
	return &Doc{Path: path, Lines: strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")}
}

var fenceRe = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

// walk calls prose for each line outside fenced code blocks and code for
// each block.
func (d *Doc) walk(prose func(n int, line string), code func(s Snippet)) {
	var cur *Snippet
	var fence string
	var body []string
	for i, line := range d.Lines {
		n := i + 1
		m := fenceRe.FindStringSubmatch(line)
		switch {
		case cur == nil && m != nil:
			cur, fence, body = &Snippet{Pos: Pos{d.Path, n}, Lang: strings.ToLower(m[2])}, m[1], nil
		case cur != nil && m != nil && strings.HasPrefix(strings.TrimSpace(line), fence) && m[2] == "":
			cur.Text = strings.Join(body, "\n")
			if code != nil {
				code(*cur)
			}
			cur = nil
		case cur != nil:
			body = append(body, line)
		default:
			if prose != nil {
				prose(n, line)
			}
		}
	}
}

var (
	blockStartRe = regexp.MustCompile(`^\s*([-*+] |\d+\. |\||#|>)`)
	oneLineRe    = regexp.MustCompile(`^\s*(\||#)`)
)

// paragraphs calls fn for each paragraph of prose (a list item, a table
// row and a heading are each one), with the line it starts on and its
// text, lines joined by spaces: a code span or a link may wrap. at turns
// an offset in text back into a line.
func (d *Doc) paragraphs(fn func(text string, at func(off int) int)) {
	var start int
	var lines []string
	flush := func() {
		if len(lines) == 0 {
			return
		}
		joined := strings.Join(lines, "\n")
		first := start
		fn(strings.ReplaceAll(joined, "\n", " "), func(off int) int { return first + strings.Count(joined[:off], "\n") })
		lines = nil
	}
	last := -1
	d.walk(func(n int, line string) {
		if strings.TrimSpace(line) == "" || n != last+1 || blockStartRe.MatchString(line) {
			flush()
		}
		if strings.TrimSpace(line) != "" {
			if len(lines) == 0 {
				start = n
			}
			lines = append(lines, line)
		}
		if oneLineRe.MatchString(line) {
			flush() // a heading or table row is a paragraph of its own
		}
		last = n
	}, nil)
	flush()
}

// Snippets returns the fenced code blocks.
func (d *Doc) Snippets() []Snippet {
	var out []Snippet
	d.walk(nil, func(s Snippet) { out = append(out, s) })
	return out
}

var codeSpanRe = regexp.MustCompile("(`+)(.+?)(`+)")

// codeSpans returns the code spans of prose text, each with its offset.
func codeSpans(text string) (spans []string, offs []int) {
	for _, m := range codeSpanRe.FindAllStringSubmatchIndex(text, -1) {
		if m[3]-m[2] == m[7]-m[6] {
			spans = append(spans, strings.TrimSpace(text[m[4]:m[5]]))
			offs = append(offs, m[0])
		}
	}
	return spans, offs
}

// Commands returns every `ratchet …` invocation: in shell code blocks (sh,
// bash, console, or no language: program output belongs in a text block),
// in code spans of prose, and in MCP client configurations (JSON blocks
// whose server's "command" is "ratchet").
func (d *Doc) Commands() []Command {
	var out []Command
	d.paragraphs(func(text string, at func(int) int) {
		spans, offs := codeSpans(text)
		for i, span := range spans {
			out = append(out, commandsIn(Pos{d.Path, at(offs[i])}, span)...)
		}
	})
	d.walk(nil, func(s Snippet) {
		switch s.Lang {
		case "json", "jsonc":
			out = append(out, jsonCommands(s)...)
		case "sh", "bash", "shell", "console", "zsh", "":
			for i, line := range strings.Split(s.Text, "\n") {
				out = append(out, commandsIn(Pos{d.Path, s.Line + 1 + i}, stripComment(line))...)
			}
		}
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// stripComment drops a shell comment: from an unquoted # that starts a word.
func stripComment(line string) string {
	var q rune
	for i, r := range line {
		switch {
		case q != 0:
			if r == q {
				q = 0
			}
		case r == '\'' || r == '"':
			q = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i]
		}
	}
	return line
}

// words splits shell text into words, keeping quoted text together and
// dropping the quotes.
func words(s string) []string {
	var out []string
	var b strings.Builder
	in, q := false, rune(0)
	for _, r := range s {
		switch {
		case q != 0:
			if r == q {
				q = 0
			} else {
				b.WriteRune(r)
			}
		case r == '\'' || r == '"':
			q, in = r, true
		case unicode.IsSpace(r):
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		case r == ';' || r == '|' || r == '&':
			// an operator is a word of its own ("a;b", "x|y", "&&")
			prev := b.String()
			if in && prev != "" && !strings.ContainsAny(prev[len(prev)-1:], ";|&") && !strings.HasSuffix(prev, ">") {
				out = append(out, prev)
				b.Reset()
			}
			b.WriteRune(r)
			in = true
		default:
			if prev := b.String(); prev != "" && strings.Trim(prev, ";|&") == "" {
				out = append(out, prev) // the operator before this word
				b.Reset()
			}
			b.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// ends reports whether a shell word ends a command.
func ends(w string) bool {
	switch w {
	case "|", "||", "&&", ";", "&", ")":
		return true
	}
	return strings.HasPrefix(w, ">") || strings.HasPrefix(w, "<") || strings.HasPrefix(w, "2>")
}

// commandsIn finds the ratchet invocations in one line of shell.
func commandsIn(pos Pos, line string) []Command {
	ws := words(line)
	var out []Command
	start := true // at a command's first word
	for i := 0; i < len(ws); i++ {
		w := strings.TrimPrefix(ws[i], "$(")
		switch {
		case ends(ws[i]):
			start = true
			continue
		case w != ws[i]:
			start = true
		case start && envAssignRe.MatchString(w):
			continue
		}
		if !start || w != "ratchet" {
			start = false
			continue
		}
		var args []string
		for i++; i < len(ws) && !ends(ws[i]); i++ {
			args = append(args, strings.TrimSuffix(ws[i], ")"))
			if strings.HasSuffix(ws[i], ")") {
				break
			}
		}
		if len(args) > 0 { // the word alone names the program
			out = append(out, Command{Pos: pos, Args: args})
		}
		start = false
	}
	return out
}

// envAssignRe is a variable assignment before a command (X=y cmd).
var envAssignRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// jsonCommands reads the MCP client configurations of a JSON block.
func jsonCommands(s Snippet) []Command {
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if json.Unmarshal([]byte(s.Text), &cfg) != nil {
		return nil
	}
	var out []Command
	for _, name := range sortedKeys(cfg.MCPServers) {
		srv := cfg.MCPServers[name]
		if srv.Command == "ratchet" {
			out = append(out, Command{Pos: s.Pos, Args: srv.Args})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Flags returns the names of the flags a command line shows ("--state S"
// and "[--all]" give "state" and "all"; "-o json" gives "o").
func (c Command) Flags() []string {
	var out []string
	for _, a := range c.Args {
		a = strings.Trim(a, "[]")
		if len(a) < 2 || a[0] != '-' || a == "--" {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if name != "" && (unicode.IsLetter(rune(name[0]))) {
			out = append(out, name)
		}
	}
	return out
}

var verbRe = regexp.MustCompile(`^[a-z][a-z-]*(/[a-z][a-z-]*)*$`)

// Verbs returns the subcommand words after the command, when the second
// word is one ("audit export/verify" gives export and verify; "effects show
// ID" gives show; "serve --config F" gives none).
func (c Command) Verbs() []string {
	if len(c.Args) < 2 || !verbRe.MatchString(c.Args[1]) {
		return nil
	}
	return strings.Split(c.Args[1], "/")
}

var linkRe = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// Links returns the link and image targets outside code.
func (d *Doc) Links() []Link {
	var out []Link
	d.paragraphs(func(text string, at func(int) int) {
		text = codeSpanRe.ReplaceAllStringFunc(text, func(c string) string { return strings.Repeat(" ", len(c)) })
		for _, m := range linkRe.FindAllStringSubmatchIndex(text, -1) {
			out = append(out, Link{Pos: Pos{d.Path, at(m[0])}, Target: text[m[2]:m[3]]})
		}
	})
	return out
}

// External reports whether a link target leaves the repository.
func External(target string) bool {
	u := strings.ToLower(target)
	return strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "mailto:")
}

var headingRe = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// Anchors returns the anchors of the file's headings, as GitHub makes
// them: lowercase, punctuation dropped, spaces as hyphens, and -1, -2 …
// after a repeated one.
func (d *Doc) Anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	d.walk(func(_ int, line string) {
		m := headingRe.FindStringSubmatch(line)
		if m == nil {
			return
		}
		a := Slug(m[2])
		if k := seen[a]; k > 0 {
			out[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}, nil)
	return out
}

// Slug is GitHub's anchor for a heading's text.
func Slug(heading string) string {
	heading = codeSpanRe.ReplaceAllString(heading, "$2")
	heading = linkRe.ReplaceAllStringFunc(heading, func(s string) string { return s[strings.Index(s, "[")+1 : strings.Index(s, "]")] })
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

var dottedRe = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*(\[\])?)+:?$`)

// ConfigRefs returns the code spans of prose that look like dotted config
// keys whose first part is one of roots ("proxy.upstreams",
// "auth.agents[].namespace").
func (d *Doc) ConfigRefs(roots map[string]bool) []Ref {
	var out []Ref
	d.paragraphs(func(text string, at func(int) int) {
		spans, offs := codeSpans(text)
		for i, span := range spans {
			n := at(offs[i])
			span = strings.ReplaceAll(span, "[]", "")
			if !dottedRe.MatchString(span) {
				continue
			}
			span = strings.TrimSuffix(span, ":")
			if first, _, _ := strings.Cut(span, "."); roots[first] {
				out = append(out, Ref{Pos: Pos{d.Path, n}, Key: span})
			}
		}
	})
	return out
}

// CheckLinks returns a problem for each internal link of docs that does
// not resolve: a relative file that does not exist (relative to root, the
// repository), or an #anchor that no heading of its Markdown file makes.
func CheckLinks(root string, docs []*Doc) []string {
	var probs []string
	anchors := map[string]map[string]bool{}
	for _, d := range docs {
		anchors[d.Path] = d.Anchors()
	}
	for _, d := range docs {
		for _, l := range d.Links() {
			if External(l.Target) {
				continue
			}
			file, anchor, _ := strings.Cut(l.Target, "#")
			target := d.Path
			if file != "" {
				target = filepath.ToSlash(filepath.Join(filepath.Dir(d.Path), file))
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
					probs = append(probs, fmt.Sprintf("%s: link %q: %s does not exist", l.Pos, l.Target, target))
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			as, ok := anchors[target]
			if !ok {
				td, err := LoadFile(root, target)
				if err != nil {
					probs = append(probs, fmt.Sprintf("%s: link %q: %v", l.Pos, l.Target, err))
					continue
				}
				as = td.Anchors()
				anchors[target] = as
			}
			if !as[anchor] {
				probs = append(probs, fmt.Sprintf("%s: link %q: %s has no heading with the anchor #%s", l.Pos, l.Target, target, anchor))
			}
		}
	}
	return probs
}

// notConfigKeys are dotted names in code spans that begin like a config
// key but name something else, each with what it is.
var notConfigKeys = map[string]string{
	"audit.chain_started": "an audit event type",
	"mcp.method.name":     "an OpenTelemetry span attribute",
}

var kubernetesRe = regexp.MustCompile(`(?m)^apiVersion:`)

// CheckConfig returns a problem for each config key a doc names in a code
// span that the config file does not have, and for each YAML block that
// does not decode into the config schema. A YAML block with apiVersion is
// a Kubernetes object, not a config file, and is skipped.
func CheckConfig(docs []*Doc) []string {
	var probs []string
	roots := ConfigRoots()
	for _, d := range docs {
		for _, r := range d.ConfigRefs(roots) {
			if _, ok := notConfigKeys[r.Key]; ok {
				continue
			}
			if err := CheckKey(r.Key); err != nil {
				probs = append(probs, fmt.Sprintf("%s: `%s`: %v", r.Pos, r.Key, err))
			}
		}
		for _, s := range d.Snippets() {
			if (s.Lang != "yaml" && s.Lang != "yml") || kubernetesRe.MatchString(s.Text) {
				continue
			}
			if err := CheckConfigSnippet(s.Text); err != nil {
				probs = append(probs, fmt.Sprintf("%s: the YAML block is not a config file: %v", s.Pos, err))
			}
		}
	}
	return probs
}
