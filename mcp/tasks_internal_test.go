package mcp

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// TestTheTaskStoreUnderConcurrentUse (run with -race): tasks finished,
// cancelled, removed and waited on at once each end in one terminal state
// or removed, every waiter returns, and once all are removed the store
// counts no task and no byte.
func TestTheTaskStoreUnderConcurrentUse(t *testing.T) {
	ts := newTaskStore(sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil))
	owner := Identity{Namespace: "default", AgentID: "bot"}
	var tasks []*task
	for range maxTasksPerOwner {
		tk, err := ts.open(owner, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	if _, err := ts.open(owner, 0, false); err == nil {
		t.Fatalf("a task past %d for one caller was opened", maxTasksPerOwner)
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "execute: go"}}}
	var wg sync.WaitGroup
	for _, tk := range tasks {
		wg.Go(func() {
			select {
			case <-tk.done:
			case <-tk.gone:
			}
		})
		wg.Go(func() { ts.finish(tk, res) })
		wg.Go(func() { ts.cancel(owner, tk.id) })
		wg.Go(func() { ts.info(tk); ts.list(owner) })
		wg.Go(func() { ts.remove(tk) })
	}
	wg.Wait()
	for _, tk := range tasks {
		if s := tk.status; s != "completed" && s != "cancelled" && s != "working" {
			t.Errorf("task %s ended %q", tk.id, s)
		}
		ts.remove(tk)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if diff := cmp.Diff([3]int{0, 0, 0}, [3]int{len(ts.tasks), len(ts.owned), ts.bytes}); diff != "" {
		t.Errorf("tasks, owners, bytes held after removing all (-want +got):\n%s", diff)
	}
}

// TestACallersTaskBytesAreBoundedToItsShare (review rev37): once one
// caller's tasks hold its share of the store's bytes, its next task is
// refused -32600 naming the per-caller bound, and its begin too big to
// keep is not watched; another caller still gets a task.
func TestACallersTaskBytesAreBoundedToItsShare(t *testing.T) {
	ts := newTaskStore(sdk.NewServer(&sdk.Implementation{Name: "t", Version: "1"}, nil))
	owner := Identity{Namespace: "default", AgentID: "bot"}
	tk, err := ts.open(owner, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	big := ledger.BeginRequest{IdempotencyKey: "k", EffectType: "email.send", Payload: json.RawMessage(`"` + strings.Repeat("a", maxTaskBytesPerOwner) + `"`)}
	if ts.watch(tk, big, &ledger.BeginResult{ApprovalID: "apr_1", ExpiresAt: &exp}) {
		t.Errorf("a begin of %d bytes was watched, past the per-caller share of %d", len(big.Payload), maxTaskBytesPerOwner)
	}
	ts.mu.Lock()
	ts.hold(tk, maxTaskBytesPerOwner)
	ts.mu.Unlock()
	_, err = ts.open(owner, 0, false)
	if je := (*jsonrpc.Error)(nil); !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(je.Message, "per caller") {
		t.Errorf("a task past the caller's byte share: %v, want -32600 naming the per-caller bound", err)
	}
	if _, err := ts.open(Identity{Namespace: "default", AgentID: "other"}, 0, false); err != nil {
		t.Errorf("another caller's task: %v", err)
	}
}
