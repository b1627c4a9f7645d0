package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratchet-mcp/ratchet/internal/enginetest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestACallAbandonedWhileItsUserIsOnThePageTakesNoLease (review rev37): a
// 2025-11-25 client over streamable HTTP (Ratchet's handler) is asked to open the approval's
// page; an operator approves there; the client then goes away (its
// connections drop, no notifications/cancelled) without answering. The
// wait running out must not begin again for it: nobody would receive the
// execute, and its lease would lapse into an indeterminate effect that an
// operator must resolve. The approval stays unused, so that the agent's
// next begin with the key gets execute.
func TestACallAbandonedWhileItsUserIsOnThePageTakesNoLease(t *testing.T) {
	defer func(w, p time.Duration) { elicitWait, pingWait = w, p }(elicitWait, pingWait)
	elicitWait, pingWait = 300*time.Millisecond, 300*time.Millisecond
	threshold := int64(100_000_000)
	eng := enginetest.Open(t, t.TempDir(), ledger.Options{Policies: []ledger.Rule{{Match: "payment.*", ApprovalThresholdMicros: &threshold}}})
	gaveUp := make(chan struct{}, 1) // the adapter logged that it does not look again
	log := slog.New(logFunc(func(r slog.Record) {
		if strings.Contains(r.Message, "not looking again") {
			gaveUp <- struct{}{}
		}
	}))
	srv := New(eng, &Options{ConsoleURL: "https://ratchet.example.com", Logger: log})
	hs := httptest.NewServer(Handler(srv, nil)) // Ratchet's: JSON answers, server requests on the standalone stream
	t.Cleanup(hs.Close)

	send := rawSession(t, hs.URL)
	ctx := t.Context()
	send(ctx, http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
		`"capabilities":{"elicitation":{"url":{}}},"clientInfo":{"name":"gone-host","version":"1"}}}`).Body.Close()
	send(ctx, http.MethodPost, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()

	clientCtx, crash := context.WithCancel(ctx) // the client process: its standalone stream and its call
	defer crash()
	standalone := send(clientCtx, http.MethodGet, "")
	defer standalone.Body.Close()
	call, _ := http.NewRequestWithContext(clientCtx, http.MethodPost, hs.URL, strings.NewReader(
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ratchet_begin_effect","arguments":`+
			`{"idempotency_key":"inv:gone","effect_type":"payment.charge","estimated_cost_micros":150000000}}}`))
	call.Header = standalone.Request.Header.Clone()
	go func() { // the call waits for its answer until the client goes
		if r, err := http.DefaultClient.Do(call); err == nil {
			r.Body.Close()
		}
	}()
	sc := bufio.NewScanner(standalone.Body)
	approval := ""
	for approval == "" && sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || !strings.Contains(line, "elicitation/create") {
			continue
		}
		var m struct {
			Params struct {
				ElicitationID string `json:"elicitationId"`
			} `json:"params"`
		}
		json.Unmarshal([]byte(line), &m)
		approval = m.Params.ElicitationID
	}
	if approval == "" {
		t.Fatalf("no elicitation/create on the standalone stream: %v", sc.Err())
	}
	if _, err := eng.Approve(ctx, approval, "admin:alice", ""); err != nil { // the user went to the page; an operator approved
		t.Fatal(err)
	}
	crash()  // the client goes away without answering or cancelling: both its connections drop
	select { // (the handler reads elicitWait and pingWait: the test restores them after it)
	case <-gaveUp:
	case <-time.After(3 * (elicitWait + pingWait)):
	}

	eff, err := eng.Get(ctx, ledger.DefaultNamespace, "", "inv:gone")
	if err != nil {
		t.Fatal(err)
	}
	if eff.State != ledger.StateApproved || eff.LeaseExpiresAt != nil {
		t.Errorf("after the call was abandoned: effect %s, attempt %d, lease until %v; want approved and unused (no begin for a call nobody hears)",
			eff.State, eff.Attempt, eff.LeaseExpiresAt)
	}
}

// logFunc is a slog.Handler calling f on each record.
type logFunc func(slog.Record)

func (f logFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (f logFunc) Handle(_ context.Context, r slog.Record) error { f(r); return nil }
func (f logFunc) WithAttrs([]slog.Attr) slog.Handler            { return f }
func (f logFunc) WithGroup(string) slog.Handler                 { return f }
