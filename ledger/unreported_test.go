package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// unreportedModel is what an agent's integration warning should say: the
// effects counted against it and when each lease ran out.
type unreportedModel map[string]time.Time

type warningAnswer struct {
	Count  int
	Oldest string
	Since  time.Time
}

func (m unreportedModel) want() *warningAnswer {
	if len(m) == 0 {
		return nil
	}
	w := &warningAnswer{Count: len(m)}
	for id, at := range m {
		if w.Oldest == "" || at.Before(w.Since) || at.Equal(w.Since) && id < w.Oldest {
			w.Oldest, w.Since = id, at
		}
	}
	return w
}

var probes atomic.Int64

// warning begins (and reports) a probe effect of agent and returns what its
// integration warning says.
func (h *harness) warning(agent string) *warningAnswer {
	h.t.Helper()
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("probe-%d", probes.Add(1)), EffectType: "task.run", AgentID: agent, LeaseSeconds: 3600}, ledger.DecisionExecute)
	h.report(r.EffectID, ledger.OutcomeSucceeded)
	if r.IntegrationWarning == nil {
		return nil
	}
	w := r.IntegrationWarning
	return &warningAnswer{Count: w.UnreportedCount, Oldest: w.OldestEffectID, Since: w.OldestSince}
}

func (h *harness) checkWarning(agent string, m unreportedModel, when string) {
	h.t.Helper()
	if diff := cmp.Diff(m.want(), h.warning(agent)); diff != "" {
		h.t.Errorf("%s: the integration warning (-want +got):\n%s", when, diff)
	}
}

// reapAll reaps until nothing is left to expire.
func (h *harness) reapAll() int {
	h.t.Helper()
	total := 0
	for {
		n, err := h.eng.Reap(context.Background())
		if err != nil {
			h.t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

// storedValues returns the keys under prefix with their values, as stored
// (the engine closed and reopened around it).
func (h *harness) storedValues(prefix string) map[string]string {
	h.t.Helper()
	out := map[string]string{}
	h.editStore(func(tx ledger.Txn) error {
		return tx.Scan([]byte(prefix), nil, func(k, v []byte) (bool, error) {
			out[string(k)] = string(v)
			return true, nil
		})
	})
	return out
}

// editStore runs fn in a transaction of the store itself, the engine
// closed, then reopens the engine.
func (h *harness) editStore(fn func(tx ledger.Txn) error) {
	h.t.Helper()
	if err := h.eng.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	st := h.openStore()
	err := st.Update(context.Background(), fn)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

// valueSizes is the Badger store recording the largest value written to
// each kind of key.
type valueSizes struct {
	*badgerstore.Store
	mu  sync.Mutex
	max map[string]int
}

func (s *valueSizes) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	return s.Store.Update(ctx, func(tx ledger.Txn) error { return fn(sizedTxn{tx, s}) })
}

func (s *valueSizes) largest(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max[kind]
}

type sizedTxn struct {
	ledger.Txn
	s *valueSizes
}

func (t sizedTxn) Set(k, v []byte) error {
	t.s.mu.Lock()
	t.s.max[string(k[:1])] = max(t.s.max[string(k[:1])], len(v))
	t.s.mu.Unlock()
	return t.Txn.Set(k, v)
}

// beginMany begins n effects of agent (keys prefix-0…), from 16 goroutines
// so that the writer batches them, each with a lease of lease.
func (h *harness) beginMany(prefix, agent string, n int, lease int) []string {
	h.t.Helper()
	ids := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r, err := h.eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i), EffectType: "task.run", AgentID: agent, LeaseSeconds: lease})
				if err != nil || r.Decision != ledger.DecisionExecute {
					failed.Store(fmt.Sprintf("begin %d: %+v, %v", i, r, err))
					return
				}
				ids[i] = r.EffectID
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		h.t.Fatal(f)
	}
	return ids
}

// TestAFloodOfExpiriesOfOneAgentKeepsItsRecordsSmall: an agent whose
// leases all run out unreported (a crash loop) costs each expiry and each
// begin the same however many it has: no record grows with them (the
// whole set in one record grew ~50 bytes an expiry, until it passed
// Badger's transaction limit and the reaper stopped).
func TestAFloodOfExpiriesOfOneAgentKeepsItsRecordsSmall(t *testing.T) {
	const n = 20_000
	h := newHarness(t, testRules())
	var sizes *valueSizes
	if testBackend != "postgres" {
		h.eng.Close(context.Background())
		h.wrap = func(st *badgerstore.Store) ledger.Store {
			sizes = &valueSizes{Store: st, max: map[string]int{}}
			return sizes
		}
		h.open()
		h.wrap = nil
	}
	start := h.clock.Now()
	ids := h.beginMany("crash", "looper", n, 5)
	h.clock.Advance(10 * time.Second)
	if got := h.reapAll(); got != n {
		t.Fatalf("reaped %d, want %d", got, n)
	}
	m := unreportedModel{}
	for _, id := range ids {
		m[id] = start.Add(5 * time.Second)
	}
	h.checkWarning("looper", m, "after the flood")
	const small = 256
	if sizes != nil {
		for _, kind := range []string{"u", "y"} {
			if got := sizes.largest(kind); got > small {
				t.Errorf("the largest value written to a key of kind %q is %d bytes, want at most %d", kind, got, small)
			}
		}
	}
	vals := h.storedValues("u\x00")
	if len(vals) != 1 {
		t.Fatalf("stored %d summaries, want 1", len(vals))
	}
	for k, v := range vals {
		if len(v) > small {
			t.Errorf("the summary %q is %d bytes, want at most %d", k, len(v), small)
		}
	}
	if got := len(h.storedKeys("y\x00")); got != n {
		t.Errorf("the index holds %d keys, want %d", got, n)
	}
}

// integrationCounts returns the Count of every integration_warning event
// of agent, in order.
func (h *harness) integrationCounts(agent string) []int {
	h.t.Helper()
	var counts []int
	if err := h.eng.Audit(context.Background(), time.Time{}, time.Time{}, func(r ledger.AuditRecord) error {
		if r.Event.Type == ledger.EventIntegrationWarning && r.Event.AgentID == agent {
			counts = append(counts, r.Event.Count)
		}
		return nil
	}); err != nil {
		h.t.Fatal(err)
	}
	return counts
}

func (h *harness) operatorResolve(id string, o ledger.Outcome) {
	h.t.Helper()
	if _, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: id, Resolution: o, ResolvedBy: "admin:op"}); err != nil {
		h.t.Fatal(err)
	}
}

// TestAnAgentsWarningFollowsItsExpiriesResolutionsAndLateReports: the
// count and the oldest (by when the lease ran out, then effect id) stay
// right as expiries come in out of id order, as operators clear the oldest
// and others, as the agent reports late (which clears nothing), and when an
// operator's resolve expires and clears a lapsed lease in one op.
func TestAnAgentsWarningFollowsItsExpiriesResolutionsAndLateReports(t *testing.T) {
	h := newHarness(t, testRules())
	m := unreportedModel{}
	start := h.clock.Now()
	// Leases of 50, 10, 30, 10 and 20 s: the oldest is not the first begun,
	// and two run out at once (the lower id is the older).
	leases := []int{50, 10, 30, 10, 20}
	ids := make([]string, len(leases))
	for i, l := range leases {
		r := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("w-%d", i), EffectType: "task.run", AgentID: "bot", LeaseSeconds: l}, ledger.DecisionExecute)
		ids[i] = r.EffectID
	}
	h.checkWarning("bot", m, "before any expiry")
	h.clock.Advance(25 * time.Second)
	h.reapAll()
	for _, i := range []int{1, 3, 4} {
		m[ids[i]] = start.Add(time.Duration(leases[i]) * time.Second)
	}
	h.checkWarning("bot", m, "three expired")
	h.clock.Advance(30 * time.Second)
	h.reapAll()
	for _, i := range []int{0, 2} {
		m[ids[i]] = start.Add(time.Duration(leases[i]) * time.Second)
	}
	h.checkWarning("bot", m, "all five expired")
	// The agent's late report settles w-1 but leaves its mark.
	h.report(ids[1], ledger.OutcomeSucceeded, func(r *ledger.ReportRequest) { r.Attempt = 1 })
	h.checkWarning("bot", m, "a late report")
	// The operator agrees: the oldest goes, the next (same time, higher id) is the oldest.
	h.operatorResolve(ids[1], ledger.OutcomeSucceeded)
	delete(m, ids[1])
	h.checkWarning("bot", m, "the oldest cleared")
	// One not the oldest.
	h.operatorResolve(ids[2], ledger.OutcomeFailed)
	delete(m, ids[2])
	h.checkWarning("bot", m, "a middle one cleared")
	h.operatorResolve(ids[3], ledger.OutcomeFailed)
	delete(m, ids[3])
	h.checkWarning("bot", m, "the oldest cleared again")
	// A lease that lapsed with no reap: the operator's resolve expires and
	// clears it in one op, the rest unchanged.
	lapsed := h.beginWant(ledger.BeginRequest{IdempotencyKey: "w-lapsed", EffectType: "task.run", AgentID: "bot", LeaseSeconds: 5}, ledger.DecisionExecute)
	h.clock.Advance(10 * time.Second)
	h.operatorResolve(lapsed.EffectID, ledger.OutcomeFailed)
	h.checkWarning("bot", m, "a lapsed lease resolved")
	h.operatorResolve(ids[4], ledger.OutcomeFailed)
	h.operatorResolve(ids[0], ledger.OutcomeFailed)
	h.checkWarning("bot", unreportedModel{}, "all cleared")
	if got := h.storedKeys("y\x00"); len(got) != 0 {
		t.Errorf("index keys left after every one was cleared: %q", got)
	}
	if got := h.storedKeys("u\x00"); len(got) != 0 {
		t.Errorf("summaries left after every one was cleared: %q", got)
	}
	// Each expiry's event said the count it made: 3 in one reap, 2 in
	// the next, then the lapsed one (4 counted with it).
	if diff := cmp.Diff([]int{1, 2, 3, 4, 5, 3}, h.integrationCounts("bot")); diff != "" {
		t.Errorf("integration_warning counts (-want +got):\n%s", diff)
	}
}

// TestAnOldLedgersUnreportedMapGivesTheSameAnswersAndIsConverted: a ledger
// written before the index kept an agent's whole set as a JSON map in its
// summary key. It answers as it did, and the first write converts it.
func TestAnOldLedgersUnreportedMapGivesTheSameAnswersAndIsConverted(t *testing.T) {
	for _, first := range []string{"an expiry", "a clear"} {
		t.Run(first, func(t *testing.T) {
			h := newHarness(t, testRules())
			m := unreportedModel{}
			start := h.clock.Now()
			leases := []int{40, 10, 30, 10}
			ids := make([]string, len(leases))
			for i, l := range leases {
				ids[i] = h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("o-%d", i), EffectType: "task.run", AgentID: "bot", LeaseSeconds: l}, ledger.DecisionExecute).EffectID
				m[ids[i]] = start.Add(time.Duration(l) * time.Second)
			}
			later := h.beginWant(ledger.BeginRequest{IdempotencyKey: "o-later", EffectType: "task.run", AgentID: "bot", LeaseSeconds: 3000}, ledger.DecisionExecute)
			h.clock.Advance(time.Minute)
			h.reapAll()
			// Rewrite the agent's records as an older ledger held them.
			old := map[string]map[string]time.Time{"unreported": m}
			b, err := json.Marshal(old)
			if err != nil {
				t.Fatal(err)
			}
			h.editStore(func(tx ledger.Txn) error {
				var idx [][]byte
				if err := tx.Scan([]byte("y\x00"), nil, func(k, _ []byte) (bool, error) {
					idx = append(idx, append([]byte(nil), k...))
					return true, nil
				}); err != nil {
					return err
				}
				for _, k := range idx {
					if err := tx.Delete(k); err != nil {
						return err
					}
				}
				return tx.Set([]byte("u\x00default\x00bot"), b)
			})
			if got := h.storedKeys("y\x00"); len(got) != 0 {
				t.Fatalf("the old ledger still has index keys: %q", got)
			}
			h.checkWarning("bot", m, "the old record")
			if first == "an expiry" {
				h.clock.Advance(time.Hour)
				h.reapAll()
				m[later.EffectID] = start.Add(3000 * time.Second)
				h.checkWarning("bot", m, "an expiry converted it")
			}
			h.operatorResolve(ids[1], ledger.OutcomeFailed) // the oldest
			delete(m, ids[1])
			h.checkWarning("bot", m, "the oldest cleared")
			h.operatorResolve(ids[0], ledger.OutcomeFailed)
			delete(m, ids[0])
			h.checkWarning("bot", m, "another cleared")
			vals := h.storedValues("u\x00")
			if v := vals["u\x00default\x00bot"]; strings.Contains(v, "unreported") {
				t.Errorf("the summary still holds the map: %s", v)
			}
			if got := len(h.storedKeys("y\x00")); got != len(m) {
				t.Errorf("the index holds %d keys, want %d", got, len(m))
			}
			for id := range m {
				h.operatorResolve(id, ledger.OutcomeFailed)
			}
			h.checkWarning("bot", unreportedModel{}, "all cleared")
		})
	}
}

// TestManyGoroutinesExpiringAndClearingOneAgentKeepItsCountExact: expiries
// and clears of one agent from many goroutines at once (ops the writer
// batches together, or replicas' batches on a shared store) leave the
// count and the index agreeing with what was done.
func TestManyGoroutinesExpiringAndClearingOneAgentKeepItsCountExact(t *testing.T) {
	h := newHarness(t, testRules())
	const n = 400
	start := h.clock.Now()
	ids := h.beginMany("race", "bot", n, 5)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	m := unreportedModel{}
	for _, id := range ids {
		m[id] = start.Add(5 * time.Second)
	}
	// Half cleared by operators, and the other half's warnings read, all
	// at once, while more of the agent's leases lapse and are resolved.
	more := h.beginMany("race-more", "bot", 32, 5)
	h.clock.Advance(10 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n+len(more)+1)
	for i, id := range ids {
		wg.Go(func() {
			if i%2 == 0 {
				_, err := h.eng.Resolve(context.Background(), ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeFailed, ResolvedBy: "admin:op"})
				errs <- err
				return
			}
			_, err := h.eng.Begin(context.Background(), ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("race-probe-%d", i), EffectType: "task.run", AgentID: "bot", LeaseSeconds: 3600})
			errs <- err
		})
	}
	for _, id := range more {
		wg.Go(func() {
			_, err := h.eng.Report(context.Background(), ledger.ReportRequest{EffectID: id, Outcome: ledger.OutcomeSucceeded})
			errs <- err
		})
	}
	wg.Go(func() {
		_, err := h.eng.Reap(context.Background())
		errs <- err
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, id := range ids {
		if i%2 == 0 {
			delete(m, id)
		}
	}
	for _, id := range more { // reported late: counted, whether reaped or expired by the report
		m[id] = start.Add(15 * time.Second)
	}
	h.checkWarning("bot", m, "after the race")
	if got := len(h.storedKeys("y\x00")); got != len(m) {
		t.Errorf("the index holds %d keys, want %d", got, len(m))
	}
}

// Fleet: 3 replicas on one PostgreSQL ledger expire, clear and count one
// agent's unreported expiries at once (reaps, operators' resolves of
// lapsed leases, the agent's late reports): the count and the index agree
// with what was done, whichever replica did what first.
func TestAFleetKeepsOneAgentsUnreportedCountExact(t *testing.T) {
	if testBackend != "postgres" {
		t.Skip("a fleet shares the PostgreSQL backend: the suite's PostgreSQL run has this test")
	}
	h := newHarness(t, testRules())
	var engines []*ledger.Engine
	for range 3 {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			t.Fatal(err)
		}
		e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1,
			Route: func(ledger.Event) []string { return []string{"test-sink"} }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close(context.Background()) })
		engines = append(engines, e)
	}
	const n = 240
	start := h.clock.Now()
	ids := h.beginMany("fleet", "bot", n, 5)
	h.clock.Advance(10 * time.Second)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n+3)
	for i, id := range ids {
		wg.Go(func() {
			e := engines[i%3]
			var err error
			if i%2 == 0 {
				_, err = e.Resolve(ctx, ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeFailed, ResolvedBy: "admin:op"})
			} else {
				_, err = e.Report(ctx, ledger.ReportRequest{EffectID: id, Outcome: ledger.OutcomeSucceeded})
			}
			errs <- err
		})
	}
	for _, e := range engines {
		wg.Go(func() {
			_, err := e.Reap(ctx)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	m := unreportedModel{}
	for i, id := range ids {
		if i%2 == 1 {
			m[id] = start.Add(5 * time.Second)
		}
	}
	h.checkWarning("bot", m, "after the fleet")
	if got := len(h.storedKeys("y\x00")); got != len(m) {
		t.Errorf("the index holds %d keys, want %d", got, len(m))
	}
}
