package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// crashLog is what the load clients saw, across every run of the server.
type crashLog struct {
	mu       sync.Mutex
	executes map[string][]executeSeen // key → executes received
	reports  []reportSeen             // reports sent (acked or not)
	answers  int
}

type executeSeen struct {
	effectID string
	attempt  int
}

type reportSeen struct {
	effectID string
	attempt  int
	outcome  ledger.Outcome
	acked    bool
}

// pendingRe matches a non-zero count of pending effects in /metrics.
var pendingRe = regexp.MustCompile(`ratchet_effects\{state="pending"\} [1-9]`)

const (
	crashKeys    = 40
	crashCost    = 1_000_000
	crashCeiling = 25_000_000
)

// TestCrashRecovery runs load against a real "ratchet serve", kills it
// with SIGKILL at random moments, restarts it on the same data dir, and then
// checks every promise against what the clients were told. Rounds default
// to 6; RATCHET_CRASH_ROUNDS raises it for the long variant.
func TestCrashRecovery(t *testing.T) {
	rounds := 6
	if v, err := strconv.Atoi(os.Getenv("RATCHET_CRASH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d rounds", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 7))
	data := filepath.Join(t.TempDir(), "data")
	extra := "defaults: {lease_seconds: 1}\npolicies:\n  - match: 'crash.*'\n    ceilings:\n" +
		"      - {name: crash-spend, limit_micros: " + strconv.Itoa(crashCeiling) + ", window: 24h, per: global}\n"
	log := &crashLog{executes: map[string][]executeSeen{}}
	kills := 0
	for round := range rounds {
		s := startServe(t, data, extra)
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Go(func() { crashClient(ctx, s.mcp, rand.New(rand.NewPCG(seed+uint64(round*10+c), 1)), log) })
		}
		time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond)
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
		kills++
		stop()
		wg.Wait()
	}
	// A last clean run: leases of killed runs expire (1 s) and the reaper
	// writes them down. Listings already show an expired lease as
	// indeterminate, so wait on the persisted count that /metrics reports.
	s := startServe(t, data, extra)
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(s.admin + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !pendingRe.Match(b) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the reaper did not record the expired leases within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The audit chain verifies across every kill, and each execute a
	// client received is in it (the record is written with the decision).
	audited := map[string]bool{}
	for _, r := range checkAuditVerifies(t, s) {
		if r.Event.Type == ledger.EventEffectBegun && r.Event.Decision == ledger.DecisionExecute {
			audited[fmt.Sprint(r.Event.EffectID, "/", r.Event.Attempt)] = true
		}
	}
	for key, seen := range log.executes {
		for _, x := range seen {
			if !audited[fmt.Sprint(x.effectID, "/", x.attempt)] {
				t.Errorf("key %s: execute %s attempt %d has no audit record", key, x.effectID, x.attempt)
			}
		}
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	<-s.done

	effects := readLedger(t, data)
	states := map[ledger.State]int{}
	for _, e := range effects {
		states[e.State]++
	}
	t.Logf("final states: %v", states)
	checked := checkCrashInvariants(t, log, effects)
	t.Logf("crash test: %d kills survived, %d answers logged, %d effects checked", kills, log.answers, checked)
	if path := os.Getenv("RATCHET_RELIABILITY_OUT"); path != "" {
		b, _ := json.Marshal(map[string]any{"kills": kills, "answers": log.answers, "effects": checked})
		os.WriteFile(path, b, 0o644)
	}
}

// crashClient begins effects on a small key space and reports most of them,
// logging every answer it received until ctx ends or the server dies.
func crashClient(ctx context.Context, url string, rng *rand.Rand, log *crashLog) {
	cs, err := mcp.Connect(ctx, url, "", "crash")
	if err != nil {
		return
	}
	defer cs.Close()
	for ctx.Err() == nil {
		key := fmt.Sprintf("k%d", rng.IntN(crashKeys))
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
			"idempotency_key": key, "effect_type": "crash.op", "estimated_cost_micros": crashCost, "payload": map[string]any{"k": key}}})
		if err != nil {
			return // the server is gone
		}
		if res.IsError {
			continue
		}
		out := res.StructuredContent.(map[string]any)
		log.mu.Lock()
		log.answers++
		if out["decision"] == "execute" {
			log.executes[key] = append(log.executes[key], executeSeen{out["effect_id"].(string), int(out["attempt"].(float64))})
		}
		log.mu.Unlock()
		if out["decision"] != "execute" || rng.IntN(10) == 0 { // some executes are never reported
			continue
		}
		o := ledger.OutcomeSucceeded
		if rng.IntN(3) == 0 {
			o = ledger.OutcomeFailed
		}
		rep := reportSeen{effectID: out["effect_id"].(string), attempt: int(out["attempt"].(float64)), outcome: o}
		log.mu.Lock()
		i := len(log.reports)
		log.reports = append(log.reports, rep)
		log.mu.Unlock()
		r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_report_effect", Arguments: map[string]any{
			"effect_id": rep.effectID, "outcome": string(o), "attempt": rep.attempt}})
		if err != nil {
			return
		}
		if !r.IsError {
			log.mu.Lock()
			log.reports[i].acked = true
			log.answers++
			log.mu.Unlock()
		}
	}
}

// readLedger opens the data dir offline and returns every effect by key.
func readLedger(t *testing.T, data string) map[string]ledger.Effect {
	t.Helper()
	st, err := badgerstore.Open(filepath.Join(data, "ledger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(data, "hmac.key"))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: st, Secret: secret, ReapInterval: -1, PurgeInterval: -1,
		Policies: []ledger.Rule{{Match: "crash.*", Ceilings: []ledger.Ceiling{{Name: "crash-spend", LimitMicros: ptr(crashCeiling), Window: "24h", Per: "global"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close(context.Background())
	page, err := eng.List(context.Background(), ledger.Filter{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]ledger.Effect{}
	listed := map[ledger.State]int64{}
	for _, e := range page.Effects {
		out[e.IdempotencyKey] = e
		listed[e.State]++
	}
	// What is written down agrees with what is shown: every expiry was
	// recorded, none is only a lazy view.
	stored, err := eng.StateCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []ledger.State{ledger.StatePending, ledger.StateIndeterminate, ledger.StateSucceeded, ledger.StateFailed} {
		if stored[st] != listed[st] {
			t.Errorf("state %s: %d written down, %d listed", st, stored[st], listed[st])
		}
	}
	budgets, _ := eng.Budgets(context.Background(), "")
	for _, b := range budgets {
		if b.Counted > b.Limit {
			t.Errorf("ceiling %s counted %d over its limit %d", b.Name, b.Counted, b.Limit)
		}
	}
	return out
}

func ptr(v int64) *int64 { return &v }

func checkCrashInvariants(t *testing.T, log *crashLog, effects map[string]ledger.Effect) int {
	t.Helper()
	// No key got two executes for one attempt, and every execute a client
	// received is in the ledger under the same effect id.
	for key, seen := range log.executes {
		attempts := map[int]bool{}
		for _, x := range seen {
			if attempts[x.attempt] {
				t.Errorf("key %s: two executes for attempt %d", key, x.attempt)
			}
			attempts[x.attempt] = true
			e, ok := effects[key]
			if !ok || e.EffectID != x.effectID || e.Attempt < x.attempt {
				t.Errorf("key %s: client got execute %s attempt %d; ledger has %+v", key, x.effectID, x.attempt, e)
			}
		}
	}
	// Every acknowledged report is kept; a failed state always has a
	// failed report behind it.
	sentFailed := map[string]bool{}
	for _, r := range log.reports {
		if r.outcome == ledger.OutcomeFailed {
			sentFailed[fmt.Sprint(r.effectID, "/", r.attempt)] = true
		}
	}
	byID := map[string]ledger.Effect{}
	var held int64
	for _, e := range effects {
		byID[e.EffectID] = e
		switch e.State {
		case ledger.StatePending:
			t.Errorf("effect %s still pending after its lease: the reaper did not record it", e.EffectID)
		case ledger.StateFailed:
			if !sentFailed[fmt.Sprint(e.EffectID, "/", e.Attempt)] {
				t.Errorf("effect %s attempt %d is failed but nobody reported failure", e.EffectID, e.Attempt)
			}
		case ledger.StateIndeterminate:
			if e.Reason != ledger.ReasonLeaseExpired {
				t.Errorf("effect %s indeterminate for %q", e.EffectID, e.Reason)
			}
		}
		if e.State == ledger.StateSucceeded || e.State == ledger.StateIndeterminate || e.State == ledger.StatePending {
			held += crashCost
		}
	}
	for _, r := range log.reports {
		if !r.acked {
			continue
		}
		e := byID[r.effectID]
		switch {
		case e.Attempt == r.attempt && e.State != map[ledger.Outcome]ledger.State{ledger.OutcomeSucceeded: ledger.StateSucceeded, ledger.OutcomeFailed: ledger.StateFailed}[r.outcome]:
			t.Errorf("acknowledged %s report of %s attempt %d lost: ledger says %s", r.outcome, r.effectID, r.attempt, e.State)
		case e.Attempt > r.attempt && r.outcome != ledger.OutcomeFailed:
			t.Errorf("effect %s went past attempt %d although it was reported %s", r.effectID, r.attempt, r.outcome)
		}
	}
	if held > crashCeiling {
		t.Errorf("effects hold %d, over the ceiling %d", held, crashCeiling)
	}
	return len(effects)
}
