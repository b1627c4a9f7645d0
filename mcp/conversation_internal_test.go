package mcp

import (
	"context"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestASessionClientThatNeverAnswersGetsTheDecisionMadeMeanwhile: a
// 2025-11-25 session client that never answers the approval page's
// elicitation holds the call for elicitWait; an operator who approved
// meanwhile is the call's answer (execute) once the wait ran out, not the
// approval_required decided before it.
func TestASessionClientThatNeverAnswersGetsTheDecisionMadeMeanwhile(t *testing.T) {
	defer func(w time.Duration) { elicitWait = w }(elicitWait)
	elicitWait = 300 * time.Millisecond
	threshold := int64(100_000_000)
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: &threshold}}})
	ctx := t.Context()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := New(eng, &Options{ConsoleURL: "https://ratchet.example.com"}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	asked := make(chan string, 1)
	c := sdk.NewClient(&sdk.Implementation{Name: "silent-host", Version: "1"}, &sdk.ClientOptions{
		Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{URL: &sdk.URLElicitationCapabilities{}}},
		ElicitationHandler: func(hctx context.Context, req *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
			asked <- req.Params.ElicitationID
			if _, err := eng.Approve(ctx, req.Params.ElicitationID, "admin:alice", ""); err != nil {
				t.Errorf("approving %s: %v", req.Params.ElicitationID, err)
			}
			select { // the user never comes back: no answer within elicitWait
			case <-hctx.Done():
			case <-time.After(10 * elicitWait):
			}
			return &sdk.ElicitResult{Action: "cancel"}, nil
		},
	})
	cs, err := c.Connect(ctx, ct, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
		"idempotency_key": "inv:silent", "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}})
	if err != nil || res.IsError {
		t.Fatalf("begin: %v %+v", err, res)
	}
	got, _ := res.StructuredContent.(map[string]any)
	if got["decision"] != "execute" {
		t.Errorf("after the wait ran out, approved meanwhile: %v, want execute", got)
	}
	select {
	case <-asked:
	default:
		t.Error("the client was not asked to open the approval's page")
	}
}
