package admin_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// auditSetup is an engine keeping the audit log behind the admin API, and
// the records of a small workload: begins, a report, an approval decided
// and an effect resolved by the admin "alice".
func auditSetup(t *testing.T) (*admin.Client, *ledger.Engine) {
	t.Helper()
	dir := t.TempDir()
	eng := enginetest.Open(t, dir, ledger.Options{Audit: true,
		Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: i64(100)}}})
	srv := httptest.NewServer(admin.Handler(eng, &admin.Options{
		Admins: map[string]string{sum("admin-tok"): "alice"}, Agents: map[string]bool{sum("agent-tok"): true}}))
	t.Cleanup(srv.Close)
	c := &admin.Client{URL: srv.URL, Token: "admin-tok"}
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d"} {
		r, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: k, EffectType: "email.send", AgentID: "bot",
			Dimensions: map[string]string{"recipient": "secret-recipient@example.com"}})
		if err != nil {
			t.Fatal(err)
		}
		eng.Report(ctx, ledger.ReportRequest{EffectID: r.EffectID, Outcome: ledger.OutcomeSucceeded})
	}
	big, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	if _, err := c.Decide(ctx, big.ApprovalID, true, "fine"); err != nil {
		t.Fatal(err)
	}
	ex, _ := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "p1", EffectType: "payment.charge", AgentID: "bot", EstimatedCostMicros: i64(500)})
	eng.Report(ctx, ledger.ReportRequest{EffectID: ex.EffectID, Outcome: ledger.OutcomeUnknown})
	if _, err := c.Resolve(ctx, ex.EffectID, ledger.OutcomeSucceeded, "seen"); err != nil {
		t.Fatal(err)
	}
	return c, eng
}

func TestAuditExportVerifiesAndNamesOperators(t *testing.T) {
	c, _ := auditSetup(t)
	var buf bytes.Buffer
	if err := c.AuditExport(context.Background(), time.Time{}, time.Time{}, &buf); err != nil {
		t.Fatal(err)
	}
	export := buf.String()
	sum, brk, err := admin.VerifyExport(strings.NewReader(export), nil)
	if err != nil || brk != nil {
		t.Fatalf("a fresh export does not verify: %v %v\n%s", brk, err, export)
	}
	if sum.Records < 10 || sum.Chains["local"] != [2]uint64{1, uint64(sum.Records)} {
		t.Fatalf("summary %+v", sum)
	}
	// Each operator action names the admin's token name.
	for _, typ := range []string{ledger.EventApprovalDecided, ledger.EventEffectResolved} {
		if !strings.Contains(export, `"type":"`+typ+`"`) {
			t.Fatalf("no %s record", typ)
		}
	}
	for _, line := range strings.Split(export, "\n") {
		if (strings.Contains(line, ledger.EventApprovalDecided) || strings.Contains(line, ledger.EventEffectResolved)) &&
			!strings.Contains(line, `"actor":"admin:alice"`) {
			t.Fatalf("an operator action without its operator: %s", line)
		}
	}
	if strings.Contains(export, "secret-recipient") || strings.Contains(export, `"p1"`) {
		t.Fatal("the export holds a dimension value or an idempotency key")
	}
}

// TestEditingDeletingOrInsertingOneExportedLineIsNamed: every way of
// changing one line of an export makes VerifyExport fail at that line.
func TestEditingDeletingOrInsertingOneExportedLineIsNamed(t *testing.T) {
	c, _ := auditSetup(t)
	var buf bytes.Buffer
	if err := c.AuditExport(context.Background(), time.Time{}, time.Time{}, &buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(strings.TrimSuffix(buf.String(), "\n"), "\n")
	n := len(lines) // the last is the trailer
	mid := n / 2
	with := func(f func([]string) []string) string {
		return strings.Join(f(append([]string(nil), lines...)), "")
	}
	cases := map[string]struct {
		export string
		line   int
		says   string
	}{
		"a record edited": {with(func(l []string) []string {
			l[mid-1] = strings.Replace(l[mid-1], `"attempt":1`, `"attempt":2`, 1)
			return l
		}), mid, "altered"},
		"a record deleted": {with(func(l []string) []string { return append(l[:mid-1:mid-1], l[mid:]...) }), mid, "removed"},
		"a record inserted": {with(func(l []string) []string {
			return append(l[:mid:mid], append([]string{l[mid-1]}, l[mid:]...)...)
		}), mid + 1, "inserted"},
		"the first record deleted": {with(func(l []string) []string { return l[1:] }), 1, "removed"},
		"the last record deleted":  {with(func(l []string) []string { return append(l[:n-2:n-2], l[n-1]) }), n - 1, "removed"},
		"the trailer cut off":      {with(func(l []string) []string { return l[:n-1] }), n, "cut off"},
		"garbage inserted": {with(func(l []string) []string {
			return append(l[:mid:mid], append([]string{"{\"chain\":\"local\"}\n"}, l[mid:]...)...)
		}), mid + 1, "not an audit record"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, brk, err := admin.VerifyExport(strings.NewReader(tc.export), nil)
			if err != nil || brk == nil {
				t.Fatalf("verified: %v", err)
			}
			if brk.Line != tc.line || !strings.Contains(brk.Error(), tc.says) {
				t.Fatalf("break %v, want line %d saying %q", brk, tc.line, tc.says)
			}
		})
	}
}

func TestAuditExportRangeAndAuth(t *testing.T) {
	c, _ := auditSetup(t)
	ctx := context.Background()
	var buf bytes.Buffer
	// A range in the future holds no records and still verifies.
	if err := c.AuditExport(ctx, time.Now().Add(time.Hour), time.Time{}, &buf); err != nil {
		t.Fatal(err)
	}
	if sum, brk, err := admin.VerifyExport(&buf, nil); err != nil || brk != nil || sum.Records != 0 {
		t.Fatalf("empty range: %+v %v %v", sum, brk, err)
	}
	var ae *admin.Error
	agent := &admin.Client{URL: c.URL, Token: "agent-tok"}
	if err := agent.AuditExport(ctx, time.Time{}, time.Time{}, &buf); !errors.As(err, &ae) || ae.Status != http.StatusForbidden {
		t.Fatalf("an agent exported the audit log: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, c.URL+"/v1/audit?since=yesterday", nil)
	req.Header.Set("Authorization", "Bearer admin-tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad since: %v %v", resp, err)
	}
	resp.Body.Close()
}
