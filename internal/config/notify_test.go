package config

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestANotifyBlockLoads(t *testing.T) {
	cfg, err := Load("testdata/notify.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Notify
	if len(n.Sinks) != 2 || n.Sinks[1].Deciders[1] != "W0BOB" || n.MaxAttempts != 10 || n.MaxBackoff.Value().Minutes() != 10 ||
		len(n.BudgetThresholds) != 3 {
		t.Fatalf("notify: %+v", n)
	}
	route := n.RouteList()
	if len(route) != 2 || route[0].EffectTypes[0] != "payment.*" || route[1].Namespaces[0] != "shop" {
		t.Fatalf("routes: %+v", route)
	}
	// No notify block: nothing routed, defaults filled.
	if d := Default(); len(d.Notify.Sinks) != 0 || d.Notify.MaxAttempts != 10 {
		t.Fatalf("default notify: %+v", d.Notify)
	}
}

func TestNotifyProblemsNameTheLine(t *testing.T) {
	probs := problems(t, "testdata/notify_broken.yaml")
	want := []wantProblem{
		{2, "notify.max_attempts", "at least 1"},
		{19, "notify.budget_thresholds[1]", "at most 1"},
		{6, "notify.sinks[0].url", "not an http(s) URL"},
		{4, "notify.sinks[0]", "both secret_file and secret_env"},
		{9, "notify.sinks[1].channel", "is required"},
		{12, "notify.sinks[1].deciders[0]", "not a Slack user id"},
		{13, "notify.sinks[1].decider_groups[0]", "not a Slack user group id"},
		{9, "notify.sinks[1]", "needs signing_secret_file or signing_secret_env"},
		{9, "notify.sinks[1].listen", "is required with deciders"},
		{14, "notify.sinks[2].name", "already the name of notify.sinks[0]"},
		{15, "notify.sinks[2].type", "must be webhook, slack, pagerduty, teams or email"},
		{17, "notify.routes[0].sinks[1]", "not the name of a sink"},
		{18, "notify.routes[0].events[0]", "not a notification event"},
	}
	wantProblems(t, probs, want)
}

func TestReadSecretFromAFileOrTheEnvironment(t *testing.T) {
	f := t.TempDir() + "/s"
	os.WriteFile(f, []byte("  whsec-1\n"), 0o600)
	if v, err := ReadSecret(f, ""); err != nil || v != "whsec-1" {
		t.Fatalf("file: %q %v", v, err)
	}
	t.Setenv("RATCHET_TEST_SECRET", "whsec-2")
	if v, err := ReadSecret("", "RATCHET_TEST_SECRET"); err != nil || v != "whsec-2" {
		t.Fatalf("env: %q %v", v, err)
	}
	if _, err := ReadSecret("", "RATCHET_TEST_UNSET_SECRET"); err == nil {
		t.Fatal("an empty variable was accepted")
	}
	if !ledger.NotifyTypes[ledger.EventBudgetThreshold] {
		t.Fatal("budget.threshold is not a notification type")
	}
}

func TestOnCallSinksLoad(t *testing.T) {
	cfg, err := Load("testdata/notify_oncall.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Notify
	if n.ConsoleURL != "https://ratchet.example.com" {
		t.Errorf("console_url %q", n.ConsoleURL)
	}
	got := []string{}
	for _, s := range n.Sinks {
		got = append(got, s.Name+":"+s.Type)
	}
	if diff := cmp.Diff([]string{"pager:pagerduty", "teams:teams", "mail:email", "relay:email"}, got); diff != "" {
		t.Errorf("sinks (-want +got):\n%s", diff)
	}
	if !n.Sinks[2].StartTLSOn() {
		t.Errorf("an email sink without starttls does not upgrade")
	}
	if n.Sinks[3].StartTLSOn() {
		t.Errorf("starttls: false on a loopback relay is on")
	}
}

func TestOnCallSinkProblemsNameTheLine(t *testing.T) {
	probs := problems(t, "testdata/notify_oncall_broken.yaml")
	want := []wantProblem{
		{6, "notify.sinks[0].channel", "not a key of pagerduty sinks"},
		{3, "notify.sinks[0]", "needs routing_key_file or routing_key_env"},
		{5, "notify.sinks[0].url", "not an http(s) URL"},
		{7, "notify.sinks[1]", "needs url_file or url_env"},
		{9, "notify.sinks[1].url", "carries its signature"},
		{12, "notify.sinks[2].address", "not the SMTP server's host:port"},
		{13, "notify.sinks[2].from", "not an email address"},
		{14, "notify.sinks[2].to[1]", "not an email address"},
		{10, "notify.sinks[2].username", "is required with password_file"},
		{19, "notify.sinks[3].starttls", "only for a relay on a loopback address"},
		{1, "notify.console_url", "is required with notify.sinks[1]"},
	}
	wantProblems(t, probs, want)
}

// TestTheExamplesNotifyBlockIsValid: the commented notify block of the
// example config, every sink type in it, loads as it is once uncommented.
func TestTheExamplesNotifyBlockIsValid(t *testing.T) {
	b, err := os.ReadFile("../../configs/ratchet.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "# notify:")
	end := strings.Index(s[start:], "\n\n")
	if start < 0 || end < 0 {
		t.Fatal("no notify block in the example")
	}
	var out []string
	for _, l := range strings.Split(s[start:start+end], "\n") {
		if rest, ok := strings.CutPrefix(l, "# "); ok {
			out = append(out, rest)
		}
	}
	cfg, err := Parse(strings.NewReader(strings.Join(out, "\n")), "example")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, s := range cfg.Notify.Sinks {
		types = append(types, s.Type)
	}
	if diff := cmp.Diff([]string{"webhook", "slack", "pagerduty", "teams", "email"}, types); diff != "" {
		t.Errorf("the example's sinks (-want +got):\n%s", diff)
	}
}

// The routing key goes in the body of every request to a pagerduty
// sink's url: a plain-http url is refused unless it is on loopback (a
// local fake or relay), as an email sink's starttls is.
func TestAPagerDutyURLInTheClearIsRefusedOffLoopback(t *testing.T) {
	cfg := func(u string) string {
		return "notify:\n  sinks:\n    - name: pager\n      type: pagerduty\n      routing_key_env: PD_KEY\n      url: " + u + "\n  routes:\n    - {sinks: [pager]}\n"
	}
	probs := parseProblems(t, cfg("http://events.example.com/v2/enqueue"))
	if len(probs) != 1 {
		t.Fatalf("a plain-http url off loopback: %+v, want one problem", probs)
	}
	if diff := cmp.Diff([]any{6, "notify.sinks[0].url", true}, []any{probs[0].Line, probs[0].Path, strings.Contains(probs[0].Message, "https")}); diff != "" {
		t.Errorf("(-want +got line, path, says https):\n%s", diff)
	}
	for _, u := range []string{"https://events.example.com/v2/enqueue", "http://127.0.0.1:9999/v2/enqueue", "http://localhost:9999/v2/enqueue"} {
		if probs := parseProblems(t, cfg(u)); len(probs) != 0 {
			t.Errorf("%s: %+v, want none", u, probs)
		}
	}
}
