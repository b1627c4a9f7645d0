package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestARequestStateIsRedeemedOnce (issue 37 item 2): a requestState's id
// is redeemed once; again, it is refused with invalid_argument naming
// requestState; one past its expiry is ErrStateExpired; ids past their expiry are
// dropped by later redemptions. Both backends.
func TestARequestStateIsRedeemedOnce(t *testing.T) {
	h := newHarness(t, testRules())
	ctx := context.Background()
	exp := h.clock.Now().Add(time.Minute)
	if err := h.eng.RedeemState(ctx, "st_1", exp); err != nil {
		t.Fatalf("first redemption: %v", err)
	}
	for name, err := range map[string]error{
		"again": h.eng.RedeemState(ctx, "st_1", exp),
		"empty": h.eng.RedeemState(ctx, "", exp),
	} {
		var le *ledger.Error
		if !errors.As(err, &le) || le.Code != ledger.CodeInvalidArgument || le.Field != "requestState" {
			t.Errorf("%s: %v, want invalid_argument on requestState", name, err)
		}
	}
	if err := h.eng.RedeemState(ctx, "st_2", h.clock.Now()); !errors.Is(err, ledger.ErrStateExpired) {
		t.Errorf("expired: %v, want ErrStateExpired", err)
	}
	h.clock.Advance(2 * time.Minute)
	if err := h.eng.RedeemState(ctx, "st_3", h.clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := len(h.storedKeys("z")); n != 1 {
		t.Errorf("%d redeemed ids kept, want 1: the expired st_1 is dropped", n)
	}
}

// TestARequestStateRedeemedAtOnceOnTwoReplicasIsRedeemedOnce: 20 states,
// each redeemed at once through three engines on one PostgreSQL ledger:
// exactly one redemption of each succeeds.
func TestARequestStateRedeemedAtOnceOnTwoReplicasIsRedeemedOnce(t *testing.T) {
	h, engines := replicas(t, "any", 1000, "24h", 2)
	engines = append(engines, h.eng)
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	for i := range 20 {
		id := fmt.Sprintf("st_%d", i)
		var ok sync.WaitGroup
		var mu sync.Mutex
		won := 0
		for _, e := range engines {
			ok.Go(func() {
				if e.RedeemState(ctx, id, exp) == nil {
					mu.Lock()
					won++
					mu.Unlock()
				}
			})
		}
		ok.Wait()
		if won != 1 {
			t.Errorf("%s: redeemed %d times, want once", id, won)
		}
	}
}
