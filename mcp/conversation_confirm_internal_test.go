package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// refusalSignal is the engine, telling when it refused a begin with
// confirmation_required (the call then elicits the confirmation).
type refusalSignal struct {
	*ledger.Engine
	refused chan struct{}
}

func (e refusalSignal) Begin(ctx context.Context, in ledger.BeginRequest) (*ledger.BeginResult, error) {
	res, err := e.Engine.Begin(ctx, in)
	if le := (*ledger.Error)(nil); errors.As(err, &le) && le.Code == ledger.CodeConfirmationRequired {
		select {
		case e.refused <- struct{}{}:
		default:
		}
	}
	return res, err
}

func confirmEngine(t *testing.T) *ledger.Engine {
	return enginetest.Open(t, t.TempDir(), ledger.Options{Policies: []ledger.Rule{{Match: "gift.send", ConfirmWith: "user"}}})
}

// TestAConfirmationReachesAClientThatOpensItsStreamAfterCalling: the
// TypeScript SDK 1.x opens its standalone GET stream without waiting for
// it (after notifications/initialized) and calls a tool at once, so its
// GET may reach Ratchet after the call elicits the user's confirmation.
// The elicitation must wait for the stream, not be lost: CI once got
// confirmation_required 9 ms after the call, from a host that accepts.
// Here the client opens its stream only once the engine has refused the
// begin, so the call is eliciting by then, or about to.
func TestAConfirmationReachesAClientThatOpensItsStreamAfterCalling(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	eng := refusalSignal{confirmEngine(t), make(chan struct{}, 1)}
	hs := httptest.NewServer(Handler(New(eng, nil), nil))
	t.Cleanup(hs.Close)

	send := rawSession(t, hs.URL)
	send(ctx, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
		`"capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"late-stream-host","version":"1"}}}`).Body.Close()
	send(ctx, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()

	answered := make(chan string, 1)
	go func() {
		resp := send(ctx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ratchet_begin_effect","arguments":`+
			`{"idempotency_key":"gift:late","effect_type":"gift.send","estimated_cost_micros":20000000}}}`)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- string(b)
	}()
	select {
	case <-eng.refused:
	case <-ctx.Done():
		t.Fatal("the engine did not refuse the begin with confirmation_required")
	}

	standalone := send(ctx, http.MethodGet, "")
	defer standalone.Body.Close()
	elicit := make(chan json.RawMessage, 1)
	go func() {
		defer close(elicit)
		sc := bufio.NewScanner(standalone.Body)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(line, "elicitation/create") {
				var m struct {
					ID json.RawMessage `json:"id"`
				}
				json.Unmarshal([]byte(line), &m)
				elicit <- m.ID
				return
			}
		}
	}()
	var id json.RawMessage
	select {
	case id = <-elicit:
	case out := <-answered:
		t.Fatalf("the call answered before the client's stream carried its elicitation: %s", out)
	case <-ctx.Done():
		t.Fatal("no elicitation/create on the standalone stream")
	}
	if id == nil {
		t.Fatal("the standalone stream ended without an elicitation/create")
	}
	send(ctx, http.MethodPost, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"action":"accept","content":{"confirm":true}}}`).Body.Close()

	var out string
	select {
	case out = <-answered:
	case <-ctx.Done():
		t.Fatal("the call did not answer after the user confirmed")
	}
	var res struct {
		Result struct {
			StructuredContent map[string]any `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Result.StructuredContent["decision"] != "execute" {
		t.Errorf("the call's answer after the user confirmed: %s (%v), want decision execute", out, err)
	}
}

// TestAFailedConfirmationSaysWhyAndIsLogged: an elicitation that fails is
// still confirmation_required, but the agent and the operator are told
// which failure it was (a client that did not answer is not one that
// answered with an error or with what the form refuses), and serve logs
// it as a warning with the session, the client and the error.
func TestAFailedConfirmationSaysWhyAndIsLogged(t *testing.T) {
	defer func(w time.Duration) { elicitWait = w }(elicitWait)
	elicitWait = 300 * time.Millisecond
	var mu sync.Mutex
	var warned []string
	log := slog.New(logFunc(func(r slog.Record) {
		if r.Level < slog.LevelWarn {
			return
		}
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		mu.Lock()
		defer mu.Unlock()
		warned = append(warned, r.Message+" reason="+attrs["reason"]+" session="+attrs["session"]+" client="+attrs["client"]+" error="+attrs["error"])
	}))
	hs := httptest.NewServer(Handler(New(confirmEngine(t), &Options{Logger: log}), nil))
	t.Cleanup(hs.Close)

	for _, c := range []struct {
		name   string
		answer func(context.Context) (*sdk.ElicitResult, error)
		why    string
		logged string // in the log's error
	}{
		{"no answer", func(ctx context.Context) (*sdk.ElicitResult, error) { <-ctx.Done(); return nil, ctx.Err() },
			"the client did not answer within 300ms", "deadline exceeded"},
		{"an error", func(context.Context) (*sdk.ElicitResult, error) { return nil, errors.New("the host's form broke") },
			"the client answered with an error", "the host's form broke"},
		{"not the form", func(context.Context) (*sdk.ElicitResult, error) {
			return &sdk.ElicitResult{Action: "accept", Content: map[string]any{"confirm": "yes"}}, nil
		}, "the client's answer did not fit the form", "does not match requested schema"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			mu.Lock()
			warned = nil
			mu.Unlock()
			cl := sdk.NewClient(&sdk.Implementation{Name: "broken-host", Version: "2"}, &sdk.ClientOptions{
				Capabilities: &sdk.ClientCapabilities{Elicitation: &sdk.ElicitationCapabilities{Form: &sdk.FormElicitationCapabilities{}}},
				ElicitationHandler: func(hctx context.Context, _ *sdk.ElicitRequest) (*sdk.ElicitResult, error) {
					return c.answer(hctx)
				},
			})
			cs, err := cl.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: hs.URL}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
				"idempotency_key": "gift:" + c.name, "effect_type": "gift.send", "estimated_cost_micros": 20_000_000}})
			if err != nil {
				t.Fatal(err)
			}
			le := ErrorOf(res)
			want := &ledger.Error{Code: ledger.CodeConfirmationRequired, Message: "the user did not confirm this action (" + c.why + "): do not perform it"}
			if diff := cmp.Diff(want, le); diff != "" {
				t.Errorf("the call's error (-want +got):\n%s", diff)
			}
			mu.Lock()
			defer mu.Unlock()
			prefix := "asking the user to confirm failed; answering confirmation_required reason=" + c.why + " session=" + cs.ID() + " client=broken-host/2 error="
			if len(warned) != 1 || !strings.HasPrefix(warned[0], prefix) || !strings.Contains(warned[0], c.logged) {
				t.Errorf("warnings logged: %q; want one starting %q, its error naming %q", warned, prefix, c.logged)
			}
		})
	}
}
