package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// TestFleetOnPostgres runs three "ratchet serve" processes on one
// PostgreSQL ledger, as a fleet of sidecars would, with 30 clients spread
// over them beginning the same keys and spending against one ceiling.
func TestFleetOnPostgres(t *testing.T) {
	servers := startFleet(t, 3, "policies:\n  - match: 'fleet.*'\n    approval_threshold_micros: 100000000\n    ceilings:\n"+
		"      - {name: fleet-spend, limit_micros: 20000000, window: 24h, per: global}\n"+
		"  - match: 'wire.*'\n    approval_threshold_micros: 100000000\n")

	const keys = 40 // 40 keys of 1 unit against a ceiling of 20
	var mu sync.Mutex
	executes := map[string]int{}
	total := 0
	var wg sync.WaitGroup
	for c := range 30 {
		wg.Go(func() {
			cs, err := mcp.Connect(context.Background(), servers[c%3].mcp, "", "fleet")
			if err != nil {
				t.Error(err)
				return
			}
			defer cs.Close()
			rng := mrand.New(mrand.NewPCG(uint64(c), 9))
			for _, k := range rng.Perm(keys) {
				key := fmt.Sprint("inv:", k)
				res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
					"idempotency_key": key, "effect_type": "fleet.charge", "estimated_cost_micros": 1_000_000}})
				if err != nil || res.IsError {
					t.Errorf("begin via server %d: %v %+v", c%3, err, res)
					return
				}
				out := res.StructuredContent.(map[string]any)
				if out["decision"] != "execute" {
					continue
				}
				mu.Lock()
				executes[key]++
				total++
				mu.Unlock()
				cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "ratchet_report_effect", Arguments: map[string]any{
					"effect_id": out["effect_id"], "outcome": "succeeded"}})
			}
		})
	}
	wg.Wait()
	for key, n := range executes {
		if n != 1 {
			t.Errorf("key %s executed %d times across the fleet", key, n)
		}
	}
	if total != 20 {
		t.Errorf("%d executes against a ceiling of 20 units: want the ceiling filled exactly, never exceeded", total)
	}

	// An approval granted through process A is honoured by process B.
	a := connect(t, servers[0].mcp)
	big := map[string]any{"idempotency_key": "big", "effect_type": "wire.send", "estimated_cost_micros": 150_000_000}
	req := callTool(t, a, "ratchet_begin_effect", big)
	if req["decision"] != "approval_required" {
		t.Fatalf("big: %v", req)
	}
	if _, err := (&admin.Client{URL: servers[0].admin}).Decide(context.Background(), req["approval_id"].(string), true, "ok"); err != nil {
		t.Fatal(err)
	}
	bcs := connect(t, servers[1].mcp)
	if got := callTool(t, bcs, "ratchet_begin_effect", big); got["decision"] != "execute" {
		t.Fatalf("via B after A's approval: %v", got)
	}
	c := connect(t, servers[2].mcp)
	if got := callTool(t, c, "ratchet_begin_effect", big); got["decision"] != "in_flight" {
		t.Fatalf("via C: %v", got)
	}
}

// startFleet runs n "ratchet serve" processes on one PostgreSQL ledger in a
// schema of its own, with one HMAC key, each with its own data directory
// and config plus extra (the policies).
func startFleet(t *testing.T, n int, extra string) []*server {
	t.Helper()
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "fleet_")
	t.Setenv("RATCHET_PG_DSN", dsn)
	cfg := "ledger: {backend: postgres, dsn_env: RATCHET_PG_DSN, schema: " + schema + "}\n" +
		"secrets: {hmac_key_file: '" + filepath.Join(t.TempDir(), "hmac.key") + "'}\n" + extra
	var servers []*server
	for i := range n {
		servers = append(servers, startServe(t, filepath.Join(t.TempDir(), fmt.Sprint("data", i)), cfg))
	}
	return servers
}

// TestTwoServesReachOneQuorum: two "ratchet serve" processes on one
// PostgreSQL ledger; a payout needing two approvers is approved by alice
// through one and by bob and alice again through the other, all at once
// (her second approval counts once), and
// the agent's begins through both at once execute it once. The agent's
// token is refused on both admin APIs.
func TestTwoServesReachOneQuorum(t *testing.T) {
	servers := startFleet(t, 2, "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha("alice-tok")+"', name: alice}, {token_sha256: '"+sha("bob-tok")+"', name: bob}]\n"+
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n    approvers_required: 2\n")
	agents := []*sdk.ClientSession{connect(t, servers[0].mcp, "agent-tok"), connect(t, servers[1].mcp, "agent-tok")}
	ctx := context.Background()
	for i := range 8 {
		begin := map[string]any{"idempotency_key": fmt.Sprint("payout:", i), "effect_type": "payment.payout", "estimated_cost_micros": 150_000_000}
		asked := callTool(t, agents[i%2], "ratchet_begin_effect", begin)
		id, _ := asked["approval_id"].(string)
		if asked["decision"] != "approval_required" || id == "" {
			t.Fatalf("round %d: %v", i, asked)
		}
		if _, err := (&admin.Client{URL: servers[i%2].admin, Token: "agent-tok"}).Decide(ctx, id, true, ""); err == nil {
			t.Fatalf("round %d: the agent's token approved through the admin API", i)
		}
		var wg sync.WaitGroup
		for j, tok := range []string{"alice-tok", "bob-tok", "alice-tok"} {
			wg.Go(func() {
				if _, err := (&admin.Client{URL: servers[(i+j)%2].admin, Token: tok}).Decide(ctx, id, true, ""); err != nil {
					t.Errorf("round %d: approve with %s: %v", i, tok, err)
				}
			})
		}
		wg.Wait()
		var mu sync.Mutex
		decisions := map[any]int{}
		for j := range 4 {
			wg.Go(func() {
				res, err := agents[j%2].CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: begin})
				if err != nil || res.IsError {
					t.Errorf("round %d: begin: %v %+v", i, err, res)
					return
				}
				mu.Lock()
				decisions[res.StructuredContent.(map[string]any)["decision"]]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if diff := cmp.Diff(map[any]int{"execute": 1, "in_flight": 3}, decisions); diff != "" {
			t.Errorf("round %d: the agent's four begins through both (-want +got):\n%s", i, diff)
		}
	}
}
