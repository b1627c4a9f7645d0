package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// cli runs the binary with the admin token in its environment.
func cli(t *testing.T, token string, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "RATCHET_ADMIN_TOKEN="+token)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args map[string]any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil || res.IsError {
		t.Fatalf("%s: %v %+v", name, err, res)
	}
	return res.StructuredContent.(map[string]any)
}

func TestOperatorEndToEnd(t *testing.T) {
	// A vendor that answers only when the test lets it, to hold a call in
	// progress across SIGTERM.
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var stamped string // the idempotency key the vendor received; read after arrived
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stamped = r.Header.Get("Idempotency-Key")
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"pspReference":"PSP1","resultCode":"Authorised"}`)
	}))
	defer upstream.Close()

	data := filepath.Join(t.TempDir(), "data")
	caOut := filepath.Join(t.TempDir(), "shared", "ca.crt")
	extra := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n" +
		"proxy:\n  upstreams: {adyen: '" + upstream.URL + "'}\n  ca_export_path: '" + caOut + "'\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	s := startServe(t, data, extra)
	// serve exported the proxy CA for other containers: the same
	// certificate "ratchet ca export" prints, and no key.
	exported, err := os.ReadFile(caOut)
	if err != nil || !bytes.HasPrefix(exported, []byte("-----BEGIN CERTIFICATE-----")) || bytes.Contains(exported, []byte("PRIVATE")) {
		t.Fatalf("exported CA: %v %s", err, exported)
	}
	cs := connect(t, s.mcp, "agent-tok")
	pay := map[string]any{"idempotency_key": "inv:big", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
	a := callTool(t, cs, "ratchet_begin_effect", pay)
	if a["decision"] != "approval_required" {
		t.Fatalf("begin: %v", a)
	}
	approval := a["approval_id"].(string)

	// The operator lists and approves through the CLI.
	code, out, errs := cli(t, "admin-tok", nil, "approvals", "list", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "APPROVAL") || !strings.Contains(out, approval) || !strings.Contains(out, "payment.charge") {
		t.Fatalf("approvals list: %d %s %s", code, out, errs)
	}
	code, out, errs = cli(t, "admin-tok", nil, "approvals", "approve", approval, "--note", "ok", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "approved by admin:alice") {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	// An agent token cannot use the admin API; errors are one line, exit 1.
	code, _, errs = cli(t, "agent-tok", nil, "approvals", "list", "--admin", s.admin)
	if code != 1 || !strings.Contains(errs, "agent tokens cannot use the admin API") || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Fatalf("agent on admin: %d %q", code, errs)
	}

	ex := callTool(t, cs, "ratchet_begin_effect", pay)
	if ex["decision"] != "execute" {
		t.Fatalf("after approval: %v", ex)
	}
	id := ex["effect_id"].(string)
	callTool(t, cs, "ratchet_report_effect", map[string]any{"effect_id": id, "outcome": "unknown"})

	code, out, _ = cli(t, "admin-tok", nil, "effects", "list", "--state", "indeterminate", "-o", "json", "--admin", s.admin)
	var page ledger.Page
	if code != 0 || json.Unmarshal([]byte(out), &page) != nil || len(page.Effects) != 1 || page.Effects[0].EffectID != id {
		t.Fatalf("effects list: %d %s", code, out)
	}
	// Resolving asks first, naming the consequence; with no terminal to
	// ask on, it is refused and names --yes, and nothing changes.
	code, _, errs = cli(t, "admin-tok", nil, "effects", "resolve", id, "--resolution", "succeeded", "--admin", s.admin)
	if code != 2 || !strings.Contains(errs, "--yes") || !strings.Contains(errs, "never executes") {
		t.Errorf("resolve without --yes, not a terminal: %d %q, want exit 2 naming --yes and the consequence", code, errs)
	}
	code, _, errs = cli(t, "admin-tok", nil, "effects", "resolve", id, "--resolution", "failed", "--admin", s.admin)
	if code != 2 || !strings.Contains(errs, "frees its idempotency key") || !strings.Contains(errs, "second charge") {
		t.Errorf("resolve failed without --yes: %d %q, want the double-charge warning", code, errs)
	}
	if code, out, _ = cli(t, "admin-tok", nil, "effects", "show", id, "--admin", s.admin); code != 0 || !strings.Contains(out, "indeterminate") {
		t.Fatalf("after refused resolves the effect is not still indeterminate: %d %s", code, out)
	}
	code, out, errs = cli(t, "admin-tok", nil, "effects", "resolve", id, "--resolution", "succeeded", "--note", "checked", "--yes", "--admin", s.admin)
	if code != 0 || !strings.Contains(out, "succeeded") || !strings.Contains(out, "admin:alice") {
		t.Fatalf("resolve: %d %s %s", code, out, errs)
	}
	if code, out, _ = cli(t, "admin-tok", nil, "effects", "show", id, "--admin", s.admin); code != 0 || !strings.Contains(out, "resolved by") {
		t.Fatalf("show: %d %s", code, out)
	}
	if code, out, _ = cli(t, "admin-tok", nil, "budgets", "--admin", s.admin); code != 0 || !strings.Contains(out, "CEILING") {
		t.Fatalf("budgets: %d %s", code, out)
	}

	resp, err := http.Get(s.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metricsText, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ratchet_decisions_total{decision="approval_required",effect_type="payment.charge"} 1`,
		`ratchet_decisions_total{decision="execute",effect_type="payment.charge"} 1`, `ratchet_reports_total{outcome="unknown"} 1`,
		`ratchet_effects{state="succeeded"} 1`} {
		if !bytes.Contains(metricsText, []byte(want)) {
			t.Fatalf("metrics lack %s", want)
		}
	}

	// SIGTERM while a proxied call waits on the vendor: the call completes,
	// the process exits 0. The call is a payment.charge, which the
	// payment.* threshold governs: its cost ($10, in a currency the config
	// converts) is declared, under the threshold.
	got := make(chan *http.Response, 1)
	go func() {
		r, err := http.Post(s.proxy+"/adyen/v71/payments", "application/json",
			strings.NewReader(`{"amount":{"currency":"USD","value":1000},"reference":"R1","merchantAccount":"M"}`))
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case <-arrived:
	case r := <-got:
		t.Fatalf("the proxied call never reached the vendor: %+v", r)
	case <-time.After(30 * time.Second):
		t.Fatal("the proxied call never reached the vendor")
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond) // shutdown is under way, waiting for the call
	close(release)
	r := <-got
	if r == nil || r.StatusCode != 200 || r.Header.Get("Ratchet-Decision") != "execute" {
		t.Fatalf("call across SIGTERM: %+v", r)
	}
	r.Body.Close()
	proxied := r.Header.Get("Ratchet-Effect-Id")
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}

	// Restarted on the same dir, everything is there.
	s2 := startServe(t, data, extra)
	code, out, _ = cli(t, "admin-tok", nil, "effects", "list", "-o", "json", "--admin", s2.admin)
	var after ledger.Page
	if code != 0 || json.Unmarshal([]byte(out), &after) != nil || len(after.Effects) != 2 {
		t.Fatalf("after restart: %d %s", code, out)
	}
	for _, e := range after.Effects {
		if e.State != ledger.StateSucceeded {
			t.Fatalf("after restart: %+v", e)
		}
	}
	// The operator sees the key the proxy stamped on the vendor request,
	// to search the vendor by, and finds the effect by its key.
	code, out, errs = cli(t, "admin-tok", nil, "effects", "show", proxied, "--admin", s2.admin)
	if code != 0 || !strings.Contains(out, "attempt 1 vendor key") || !strings.Contains(out, stamped+" (header idempotency-key)") {
		t.Errorf("show of the proxied call: %d %s %s; want attempt 1's vendor key %s", code, out, errs, stamped)
	}
	var shown ledger.Effect
	for _, e := range after.Effects {
		if e.EffectID == proxied {
			shown = e
		}
	}
	code, out, _ = cli(t, "admin-tok", nil, "effects", "list", "--key", shown.IdempotencyKey, "--namespace", shown.Namespace, "-o", "json", "--admin", s2.admin)
	var byKey ledger.Page
	if code != 0 || json.Unmarshal([]byte(out), &byKey) != nil || len(byKey.Effects) != 1 || byKey.Effects[0].EffectID != proxied {
		t.Errorf("effects list --key: %d %s, want only %s", code, out, proxied)
	}
	s2.cmd.Process.Signal(syscall.SIGTERM)
	<-s2.done

	// Backup, restore into a new dir: every effect is reproduced.
	code, backup, errs := cli(t, "", nil, "backup", "--data-dir", data)
	if code != 0 || len(backup) == 0 {
		t.Fatalf("backup: %d %s", code, errs)
	}
	restored := filepath.Join(t.TempDir(), "restored")
	if code, _, errs = cli(t, "", strings.NewReader(backup), "restore", "--data-dir", restored); code != 0 {
		t.Fatalf("restore: %d %s", code, errs)
	}
	if code, _, errs = cli(t, "", strings.NewReader(backup), "restore", "--data-dir", restored); code == 0 || !strings.Contains(errs, "already holds a ledger") {
		t.Fatalf("restore over a ledger: %d %s", code, errs)
	}
	key, _ := os.ReadFile(filepath.Join(data, "hmac.key"))
	writeFile(t, filepath.Join(restored, "hmac.key"), string(key))
	if a, b := listAll(t, data), listAll(t, restored); a != b || !strings.Contains(a, id) {
		t.Fatalf("restored ledger differs:\n%s\n%s", a, b)
	}
}

// listAll opens a data dir's ledger and renders every effect.
func listAll(t *testing.T, dir string) string {
	t.Helper()
	st, err := badgerstore.Open(filepath.Join(dir, "ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(dir, "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, ReapInterval: -1, PurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	page, err := eng.List(context.Background(), ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(page)
	return string(b)
}

// At a terminal, resolve names the consequence and resolves only on "yes".
func TestResolveAsksAtATerminal(t *testing.T) {
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{})
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{}))
	defer srv.Close()
	ctx := context.Background()
	b, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "k", EffectType: "payment.charge"})
	eng.Report(ctx, ledger.ReportRequest{EffectID: b.EffectID, Attempt: b.Attempt, Outcome: ledger.OutcomeUnknown})
	was := stdinIsTerminal
	stdinIsTerminal = func(io.Reader) bool { return true }
	defer func() { stdinIsTerminal = was }()

	code, _, errs := runArgs(t, "y\n", "effects", "resolve", b.EffectID, "--resolution", "failed", "--admin", srv.URL)
	if code != 1 || !strings.Contains(errs, "second charge") || !strings.Contains(errs, "Type yes") {
		t.Errorf("answer y: %d %q, want the warning, the question and exit 1", code, errs)
	}
	if e, _ := eng.Get(ctx, "", b.EffectID, ""); e.State != ledger.StateIndeterminate {
		t.Errorf("after answer y the effect is %s, want indeterminate", e.State)
	}
	code, out, errs := runArgs(t, "yes\n", "effects", "resolve", b.EffectID, "--resolution", "failed", "--admin", srv.URL)
	if code != 0 || !strings.Contains(out, "failed") {
		t.Errorf("answer yes: %d %q %q", code, out, errs)
	}
	if e, _ := eng.Get(ctx, "", b.EffectID, ""); e.State != ledger.StateFailed {
		t.Errorf("after answer yes the effect is %s, want failed", e.State)
	}
}

// Budgets label a dimension's scope as a hash, and --dimension/--value
// list one value's ceilings under the value.
func TestBudgetsCLILooksAScopeUpByValue(t *testing.T) {
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{Policies: []ledger.Rule{{Match: "payment.*",
		Ceilings: []ledger.Ceiling{{Name: "per-cp", LimitMicros: i64(1000), Window: "24h", Per: "dimension:counterparty"}}}}})
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{}))
	defer srv.Close()
	for _, cp := range []string{"acct_1", "acct_2"} {
		eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: cp, EffectType: "payment.charge",
			Dimensions: map[string]string{"counterparty": cp}, EstimatedCostMicros: i64(300)})
	}
	code, out, errs := runArgs(t, "", "budgets", "--admin", srv.URL)
	if code != 0 || strings.Count(out, " hash:") != 2 || !strings.Contains(out, "--dimension NAME --value VALUE") {
		t.Errorf("budgets: %d %s %s; want two hash: scopes and the hint", code, out, errs)
	}
	code, out, errs = runArgs(t, "", "budgets", "--dimension", "counterparty", "--value", "acct_2", "--admin", srv.URL)
	if code != 0 || !strings.Contains(out, "counterparty=acct_2") || strings.Count(out, "per-cp") != 1 {
		t.Errorf("budgets --dimension counterparty --value acct_2: %d %s %s; want its one row, labelled", code, out, errs)
	}
	if code, _, errs = runArgs(t, "", "budgets", "--dimension", "counterparty", "--admin", srv.URL); code != 2 || !strings.Contains(errs, "go together") {
		t.Errorf("--dimension without --value: %d %s", code, errs)
	}
}
func i64(v int64) *int64 { return &v }
