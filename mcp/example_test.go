package mcp_test

import (
	"context"
	"fmt"
	"log"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// A Go agent reads the code of a refused tool call with ErrorOf rather
// than from the text: here a begin that leaves out the dimension a rule
// requires. The server is a real one on a fresh ledger, over the SDK's
// in-memory transport.
func ExampleErrorOf() {
	ctx := context.Background()
	eng, done, err := enginetest.Temp(ledger.Options{Policies: []ledger.Rule{{Match: "email.*", RequireDimensions: []string{"recipient"}}}})
	if err != nil {
		log.Fatal(err)
	}
	defer done()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := mcp.New(eng, nil).Connect(ctx, st, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "mail-agent", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer cs.Close()

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
		"idempotency_key": "welcome:42", "effect_type": "email.send", "agent_id": "mail-agent"}})
	if err != nil {
		log.Fatal(err) // the protocol failed; a refusal is a result
	}
	if e := mcp.ErrorOf(res); e != nil {
		fmt.Println(e.Code, e.Field)
	}
	// Output:
	// dimension_required dimensions.recipient
}
