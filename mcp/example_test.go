package mcp_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/mcp"
)

// A Go agent reads the code of a refused tool call with ErrorOf rather
// than from the text: here a begin that leaves out the dimension a rule
// requires. The server is a real one on a fresh ledger, over the SDK's
// in-memory transport.
func ExampleErrorOf() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ratchet-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	store, err := badgerstore.Open(filepath.Join(dir, "ledger"), nil)
	if err != nil {
		log.Fatal(err)
	}
	secret, err := ledger.LoadOrCreateSecret(filepath.Join(dir, "hmac.key"))
	if err != nil {
		log.Fatal(err)
	}
	eng, err := ledger.New(ledger.Options{Store: store, Secret: secret,
		Policies: []ledger.Rule{{Match: "email.*", RequireDimensions: []string{"recipient"}}}})
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close(ctx)
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
