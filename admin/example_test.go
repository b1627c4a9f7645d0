package admin_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/ratchet-mcp/ratchet/admin"
	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// An operator's program lists the approval requests waiting for a human
// and approves one through the admin API, as ratchet approvals does. The
// admin listener here is a real one on a fresh ledger, with a rule that
// asks a human about payments of $1 or more.
func ExampleClient() {
	ctx := context.Background()
	threshold := int64(1_000_000)
	eng, done, err := enginetest.Temp(ledger.Options{Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: &threshold}}})
	if err != nil {
		log.Fatal(err)
	}
	defer done()
	srv := httptest.NewServer(admin.Handler(eng, nil)) // no admins: unauthenticated, loopback only
	defer srv.Close()
	cost := int64(25_000_000)
	if _, err := eng.Begin(ctx, ledger.BeginRequest{IdempotencyKey: "order-1", EffectType: "payment.charge",
		AgentID: "checkout-bot", EstimatedCostMicros: &cost}); err != nil {
		log.Fatal(err)
	}

	c := &admin.Client{URL: srv.URL} // Token: the admin's token, when auth.admins lists one
	pending, err := c.Approvals(ctx, "pending")
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range pending {
		fmt.Printf("%s wants %s for $%d\n", a.AgentID, a.EffectType, a.EstimatedCostMicros/1_000_000)
		decided, err := c.Decide(ctx, a.ApprovalID, true, "checked the order")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(decided.State)
	}
	// Output:
	// checkout-bot wants payment.charge for $25
	// approved
}
