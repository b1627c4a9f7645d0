package ledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// Attacks on the unreported layout (summary plus index keys): each runs on
// the backend the suite runs on, and the racing ones, on PostgreSQL, from 3
// replicas of one ledger.

// replicas returns the engine of h on Badger, and 3 more engines on h's
// PostgreSQL ledger on PostgreSQL.
func (h *harness) replicas() []*ledger.Engine {
	h.t.Helper()
	if testBackend != "postgres" {
		return []*ledger.Engine{h.eng}
	}
	var engines []*ledger.Engine
	for range 3 {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			h.t.Fatal(err)
		}
		e, err := ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock, ReapInterval: -1, PurgeInterval: -1,
			Route: func(ledger.Event) []string { return []string{"test-sink"} }})
		if err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(func() { e.Close(context.Background()) })
		engines = append(engines, e)
	}
	return engines
}

// toOldMap rewrites agent's records as a ledger before 2026-12-04 held
// them: the whole set m as a JSON map in its summary, no index keys.
func (h *harness) toOldMap(agent string, m unreportedModel) {
	h.t.Helper()
	b, err := json.Marshal(map[string]map[string]time.Time{"unreported": m})
	if err != nil {
		h.t.Fatal(err)
	}
	h.editStore(func(tx ledger.Txn) error {
		var idx [][]byte
		p := []byte("y\x00default\x00" + agent + "\x00")
		if err := tx.Scan(p, nil, func(k, _ []byte) (bool, error) {
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
		return tx.Set([]byte("u\x00default\x00"+agent), b)
	})
}

// TestAnOldMapConvertedWhileReplicasClearExpireAndReportStaysExact: an
// old ledger's map is converted by whichever write comes first, while
// others (operators clearing the map's effects, oldest first among them,
// reapers expiring new ones, late reports of those) race it: in one
// writer's batches on Badger, from 3 replicas on PostgreSQL.
func TestAnOldMapConvertedWhileReplicasClearExpireAndReportStaysExact(t *testing.T) {
	h := newHarness(t, testRules())
	const n = 90
	start := h.clock.Now()
	ids := h.beginMany("old", "bot", n, 5)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	m := unreportedModel{}
	for _, id := range ids {
		m[id] = start.Add(5 * time.Second)
	}
	h.toOldMap("bot", m)
	h.checkWarning("bot", m, "the old map")
	engines := h.replicas()
	start2 := h.clock.Now()
	more := h.beginMany("new", "bot", 30, 5)
	h.clock.Advance(10 * time.Second)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n+len(more)+len(engines))
	for i, id := range ids {
		if i%3 == 2 {
			continue
		}
		wg.Go(func() {
			_, err := engines[i%len(engines)].Resolve(ctx, ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeFailed, ResolvedBy: "admin:op"})
			errs <- err
		})
	}
	for i, id := range more {
		wg.Go(func() {
			_, err := engines[i%len(engines)].Report(ctx, ledger.ReportRequest{EffectID: id, Outcome: ledger.OutcomeSucceeded})
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
	for i, id := range ids {
		if i%3 != 2 {
			delete(m, id)
		}
	}
	for _, id := range more {
		m[id] = start2.Add(5 * time.Second)
	}
	h.checkWarning("bot", m, "after the race")
	if got := len(h.storedKeys("y\x00")); got != len(m) {
		t.Errorf("the index holds %d keys, want %d", got, len(m))
	}
	if v := h.storedValues("u\x00")["u\x00default\x00bot"]; strings.Contains(v, "unreported") {
		t.Errorf("the summary still holds the map: %s", v)
	}
	late := map[string]bool{}
	for _, id := range more {
		late[id] = true
	}
	for id := range m {
		o := ledger.OutcomeFailed
		if late[id] { // the operator agrees with the agent's late report
			o = ledger.OutcomeSucceeded
		}
		h.operatorResolve(id, o)
	}
	h.checkWarning("bot", unreportedModel{}, "all cleared")
	if got := h.storedKeys("y\x00"); len(got) != 0 {
		t.Errorf("index keys left after every one was cleared: %q", got)
	}
}

// TestAResolveRacingALateReportOfTheSameEffectClearsItOnce: an operator's
// resolve and the agent's late report of the same effect, at once (from
// different replicas on PostgreSQL), and a second resolve after: the
// effect is cleared once, whichever lands first, and never counted again.
func TestAResolveRacingALateReportOfTheSameEffectClearsItOnce(t *testing.T) {
	h := newHarness(t, testRules())
	engines := h.replicas()
	const n = 60
	start := h.clock.Now()
	ids := h.beginMany("rr", "bot", n, 5)
	keep := h.beginMany("rr-keep", "bot", 3, 7)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, id := range ids {
		wg.Go(func() {
			_, err := engines[i%len(engines)].Resolve(ctx, ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:op"})
			errs <- err
		})
		wg.Go(func() {
			// Either order is the agent's right: its error, if any, is not the point.
			engines[(i+1)%len(engines)].Report(ctx, ledger.ReportRequest{EffectID: id, Outcome: ledger.OutcomeSucceeded, Attempt: 1})
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
	for _, id := range keep {
		m[id] = start.Add(7 * time.Second)
	}
	h.checkWarning("bot", m, "after the race")
	// Cleared twice: the second resolve changes nothing.
	for _, id := range ids[:5] {
		h.eng.Resolve(ctx, ledger.ResolveRequest{EffectID: id, Resolution: ledger.OutcomeSucceeded, ResolvedBy: "admin:op"})
	}
	h.checkWarning("bot", m, "resolved again")
	if got := len(h.storedKeys("y\x00")); got != len(m) {
		t.Errorf("the index holds %d keys, want %d", got, len(m))
	}
}

// TestAgentIDsThatPrefixOrSortAroundEachOtherKeepTheirOwnCounts: agents
// whose ids are prefixes of one another, differ only past a space, or are
// the longest allowed and not ASCII keep separate counts and oldests as
// each one's oldest is cleared (a scan for the next oldest must not cross
// into a neighbour's keys).
func TestAgentIDsThatPrefixOrSortAroundEachOtherKeepTheirOwnCounts(t *testing.T) {
	h := newHarness(t, testRules())
	long := strings.Repeat("é", ledger.MaxIDLen/2)
	agents := []string{"b", "b b", "bb", "b-", "bé", long, long[:len(long)-2] + "e"}
	start := h.clock.Now()
	models := map[string]unreportedModel{}
	ids := map[string][]string{}
	for ai, a := range agents {
		models[a] = unreportedModel{}
		// Each agent's leases interleave with the others' in time.
		for j := range 3 {
			lease := 10 + 3*j + ai%3
			r := h.beginWant(ledger.BeginRequest{IdempotencyKey: fmt.Sprintf("p-%d-%d", ai, j), EffectType: "task.run", AgentID: a, LeaseSeconds: lease}, ledger.DecisionExecute)
			ids[a] = append(ids[a], r.EffectID)
			models[a][r.EffectID] = start.Add(time.Duration(lease) * time.Second)
		}
	}
	h.clock.Advance(time.Minute)
	h.reapAll()
	for _, a := range agents {
		h.checkWarning(a, models[a], "expired: "+a)
	}
	// Clear each agent's oldest, then the next, checking every agent each time.
	for round := range 2 {
		for _, a := range agents {
			w := models[a].want()
			h.operatorResolve(w.Oldest, ledger.OutcomeFailed)
			delete(models[a], w.Oldest)
			for _, b := range agents {
				h.checkWarning(b, models[b], fmt.Sprintf("round %d, %q's oldest cleared: %q", round, a, b))
			}
		}
	}
	if got := len(h.storedKeys("y\x00")); got != len(agents) {
		t.Errorf("the index holds %d keys, want %d", got, len(agents))
	}
}

// TestAnEffectReattemptedAfterALateFailedReportIsCountedOnceAgainstItsLatestAgent:
// an effect whose lease ran out, reported failed late, begun again (by
// the same agent, then by another) and whose lease runs out again each
// time is counted once, against the agent of the attempt that expired
// last, at that expiry; the others' counts drop, and one resolve clears it.
func TestAnEffectReattemptedAfterALateFailedReportIsCountedOnceAgainstItsLatestAgent(t *testing.T) {
	h := newHarness(t, testRules())
	other := h.beginWant(ledger.BeginRequest{IdempotencyKey: "ra-other", EffectType: "task.run", AgentID: "alice", LeaseSeconds: 3}, ledger.DecisionExecute)
	start := h.clock.Now()
	r := h.beginWant(ledger.BeginRequest{IdempotencyKey: "ra", EffectType: "task.run", AgentID: "alice", LeaseSeconds: 5}, ledger.DecisionExecute)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	alice := unreportedModel{other.EffectID: start.Add(3 * time.Second), r.EffectID: start.Add(5 * time.Second)}
	bob := unreportedModel{}
	h.checkWarning("alice", alice, "first expiry")
	for i, agent := range []string{"alice", "bob"} {
		h.report(r.EffectID, ledger.OutcomeFailed, func(q *ledger.ReportRequest) { q.Attempt = i + 1 })
		again := h.beginWant(ledger.BeginRequest{IdempotencyKey: "ra", EffectType: "task.run", AgentID: agent, LeaseSeconds: 5}, ledger.DecisionExecute)
		if again.EffectID != r.EffectID || again.Attempt != i+2 {
			t.Fatalf("the re-attempt is %s attempt %d, want %s attempt %d", again.EffectID, again.Attempt, r.EffectID, i+2)
		}
		at := h.clock.Now().Add(5 * time.Second)
		h.clock.Advance(10 * time.Second)
		h.reapAll()
		delete(alice, r.EffectID)
		if agent == "alice" {
			alice[r.EffectID] = at
		} else {
			bob[r.EffectID] = at
		}
		h.checkWarning("alice", alice, fmt.Sprintf("attempt %d by %s expired: alice", i+2, agent))
		h.checkWarning("bob", bob, fmt.Sprintf("attempt %d by %s expired: bob", i+2, agent))
	}
	h.report(r.EffectID, ledger.OutcomeFailed, func(q *ledger.ReportRequest) { q.Attempt = 3 })
	h.operatorResolve(r.EffectID, ledger.OutcomeFailed)
	delete(bob, r.EffectID)
	h.checkWarning("alice", alice, "resolved: alice")
	h.checkWarning("bob", bob, "resolved: bob")
	if got := len(h.storedKeys("y\x00")); got != len(alice) {
		t.Errorf("the index holds %d keys, want %d", got, len(alice))
	}
}

// TestAPurgeKeepsAnEffectStillCountedAsUnreported: an effect reported late
// (settled, but still counted) outlives retention until an operator clears
// it: a purge neither drops its record nor its count, so the warning never
// names an effect that is gone; once cleared, it is purged like any other.
func TestAPurgeKeepsAnEffectStillCountedAsUnreported(t *testing.T) {
	h := newHarness(t, testRules())
	h.eng.Close(context.Background())
	h.defs.Retention = time.Minute
	h.open()
	ctx := context.Background()
	start := h.clock.Now()
	ids := h.beginMany("pg", "bot", 3, 5)
	h.clock.Advance(10 * time.Second)
	h.reapAll()
	for _, id := range ids {
		h.report(id, ledger.OutcomeSucceeded, func(q *ledger.ReportRequest) { q.Attempt = 1 })
	}
	m := unreportedModel{}
	for _, id := range ids {
		m[id] = start.Add(5 * time.Second)
	}
	h.clock.Advance(time.Hour)
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	h.checkWarning("bot", m, "after a purge")
	w := m.want()
	if got := h.get(w.Oldest); got == nil || got.State != ledger.StateSucceeded {
		t.Fatalf("the oldest counted effect after a purge: %+v", got)
	}
	h.operatorResolve(w.Oldest, ledger.OutcomeSucceeded)
	delete(m, w.Oldest)
	h.clock.Advance(time.Hour)
	if _, err := h.eng.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	h.checkWarning("bot", m, "the oldest cleared and purged")
	if got := len(h.storedKeys("y\x00")); got != len(m) {
		t.Errorf("the index holds %d keys, want %d", got, len(m))
	}
}
