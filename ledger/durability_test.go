package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// scenario is a walk through most of the state machine. Each step returns
// an observation with effect ids replaced by their order of appearance, so
// two runs can be compared.
func scenario() []func(h *harness, ids *idMap) string {
	ctx := context.Background()
	var approval string
	obs := func(ids *idMap, r *ledger.BeginResult) string {
		return fmt.Sprintf("%s %s a%d %s %s", r.Decision, ids.name(r.EffectID), r.Attempt, r.State, r.Reason)
	}
	eff := func(ids *idMap, e *ledger.Effect, err error) string {
		if err != nil {
			return "error " + string(ledger.CodeOf(err))
		}
		return fmt.Sprintf("%s %s a%d %s", ids.name(e.EffectID), e.State, e.Attempt, e.Reason)
	}
	return []func(h *harness, ids *idMap) string{
		func(h *harness, ids *idMap) string { return obs(ids, h.begin(pay("s:1", "acct_1", 60_000_000))) },
		func(h *harness, ids *idMap) string { return obs(ids, h.begin(pay("s:1", "acct_1", 60_000_000))) },
		func(h *harness, ids *idMap) string {
			e, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: ids.id(0), Outcome: ledger.OutcomeFailed})
			return eff(ids, e, err)
		},
		func(h *harness, ids *idMap) string { return obs(ids, h.begin(pay("s:1", "acct_1", 60_000_000))) },
		func(h *harness, ids *idMap) string {
			e, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: ids.id(0), Outcome: ledger.OutcomeSucceeded, Result: json.RawMessage(`{"id":"pi_1"}`)})
			return eff(ids, e, err)
		},
		func(h *harness, ids *idMap) string {
			r := h.begin(pay("s:1", "acct_1", 60_000_000))
			return obs(ids, r) + " " + string(r.Result)
		},
		func(h *harness, ids *idMap) string {
			r := h.begin(pay("s:big", "acct_2", 150_000_000))
			approval = r.ApprovalID
			return obs(ids, r)
		},
		func(h *harness, ids *idMap) string {
			a, err := h.eng.Approve(ctx, approval, "alice", "fine")
			if err != nil {
				return err.Error()
			}
			return a.State + " " + a.DecidedBy
		},
		func(h *harness, ids *idMap) string { return obs(ids, h.begin(pay("s:big", "acct_2", 150_000_000))) },
		func(h *harness, ids *idMap) string { h.clock.Advance(2 * time.Minute); return "tick" },
		func(h *harness, ids *idMap) string {
			n, err := h.eng.Reap(ctx)
			return fmt.Sprint("reaped ", n, err)
		},
		func(h *harness, ids *idMap) string { return obs(ids, h.begin(pay("s:big", "acct_2", 150_000_000))) },
		func(h *harness, ids *idMap) string {
			e, err := h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: ids.id(1), Resolution: ledger.OutcomeSucceeded, ResolvedBy: "bob"})
			return eff(ids, e, err)
		},
		func(h *harness, ids *idMap) string {
			r := step("g:1", "hotel.book", &ledger.Compensation{EffectType: "hotel.cancel"})
			return obs(ids, h.begin(r))
		},
		func(h *harness, ids *idMap) string {
			e, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: ids.id(2), Outcome: ledger.OutcomeSucceeded})
			return eff(ids, e, err)
		},
		func(h *harness, ids *idMap) string {
			u, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1"})
			if err != nil {
				return err.Error()
			}
			// The undo key is derived from the effect id, which differs
			// between the two ledgers.
			return fmt.Sprintf("%s %d %v", u.State, len(u.Compensations), strings.HasPrefix(u.Compensations[0].IdempotencyKey, "undo:"))
		},
		func(h *harness, ids *idMap) string {
			u, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1"})
			if err != nil {
				return err.Error()
			}
			r := step(u.Compensations[0].IdempotencyKey, "hotel.cancel", nil)
			r.CompensatesEffectID = ids.id(2)
			return obs(ids, h.begin(r))
		},
		func(h *harness, ids *idMap) string {
			e, err := h.eng.Report(ctx, ledger.ReportRequest{EffectID: ids.id(3), Outcome: ledger.OutcomeSucceeded})
			return eff(ids, e, err)
		},
		func(h *harness, ids *idMap) string {
			u, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "booking:trip_1"})
			if err != nil {
				return err.Error()
			}
			return u.State
		},
		func(h *harness, ids *idMap) string { return obs(ids, h.begin(step("g:2", "spa.book", nil))) },
	}
}

type idMap struct{ order []string }

func (m *idMap) name(id string) string {
	if id == "" {
		return "-"
	}
	for i, o := range m.order {
		if o == id {
			return fmt.Sprint("E", i)
		}
	}
	m.order = append(m.order, id)
	return fmt.Sprint("E", len(m.order)-1)
}

func (m *idMap) id(i int) string { return m.order[i] }

// snapshot is everything an operator can see, with ids normalised.
func snapshot(t *testing.T, h *harness, ids *idMap) string {
	t.Helper()
	ctx := context.Background()
	page, err := h.eng.List(ctx, ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, e := range page.Effects {
		fmt.Fprintf(&b, "%s %s %s a%d %s %s %v %v %s|", ids.name(e.EffectID), e.IdempotencyKey, e.State, e.Attempt,
			e.Reason, e.VendorReference, e.UpdatedAt.UnixNano(), e.Fingerprint, e.Result)
	}
	budgets, _ := h.eng.Budgets(ctx, "")
	fmt.Fprintf(&b, "%+v|", budgets)
	approvals, _ := h.eng.ListApprovals(ctx, "", "")
	for _, a := range approvals {
		fmt.Fprintf(&b, "%s %s %s|", a.State, a.DecidedBy, a.Note)
	}
	return b.String()
}

func TestReopenBetweenEveryStep(t *testing.T) {
	steady := newHarness(t, testRules())
	reopened := newHarnessWithSecret(t, testRules(), steady.secret)
	var a, b idMap
	steps := scenario() // each run gets its own steps: they keep state
	for i, st := range scenario() {
		want := steps[i](steady, &a)
		before := snapshot(t, reopened, &b)
		reopened.reopen()
		if after := snapshot(t, reopened, &b); after != before {
			t.Fatalf("step %d: reopening changed the ledger:\n%s\n%s", i, before, after)
		}
		got := st(reopened, &b)
		if got != want {
			t.Fatalf("step %d: got %q after reopen, want %q", i, got, want)
		}
	}
	// Across the two ledgers only the order of ids made in the same frozen
	// millisecond by different engine instances may differ, and with them
	// the undo keys derived from them.
	undoKey := regexp.MustCompile(`undo:[0-9a-f]{32}`)
	sorted := func(s string) string {
		l := strings.Split(undoKey.ReplaceAllString(s, "undo:<derived>"), "|")
		sort.Strings(l)
		return strings.Join(l, "|")
	}
	if sa, sb := sorted(snapshot(t, steady, &a)), sorted(snapshot(t, reopened, &b)); sa != sb {
		t.Fatalf("final states differ:\n%s\n%s", sa, sb)
	}
}

const (
	payloadMarker = "PAYLOAD-MARKER-7f3a"
	dimMarker     = "DIMENSION-MARKER-91bc"
	resultMarker  = "RESULT-MARKER-c04e"
	compMarker    = "COMPENSATION-MARKER-5d21"
)

func privacyScenario(t *testing.T, h *harness) {
	t.Helper()
	ctx := context.Background()
	for i := range 20 {
		req := pay(fmt.Sprint("priv:", i), dimMarker+fmt.Sprint(i%3), 1_000_000)
		req.Payload = json.RawMessage(fmt.Sprintf(`{"note":%q,"n":%d}`, payloadMarker, i))
		req.GroupKey = "priv-group"
		req.Compensation = &ledger.Compensation{EffectType: "payment.refund", Payload: json.RawMessage(`{"why":"` + compMarker + `"}`)}
		res := h.beginWant(req, ledger.DecisionExecute)
		h.report(res.EffectID, ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) {
			r.Result = json.RawMessage(`{"r":"` + resultMarker + `"}`)
		})
	}
	if _, err := h.eng.Unwind(ctx, ledger.UnwindRequest{GroupKey: "priv-group"}); err != nil {
		t.Fatal(err)
	}
	// Conflicting and invalid begins carrying the markers must not leak either.
	bad := pay("priv:0", dimMarker, 1)
	bad.Payload = json.RawMessage(`{"other":"` + payloadMarker + `"}`)
	h.eng.Begin(ctx, bad)
}

// scanStored fails if what the backend stores contains one of the markers.
func scanStored(t *testing.T, h *harness, markers ...string) {
	t.Helper()
	all := h.stored(t)
	if len(all) == 0 {
		t.Fatal("nothing stored: the scan would prove nothing")
	}
	for _, m := range markers {
		if bytes.Contains(all, []byte(m)) {
			t.Errorf("the stored ledger contains %q", m)
		}
	}
}

func TestPrivacyOfDataDir(t *testing.T) {
	h := newHarness(t, testRules())
	var logs bytes.Buffer
	h.logTo(&logs)
	privacyScenario(t, h)
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	scanStored(t, h, payloadMarker, dimMarker)
	if bytes.Contains(logs.Bytes(), []byte(payloadMarker)) {
		t.Fatalf("bytes.Contains(logs.Bytes(), []byte(payloadMarker)): logs leak a marker or are empty:\n%s", logs.String())
	}
	if bytes.Contains(logs.Bytes(), []byte(dimMarker)) {
		t.Fatalf("bytes.Contains(logs.Bytes(), []byte(dimMarker)): logs leak a marker or are empty:\n%s", logs.String())
	}
	if logs.Len() == 0 {
		t.Fatalf("logs.Len() == 0: logs leak a marker or are empty:\n%s", logs.String())
	}
	// The test can fail: results are stored as given without encryption.
	if !bytes.Contains(h.stored(t), []byte(resultMarker)) {
		t.Fatal("result marker not found unencrypted: the scan would not see a leak")
	}
}

func TestPrivacyWithEncryptionAtRest(t *testing.T) {
	if testBackend == "postgres" {
		t.Skip("encryption at rest is Badger's; on PostgreSQL it is the database's")
	}
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	h.dir = t.TempDir()
	h.opts.EncryptionKey = bytes.Repeat([]byte{7}, 32)
	h.open()
	privacyScenario(t, h)
	h.reopen()
	eff, err := h.eng.Get(context.Background(), "default", "", "priv:1")
	if err != nil {
		t.Fatalf("err != nil: encrypted ledger after reopen: %+v, %v", eff, err)
	}
	if eff.State != ledger.StateSucceeded {
		t.Fatalf("eff.State != ledger.StateSucceeded: encrypted ledger after reopen: %+v, %v", eff, err)
	}
	if !bytes.Contains(eff.Result, []byte(resultMarker)) {
		t.Fatalf("!bytes.Contains(eff.Result, []byte(resultMarker)): encrypted ledger after reopen: %+v, %v", eff, err)
	}
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	scanStored(t, h, payloadMarker, dimMarker, resultMarker, compMarker)
}

func (h *harness) logTo(w *bytes.Buffer) {
	h.t.Helper()
	if err := h.eng.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.logger = slog.New(slog.NewJSONHandler(w, nil))
	h.open()
}

func TestDifferentSecretIsRefused(t *testing.T) {
	// A ledger opened with another secret (a replica given the wrong one, a
	// restore next to a new key file) would take every retry for a new
	// action: New refuses it, and the right secret still opens it.
	h := newHarness(t, nil)
	first := h.beginWant(ledger.BeginRequest{IdempotencyKey: "s:1", EffectType: "email.send"}, ledger.DecisionExecute)
	if err := h.eng.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng = nil
	st := h.openStore()
	wrong := bytes.Repeat([]byte{7}, 32)
	eng, err := ledger.New(ledger.Options{Store: st, Secret: wrong, ReapInterval: -1, PurgeInterval: -1})
	if !errors.Is(err, ledger.ErrSecretMismatch) {
		t.Fatalf("!errors.Is(err, ledger.ErrSecretMismatch): New with another secret: %v", err)
	}
	if eng != nil {
		t.Fatalf("eng != nil: New with another secret: %v", err)
	}
	if err := st.Close(); err != nil { // New left the store to its caller
		t.Fatal(err)
	}
	h.open()
	again := h.beginWant(ledger.BeginRequest{IdempotencyKey: "s:1", EffectType: "email.send"}, ledger.DecisionInFlight)
	if again.EffectID != first.EffectID {
		t.Fatalf("after reopening with the right secret: %+v", again)
	}
}
