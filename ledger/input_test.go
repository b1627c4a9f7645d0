package ledger_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestBadBeginInput(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	deep := strings.Repeat("[", 100) + strings.Repeat("]", 100)
	manyDims := map[string]string{}
	for i := range 10_000 {
		manyDims["d"+itoa(int64(i))] = "v"
	}
	ok := func() ledger.BeginRequest {
		return ledger.BeginRequest{IdempotencyKey: "k", EffectType: "email.send"}
	}
	cases := []struct {
		name  string
		mod   func(*ledger.BeginRequest)
		field string
	}{
		{"empty key", func(r *ledger.BeginRequest) { r.IdempotencyKey = "" }, "idempotency_key"},
		{"key too long", func(r *ledger.BeginRequest) { r.IdempotencyKey = strings.Repeat("k", 256) }, "idempotency_key"},
		{"key invalid utf8", func(r *ledger.BeginRequest) { r.IdempotencyKey = "k\xff" }, "idempotency_key"},
		{"key control char", func(r *ledger.BeginRequest) { r.IdempotencyKey = "k\x00x" }, "idempotency_key"},
		{"effect type missing", func(r *ledger.BeginRequest) { r.EffectType = "" }, "effect_type"},
		{"effect type one part", func(r *ledger.BeginRequest) { r.EffectType = "email" }, "effect_type"},
		{"effect type upper", func(r *ledger.BeginRequest) { r.EffectType = "Email.Send" }, "effect_type"},
		{"effect type glob", func(r *ledger.BeginRequest) { r.EffectType = "email.*" }, "effect_type"},
		{"payload too big", func(r *ledger.BeginRequest) {
			r.Payload = json.RawMessage(`"` + strings.Repeat("x", 64<<10) + `"`)
		}, "payload"},
		{"payload not json", func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(`{"a":`) }, "payload"},
		{"payload two values", func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(`1 2`) }, "payload"},
		{"payload duplicate key", func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(`{"a":1,"a":2}`) }, "payload"},
		{"payload too deep", func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(deep) }, "payload"},
		{"payload huge number", func(r *ledger.BeginRequest) { r.Payload = json.RawMessage(`1e999`) }, "payload"},
		{"negative cost", func(r *ledger.BeginRequest) { r.EstimatedCostMicros = i64(-1) }, "estimated_cost_micros"},
		{"overflowing cost", func(r *ledger.BeginRequest) { r.EstimatedCostMicros = i64(1 << 62) }, "estimated_cost_micros"},
		{"10000 dimensions", func(r *ledger.BeginRequest) { r.Dimensions = manyDims }, "dimensions"},
		{"bad dimension name", func(r *ledger.BeginRequest) { r.Dimensions = map[string]string{"Bad Name": "x"} }, "dimensions"},
		{"empty dimension value", func(r *ledger.BeginRequest) { r.Dimensions = map[string]string{"counterparty": ""} }, "dimensions.counterparty"},
		{"negative lease", func(r *ledger.BeginRequest) { r.LeaseSeconds = -5 }, "lease_seconds"},
		{"lease over max", func(r *ledger.BeginRequest) { r.LeaseSeconds = 3601 }, "lease_seconds"},
		{"bad vendor", func(r *ledger.BeginRequest) { r.Vendor = "stripe inc" }, "vendor"},
		{"run id too long", func(r *ledger.BeginRequest) { r.RunID = strings.Repeat("r", 256) }, "run_id"},
		{"bad compensation type", func(r *ledger.BeginRequest) { r.Compensation = &ledger.Compensation{EffectType: "undo"} }, "compensation.effect_type"},
		{"bad compensation cost", func(r *ledger.BeginRequest) {
			r.Compensation = &ledger.Compensation{EffectType: "a.b", EstimatedCostMicros: i64(-3)}
		}, "compensation.estimated_cost_micros"},
		{"bad namespace", func(r *ledger.BeginRequest) { r.Namespace = "Shop Floor" }, "namespace"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := ok()
			c.mod(&req)
			_, err := h.eng.Begin(ctx, req)
			wantCode(t, err, ledger.CodeInvalidArgument)
			if le := err.(*ledger.Error); le.Field != c.field {
				t.Fatalf("field %q, want %q (%v)", le.Field, c.field, err)
			}
		})
	}
	page, err := h.eng.List(ctx, ledger.Filter{})
	if err != nil || len(page.Effects) != 0 {
		t.Fatalf("bad input left %d effects (%v)", len(page.Effects), err)
	}
	// The longest lease allowed is what MaxLeaseSeconds says: the default
	// cap, or a policy's lower one.
	if got := h.eng.MaxLeaseSeconds("email.send"); got != 3600 {
		t.Fatalf("MaxLeaseSeconds(email.send) = %d", got)
	}
	if got := h.eng.MaxLeaseSeconds("sms.send"); got != 120 {
		t.Fatalf("MaxLeaseSeconds(sms.send) = %d", got)
	}
	sms := ok()
	sms.EffectType, sms.LeaseSeconds = "sms.send", 121
	_, err = h.eng.Begin(ctx, sms)
	wantCode(t, err, ledger.CodeInvalidArgument)
	// The valid request itself works and unicode keys are counted in characters.
	req := ok()
	req.IdempotencyKey = strings.Repeat("é", 255)
	h.beginWant(req, ledger.DecisionExecute)
}

func TestBadReportInput(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	a := h.beginWant(email("r1", "bot"), ledger.DecisionExecute)
	cases := map[string]ledger.ReportRequest{
		"missing id":       {Outcome: ledger.OutcomeSucceeded},
		"bad outcome":      {EffectID: a.EffectID, Outcome: "done"},
		"result too big":   {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(`"` + strings.Repeat("x", 64<<10) + `"`)},
		"result not json":  {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(`nope`)},
		"negative actual":  {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, ActualCostMicros: i64(-1)},
		"long vendor ref":  {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, VendorReference: strings.Repeat("p", 300)},
		"negative attempt": {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, Attempt: -1},
	}
	for name, req := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := h.eng.Report(ctx, req)
			wantCode(t, err, ledger.CodeInvalidArgument)
		})
	}
	if eff := h.get(a.EffectID); eff.State != ledger.StatePending {
		t.Fatalf("bad reports changed the effect: %s", eff.State)
	}
}

func TestRetentionPurge(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	done := h.beginWant(email("old", "bot"), ledger.DecisionExecute)
	h.report(done.EffectID, ledger.OutcomeSucceeded)
	stuck := h.beginWant(email("stuck", "bot"), ledger.DecisionExecute) // will expire
	h.clock.Advance(720*time.Hour - time.Second)
	if n, _ := h.eng.Purge(ctx); n != 0 {
		t.Fatalf("purged %d before retention", n)
	}
	h.clock.Advance(time.Second)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v", n, err)
	}
	if _, err := h.eng.Get(ctx, "", done.EffectID, ""); err == nil {
		t.Fatal("purged effect still readable")
	}
	if eff := h.get(stuck.EffectID); eff.State != ledger.StateIndeterminate {
		t.Fatalf("unresolved effect must survive retention: %+v", eff)
	}
	// A purged key is new again.
	if r := h.beginWant(email("old", "bot"), ledger.DecisionExecute); r.EffectID == done.EffectID {
		t.Fatal("purged key reused the old effect")
	}
	if _, err := h.eng.Reap(ctx); err != nil {
		t.Fatal(err)
	}
	assertStateCounts(t, h)
}

func TestRetentionPurgesExpiredApprovals(t *testing.T) {
	// An approval request nobody answered, and a grant the agent never
	// used, are gone the retention after they expired (nothing was done or
	// reserved); an answered-and-used one follows its effect.
	h := newHarness(t, testRules())
	ctx := context.Background()
	asked := h.beginWant(pay("ask", "acct_a", 150_000_000), ledger.DecisionApprovalRequired)
	granted := h.beginWant(pay("grant", "acct_b", 150_000_000), ledger.DecisionApprovalRequired)
	h.clock.Advance(time.Hour)
	if _, err := h.eng.Approve(ctx, granted.ApprovalID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	// The request expires 24h after it was made, the grant 24h after it
	// was given; retention (720h) counts from there.
	h.clock.Advance(23*time.Hour + 720*time.Hour - time.Second)
	if n, err := h.eng.Purge(ctx); n != 0 || err != nil {
		t.Fatalf("purged %d (%v) before retention ran out", n, err)
	}
	h.clock.Advance(time.Second)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v; want the unanswered request", n, err)
	}
	if _, err := h.eng.Get(ctx, "", asked.EffectID, ""); err == nil {
		t.Fatal("expired request still readable")
	}
	h.get(granted.EffectID)
	h.clock.Advance(time.Hour)
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v; want the unused grant", n, err)
	}
	if _, err := h.eng.Approve(ctx, granted.ApprovalID, "alice", ""); ledger.CodeOf(err) != ledger.CodeApprovalNotFound {
		t.Fatalf("approval of a purged effect: %v", err)
	}
	// A key whose request expired is asked again: the old approval id
	// answers "superseded" while the effect lives, and goes with it.
	again := h.beginWant(pay("ask", "acct_a", 150_000_000), ledger.DecisionApprovalRequired)
	if again.EffectID == asked.EffectID {
		t.Fatal("a purged key reused its effect")
	}
	h.clock.Advance(25 * time.Hour)
	third := h.beginWant(pay("ask", "acct_a", 150_000_000), ledger.DecisionApprovalRequired)
	if third.EffectID != again.EffectID || third.ApprovalID == again.ApprovalID {
		t.Fatalf("asked again: %+v", third)
	}
	_, err := h.eng.Approve(ctx, again.ApprovalID, "alice", "")
	wantCode(t, err, ledger.CodeInvalidStateTransition)
	h.clock.Advance(24*time.Hour + 720*time.Hour) // the third request's expiry, then the retention
	if n, err := h.eng.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("purge = %d, %v", n, err)
	}
	for _, id := range []string{again.ApprovalID, third.ApprovalID} {
		if _, err := h.eng.Approve(ctx, id, "alice", ""); ledger.CodeOf(err) != ledger.CodeApprovalNotFound {
			t.Fatalf("approval %s after its effect was purged: %v", id, err)
		}
	}
	if left := h.storedKeys("a\x00"); len(left) != 0 {
		t.Fatalf("approval index entries left after every effect was purged: %q", left)
	}
	assertStateCounts(t, h)
}

func TestListFiltersAndPages(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	for i := range 7 {
		r := ledger.BeginRequest{IdempotencyKey: "k" + itoa(int64(i)), EffectType: "task.run", RunID: "run" + itoa(int64(i%2)), AgentID: "a"}
		res := h.beginWant(r, ledger.DecisionExecute)
		if i%3 == 0 {
			h.report(res.EffectID, ledger.OutcomeSucceeded)
		}
	}
	var all []ledger.Effect
	cursor := ""
	for {
		p, err := h.eng.List(ctx, ledger.Filter{Namespace: "default", Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Effects...)
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if len(all) != 7 || all[0].IdempotencyKey != "k0" || all[6].IdempotencyKey != "k6" {
		t.Fatalf("paged %d effects", len(all))
	}
	p, _ := h.eng.List(ctx, ledger.Filter{Namespace: "default", RunID: "run0"})
	if len(p.Effects) != 4 {
		t.Fatalf("run0: %d", len(p.Effects))
	}
	p, _ = h.eng.List(ctx, ledger.Filter{Namespace: "default", State: ledger.StateSucceeded})
	if len(p.Effects) != 3 {
		t.Fatalf("succeeded: %d", len(p.Effects))
	}
	_, err := h.eng.List(ctx, ledger.Filter{State: "bogus"})
	wantCode(t, err, ledger.CodeInvalidArgument)
	_, err = h.eng.List(ctx, ledger.Filter{Cursor: "!!"})
	wantCode(t, err, ledger.CodeInvalidArgument)
}

func TestSecretFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "hmac.key")
	k1, err := ledger.LoadOrCreateSecret(path)
	if err != nil || len(k1) != 32 {
		t.Fatalf("create: %v", err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", fi.Mode().Perm())
	}
	k2, err := ledger.LoadOrCreateSecret(path)
	if err != nil || string(k1) != string(k2) {
		t.Fatal("key changed on reload")
	}
	os.Chmod(path, 0o644)
	if _, err := ledger.LoadOrCreateSecret(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
	os.Chmod(path, 0o660)
	if _, err := ledger.LoadOrCreateSecret(path); err == nil {
		t.Fatal("group-writable key accepted")
	}
	os.Chmod(path, 0o440) // a Secret mounted with fsGroup
	if _, err := ledger.LoadOrCreateSecret(path); err != nil {
		t.Fatalf("group-readable key refused: %v", err)
	}
}

func TestPurgeCleansCountersAndGroups(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	for i, cp := range []string{"acct_a", "acct_b"} {
		r := pay("c"+itoa(int64(i)), cp, 1_000_000)
		r.GroupKey = "trip"
		res := h.beginWant(r, ledger.DecisionExecute)
		h.report(res.EffectID, ledger.OutcomeSucceeded)
	}
	llm := ledger.BeginRequest{IdempotencyKey: "l1", EffectType: "llm.call", RunID: "run1", EstimatedCostMicros: i64(5)}
	h.report(h.beginWant(llm, ledger.DecisionExecute).EffectID, ledger.OutcomeSucceeded)
	before, _ := h.eng.Budgets(ctx, "")
	if len(before) != 4 { // global, two counterparties, one run
		t.Fatalf("budgets before: %+v", before)
	}
	h.clock.Advance(25 * time.Hour) // every 24h window has emptied; the run window never does
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := h.eng.Budgets(ctx, "")
	if len(after) != 1 || after[0].Name != "run-budget" || after[0].Counted != 5 {
		t.Fatalf("budgets after: %+v", after)
	}
	// Once retention takes the group's last step, the group goes too.
	h.clock.Advance(720 * time.Hour)
	if n, err := h.eng.Purge(ctx); err != nil || n != 3 {
		t.Fatalf("purged %d, %v", n, err)
	}
	_, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "trip"})
	wantCode(t, err, ledger.CodeGroupNotFound)
	assertStateCounts(t, h)
}
