package ledger_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
	if err != nil {
		t.Fatalf("err != nil: bad input left %d effects (%v)", len(page.Effects), err)
	}
	if len(page.Effects) != 0 {
		t.Fatalf("len(page.Effects) != 0: bad input left %d effects (%v)", len(page.Effects), err)
	}
	// The longest lease allowed is what MaxLeaseSeconds says: the default
	// cap, or a policy's lower one.
	if got := h.eng.MaxLeaseSeconds("email.send", "", ""); got != 3600 {
		t.Fatalf("MaxLeaseSeconds(email.send) = %d", got)
	}
	if got := h.eng.MaxLeaseSeconds("sms.send", "", ""); got != 120 {
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
		"result not json":  {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(`nope`)},
		"negative actual":  {EffectID: a.EffectID, Outcome: ledger.OutcomeSucceeded, ActualCostMicros: i64(-1)},
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
