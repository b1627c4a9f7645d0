package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func loadDocs(t *testing.T) (string, []*Doc) {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 2 {
		t.Fatalf("found %d docs under %s; want README.md and docs/*.md", len(docs), root)
	}
	return root, docs
}

// TestEveryInternalLinkResolves: every relative link and #anchor in
// README.md and docs/*.md reaches a file and a heading.
func TestEveryInternalLinkResolves(t *testing.T) {
	root, docs := loadDocs(t)
	n := 0
	for _, d := range docs {
		n += len(d.Links())
	}
	if n == 0 {
		t.Fatal("found no links in the docs: the extractor is broken")
	}
	for _, p := range CheckLinks(root, docs) {
		t.Error(p)
	}
}

// TestEveryConfigKeyTheDocsShowExists: every dotted config key in a code
// span, and every YAML config block, is in the config file's schema.
func TestEveryConfigKeyTheDocsShowExists(t *testing.T) {
	_, docs := loadDocs(t)
	n := 0
	for _, d := range docs {
		n += len(d.ConfigRefs(ConfigRoots()))
	}
	if n == 0 {
		t.Fatal("found no config keys in the docs: the extractor is broken")
	}
	for _, p := range CheckConfig(docs) {
		t.Error(p)
	}
}

// writeDocs makes a repository of Markdown files for the checks' own tests.
func writeDocs(t *testing.T, files map[string]string) (string, []*Doc) {
	t.Helper()
	root := t.TempDir()
	var docs []*Doc
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, ".md") {
			docs = append(docs, Parse(name, text))
		}
	}
	return root, docs
}

func TestBrokenLinksAreReported(t *testing.T) {
	root, docs := writeDocs(t, map[string]string{
		"README.md": "# Top\n\nSee [proxy](docs/proxy.md#keying), [gone](docs/gone.md), [bad anchor](docs/proxy.md#nope),\n" +
			"[here](#top), [not here](#missing), [web](https://example.com/x.md) and ![pic](docs/pic.png).\n" +
			"`[in code](docs/absent.md)` is not a link.\n\n```\n[in a block](docs/absent.md)\n```\n",
		"docs/proxy.md": "# Proxy\n\n## Keying\n\nBack to [the top](../README.md#top); [the pic](pic.png).\n",
		"docs/pic.png":  "png",
	})
	want := []string{
		`README.md:3: link "docs/gone.md": docs/gone.md does not exist`,
		`README.md:3: link "docs/proxy.md#nope": docs/proxy.md has no heading with the anchor #nope`,
		`README.md:4: link "#missing": README.md has no heading with the anchor #missing`,
	}
	if d := diff(want, CheckLinks(root, docs)); d != "" {
		t.Errorf("problems (want, got):\n%s", d)
	}
}

func TestSlugIsGitHubsAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Trusting Ratchet's CA":                         "trusting-ratchets-ca",
		"Traces (OpenTelemetry)":                        "traces-opentelemetry",
		"Observe mode: try a rule before it can refuse": "observe-mode-try-a-rule-before-it-can-refuse",
		"The `ratchet` CLI":                             "the-ratchet-cli",
		"Keying: which requests are one call":           "keying-which-requests-are-one-call",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q; want %q", heading, got, want)
		}
	}
	d := Parse("x.md", "# A\n## Notes\n```\n# not a heading\n```\n## Notes\n")
	if d := diff(map[string]bool{"a": true, "notes": true, "notes-1": true}, d.Anchors()); d != "" {
		t.Errorf("anchors (want, got):\n%s", d)
	}
}

func TestCommandsAreReadAsAReaderTypesThem(t *testing.T) {
	d := Parse("x.md", strings.Join([]string{
		"Run `ratchet config validate FILE` or `ratchet_begin_effect` (a tool, not a command).", // 1
		"```sh", // 2
		"ratchet effects resolve eff_01J… --resolution succeeded --note \"seen # at Stripe\"   # a comment", // 3
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://c:4318 ratchet serve --config ratchet.yaml",                     // 4
		"ratchet backup --data-dir D > ledger.bak; ratchet token hash < token-file",                         // 5
		"ratchet grants list [--all] -o json | jq .",                                                        // 6
		"```",     // 7
		"```json", // 8
		`{"mcpServers": {"ratchet": {"command": "ratchet", "args": ["mcp", "--stdio", "--namespace", "shop"]}}}`,
		"```",
		"`ratchet audit export/verify`",
		"A span may wrap: `ratchet", // 12
		"effects list --state S`, and so may [a",
		"link](x.md).",
	}, "\n"))
	type cmd struct {
		Line int
		Args string
	}
	var got []cmd
	for _, c := range d.Commands() {
		got = append(got, cmd{c.Line, strings.Join(c.Args, " ")})
	}
	want := []cmd{
		{1, "config validate FILE"},
		{3, "effects resolve eff_01J… --resolution succeeded --note seen # at Stripe"},
		{4, "serve --config ratchet.yaml"},
		{5, "backup --data-dir D"},
		{5, "token hash"},
		{6, "grants list [--all] -o json"},
		{8, "mcp --stdio --namespace shop"},
		{11, "audit export/verify"},
		{12, "effects list --state S"},
	}
	if d := diff(want, got); d != "" {
		t.Errorf("commands (want, got):\n%s", d)
	}
	if ls := d.Links(); len(ls) != 1 || ls[0].Target != "x.md" || ls[0].Line != 13 {
		t.Errorf("links = %+v; want x.md at line 13", ls)
	}
	c := Command{Args: []string{"grants", "list", "[--all]", "-o", "json", "--since=24h"}}
	if d := diff([]string{"all", "o", "since"}, c.Flags()); d != "" {
		t.Errorf("flags (want, got):\n%s", d)
	}
	if d := diff([]string{"export", "verify"}, Command{Args: []string{"audit", "export/verify"}}.Verbs()); d != "" {
		t.Errorf("verbs (want, got):\n%s", d)
	}
	if v := (Command{Args: []string{"serve", "--config", "f"}}).Verbs(); v != nil {
		t.Errorf("serve --config f has verbs %q; want none", v)
	}
}

func TestUnknownConfigKeysAreReported(t *testing.T) {
	docs := []*Doc{Parse("x.md", strings.Join([]string{
		"Set `proxy.upstreams`, `proxy.upstreams.stripe`, `auth.agents[].namespace` and `webhooks.stripe.secret_file`.",              // 1
		"Not `proxy.upstream`, nor `defaults.approval_ttl.seconds`, nor `tracing.sample_rate:`; `payment.refund` is an effect type.", // 2
		"```yaml",
		"listen: {admin: 127.0.0.1:8788}",
		"proxy:",
		"  max_body: 10",
		"```",
	}, "\n"))}
	want := []string{
		"x.md:2: `proxy.upstream`: proxy has no key \"upstream\"",
		"x.md:2: `defaults.approval_ttl.seconds`: defaults.approval_ttl is a value, so it has no key \"seconds\"",
		"x.md:2: `tracing.sample_rate`: tracing has no key \"sample_rate\"",
	}
	got := CheckConfig(docs)
	if len(got) != len(want)+1 {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want)+1, strings.Join(got, "\n"))
	}
	if d := diff(want, got[:len(want)]); d != "" {
		t.Errorf("key problems (want, got):\n%s", d)
	}
	if y := got[len(want)]; !strings.HasPrefix(y, "x.md:3: the YAML block is not a config file") || !strings.Contains(y, "max_body") {
		t.Errorf("YAML problem = %q; want one at x.md:3 naming max_body", y)
	}
}

// diff is "" when want and got are equal, else both, one item a line.
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	lines := func(v any) string {
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice {
			return fmt.Sprintf("  %v\n", v)
		}
		var b strings.Builder
		for i := range rv.Len() {
			fmt.Fprintf(&b, "  %v\n", rv.Index(i))
		}
		return b.String()
	}
	return "want:\n" + lines(want) + "got:\n" + lines(got)
}
