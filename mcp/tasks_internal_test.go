package mcp

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
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
		tk, err := ts.open(owner, 100, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, tk)
	}
	if _, err := ts.open(owner, 100, 0, false); err == nil {
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
