package config

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/proxy"
)

func TestDefaults(t *testing.T) {
	cfg, err := Parse(strings.NewReader(""), "empty.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "./data" || cfg.Listen.MCP != "127.0.0.1:8787" || cfg.Proxy.Upstreams["stripe"] != "https://api.stripe.com" ||
		cfg.HMACKeyPath() != "data/hmac.key" || cfg.Ledger.Backend != "badger" || cfg.Proxy.MaxBodyBytes != 1<<20 {
		t.Fatalf("defaults: %+v", cfg)
	}
	cfg.DataDir = "/var/lib/ratchet" // as a --data-dir flag would
	if cfg.HMACKeyPath() != "/var/lib/ratchet/hmac.key" {
		t.Fatal(cfg.HMACKeyPath())
	}
	if Default().Listen.Admin != "127.0.0.1:8788" {
		t.Fatal("Default() differs from an empty file")
	}
}

func problems(t *testing.T, file string) []Problem {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = Parse(f, file)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: got %v, want a config error", file, err)
	}
	return ce.Problems
}

// wantProblem is a problem a broken file must report: its line, its path
// and part of its message.
type wantProblem struct {
	line int
	path string
	msg  string
}

// wantProblems checks probs are exactly want, in order.
func wantProblems(t *testing.T, probs []Problem, want []wantProblem) {
	t.Helper()
	if len(probs) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%+v", len(probs), len(want), probs)
	}
	for i, w := range want {
		p := probs[i]
		if p.Line != w.line || p.Path != w.path || !strings.Contains(p.Message, w.msg) {
			t.Errorf("problem %d: got %d %s %q, want %d %s %q", i, p.Line, p.Path, p.Message, w.line, w.path, w.msg)
		}
	}
}

func TestErrorsNameTheLine(t *testing.T) {
	probs := problems(t, "testdata/broken.yaml")
	want := []wantProblem{
		{5, "policies[0].ceilings[0].limit_micros", "must be >= 0"},
		{6, "policies[0].ceilings[1].window", "not a duration"},
		{7, "policies[0].ceilings[2].per", "must be global, agent, run or dimension:<name>"},
		{8, "policies[1].match", "not a valid glob"},
	}
	wantProblems(t, probs, want)
	err := (&Error{File: "broken.yaml", Problems: probs}).Error()
	if !strings.HasPrefix(err, "broken.yaml:5: policies[0].ceilings[0].limit_micros: must be >= 0") {
		t.Fatalf("message: %s", err)
	}
}

func TestUnknownFieldNamesTheLine(t *testing.T) {
	probs := problems(t, "testdata/unknown_field.yaml")
	if len(probs) != 1 || probs[0].Line != 5 || !strings.Contains(probs[0].Message, `unknown field "ceilngs"`) {
		t.Fatalf("got %+v", probs)
	}
}

func TestMoreValidation(t *testing.T) {
	cases := map[string]struct {
		yaml string
		line int
		frag string
	}{
		"duplicate ceiling":       {"policies:\n  - match: a.*\n    ceilings: [{name: x, limit_count: 1, window: 1h, per: global}]\n  - match: b.*\n    ceilings:\n      - {name: x, limit_count: 1, window: 1h, per: global}\n", 6, "already used"},
		"both limits":             {"policies:\n  - match: a.*\n    ceilings:\n      - {name: x, limit_count: 1, limit_micros: 1, window: 1h, per: global}\n", 4, "use one"},
		"bad retention":           {"defaults:\n  retention: forever\n", 2, "not a positive duration"},
		"negative window":         {"proxy:\n  dedupe_window: -1h\n", 2, "\"-1h\" is not a positive duration"},
		"duration as a list":      {"defaults:\n  approval_ttl: [24h]\n", 2, "\"(!!seq)\" is not a positive duration"},
		"zero timeout":            {"proxy:\n  upstream_timeout: 0s\n", 2, "not a positive duration"},
		"audit shorter":           {"defaults:\n  retention: 720h\naudit:\n  retention: 24h\n", 4, "must outlive the effects"},
		"token not hashed":        {"auth:\n  agents:\n    - {token_sha256: secret-token, namespace: a}\n", 3, "64 lowercase hex"},
		"bad backend":             {"ledger:\n  backend: mysql\n", 2, "badger or postgres"},
		"postgres no dsn":         {"ledger:\n  backend: postgres\n", 1, "exactly one of dsn_env"},
		"wrong type":              {"defaults:\n  lease_seconds: soon\n", 2, "cannot unmarshal"},
		"syntax":                  {"policies: [\n", 1, "did not find"}, // yaml.v3 gives no line here
		"bad currency":            {"proxy:\n  currency_micros: {usd: 0}\n", 2, "must be > 0"},
		"window too short":        {"policies:\n  - match: a.*\n    ceilings:\n      - {name: x, limit_count: 1, window: 1ms, per: global}\n", 4, "between 1s"},
		"intercept, no upstream":  {"proxy:\n  intercept_hosts:\n    paypal: [api.example.com]\n", 3, "no proxy.upstreams.paypal"},
		"intercept wildcard":      {"proxy:\n  intercept_hosts:\n    adyen: ['*.adyenpayments.com']\n", 3, "not a lowercase host name"},
		"approvers, no threshold": {"policies:\n  - match: a.*\n    approvers_required: 2\n", 3, "needs approval_threshold_micros"},
		"approvers from below":    {"policies:\n  - match: a.*\n    approval_threshold_micros: 10\n    approvers_required: 2\n    approvers_threshold_micros: 5\n", 5, "at or above approval_threshold_micros"},
		"zero session idle":       {"mcp:\n  session_idle: 0s\n", 2, "\"0s\" is not a positive duration"},
		"negative idle timeout":   {"listen:\n  mcp: 127.0.0.1:8787\n  idle_timeout: -1m\n", 3, "\"-1m\" is not a positive duration"},
		"no dead letters kept":    {"notify:\n  max_dead_letters: -5\n", 2, "must be at least 1 (dead letters kept per sink"},
		"zero waiting bound":      {"notify:\n  max_attempts: 3\n  max_waiting: -1\n", 3, "must be at least 1 (entries waiting per sink"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.yaml), "t.yaml")
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v", err)
			}
			p := ce.Problems[0]
			if p.Line != c.line || !strings.Contains(p.Message, c.frag) {
				t.Fatalf("got %+v, want line %d containing %q", p, c.line, c.frag)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "data_dir: x\n", "policies:\n  - match: a.*\n    deny: true\n", "{", "policies: [{match: '[', ceilings: [{}]}]"} {
		f.Add(s)
	}
	b, _ := os.ReadFile("../../configs/ratchet.example.yaml")
	f.Add(string(b))
	f.Fuzz(func(t *testing.T, s string) {
		cfg, err := Parse(strings.NewReader(s), "fuzz.yaml")
		if err == nil && cfg.Validate() != nil {
			t.Fatal("Parse accepted a config that Validate refuses")
		}
	})
}

// TestDurationsHaveOneValue: a duration in the file is parsed once, where it
// is decoded, and reaches the engine and the proxy as written; a field left
// out takes the engine's or the proxy's own default.
func TestDurationsHaveOneValue(t *testing.T) {
	cfg, err := Parse(strings.NewReader("defaults:\n  approval_ttl: 90m\nproxy:\n  dedupe_window: 2h\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.LedgerDefaults(); d.ApprovalTTL != 90*time.Minute || d.Retention != ledger.DefaultRetention {
		t.Fatalf("ledger defaults: %+v", d)
	}
	if cfg.Proxy.DedupeWindow.Value() != 2*time.Hour || cfg.Proxy.UpstreamTimeout.Value() != proxy.DefaultUpstreamTimeout {
		t.Fatalf("proxy: window %v, timeout %v", cfg.Proxy.DedupeWindow, cfg.Proxy.UpstreamTimeout)
	}
}

// A type error does not hide the rest: every problem of the file is
// reported, each at its line, and a dimension name that is not lowercase
// says so.
func TestEveryProblemAtItsLine(t *testing.T) {
	wantProblems(t, problems(t, "testdata/broken_types.yaml"), []wantProblem{
		{2, "", "cannot unmarshal !!str `soon`"},
		{6, "", "cannot unmarshal !!str `lots`"},
		{7, "policies[0].ceilings[1].per", "a dimension name is lowercase letters, digits and _ (at most 63), as agents send it (did you mean dimension:counterparty?)"},
		{8, "policies[1].match", "not a valid glob"},
	})
}

// A syntax error names the line it is on (yaml.v3's parser gives its
// lines 0-based).
func TestSyntaxErrorLine(t *testing.T) {
	for name, c := range map[string]struct {
		yaml string
		line int
		frag string
	}{
		"bad indentation": {"a: 1\nb:\n  - x\n y: 2\n", 4, "did not find expected key"},
		"unclosed flow mapping": {"policies:\n  - match: a.*\n    ceilings:\n      - {name: x, limit_count: 1, window: 1h, per: global\n  - match: b\n",
			4, "did not find expected ',' or '}'"},
		"unclosed flow sequence at the end": {"a: 1\nb: 2\nc: [\n", 3, "did not find expected node content"},
		"scanner: mapping value":            {"a: 1\nb: 2\n  c: 3\n", 3, "mapping values are not allowed"},
		"scanner: tab":                      {"a: 1\n\tb: 2\n", 2, "tab character"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(c.yaml), "t.yaml")
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v", err)
			}
			wantProblems(t, ce.Problems, []wantProblem{{c.line, "", c.frag}})
		})
	}
}
