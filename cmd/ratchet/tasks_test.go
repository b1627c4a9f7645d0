package main

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rawSession is an MCP 2025-11-25 session over streamable HTTP spoken in
// raw JSON-RPC, as a tasks client would: the Go SDK has no tasks.
type rawSession struct {
	t          *testing.T
	url, token string
	session    string
	next       int
}

// rpcAnswer is one JSON-RPC answer.
type rpcAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw []byte
}

// openRaw initializes a session with capabilities (a JSON object).
func openRaw(t *testing.T, url, token, capabilities string) (*rawSession, rpcAnswer) {
	t.Helper()
	s := &rawSession{t: t, url: url, token: token}
	init := s.call("initialize", `{"protocolVersion":"2025-11-25","capabilities":`+capabilities+`,"clientInfo":{"name":"raw-tasks","version":"1"}}`)
	if init.Error != nil {
		t.Fatalf("initialize: %s", init.raw)
	}
	s.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s, init
}

// request is a POST of body in the session.
func (s *rawSession) request(body string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, s.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Authorization", "Bearer "+s.token)
	if s.session != "" {
		req.Header.Set("Mcp-Session-Id", s.session)
	}
	return req
}

func (s *rawSession) post(body string) (http.Header, []byte) {
	s.t.Helper()
	resp, err := http.DefaultClient.Do(s.request(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
		s.session = id
	}
	return resp.Header, b
}

// call sends one request and returns its answer.
func (s *rawSession) call(method, params string) rpcAnswer {
	s.t.Helper()
	s.next++
	_, b := s.post(`{"jsonrpc":"2.0","id":` + itoa(s.next) + `,"method":"` + method + `","params":` + params + `}`)
	var a rpcAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		s.t.Fatalf("%s: answer %q: %v", method, b, err)
	}
	a.raw = b
	return a
}

func itoa(n int) string { return strings.TrimSpace(string(must(json.Marshal(n)))) }

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// rawTask is a task as the answers show it.
type rawTask struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	TTL           *int64 `json:"ttl"`
	PollInterval  int64  `json:"pollInterval"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
}

func (s *rawSession) beginTask(args map[string]any, ttlMS int) rawTask {
	s.t.Helper()
	a := s.call("tools/call", `{"name":"ratchet_begin_effect","arguments":`+string(must(json.Marshal(args)))+`,"task":{"ttl":`+itoa(ttlMS)+`}}`)
	var r struct {
		Task rawTask `json:"task"`
	}
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil || r.Task.TaskID == "" {
		s.t.Fatalf("task-augmented begin: %s", a.raw)
	}
	return r.Task
}

func (s *rawSession) getTask(id string) rawTask {
	s.t.Helper()
	a := s.call("tasks/get", `{"taskId":"`+id+`"}`)
	var r rawTask
	if a.Error != nil || json.Unmarshal(a.Result, &r) != nil {
		s.t.Fatalf("tasks/get: %s", a.raw)
	}
	return r
}

// taskOutcome is what tasks/result gives: the begin's decision and message,
// or the JSON-RPC error.
func (s *rawSession) taskOutcome(id string) (decision string, answer map[string]any) {
	s.t.Helper()
	a := s.call("tasks/result", `{"taskId":"`+id+`"}`)
	if a.Error != nil {
		return "error " + itoa(a.Error.Code), map[string]any{"message": a.Error.Message}
	}
	var r struct {
		Meta       map[string]map[string]string `json:"_meta"`
		Structured map[string]any               `json:"structuredContent"`
		IsError    bool                         `json:"isError"`
	}
	if err := json.Unmarshal(a.Result, &r); err != nil {
		s.t.Fatalf("tasks/result %s: %v", a.raw, err)
	}
	if got := r.Meta["io.modelcontextprotocol/related-task"]["taskId"]; got != id {
		s.t.Errorf("tasks/result's related-task is %q, want %q", got, id)
	}
	d, _ := r.Structured["decision"].(string)
	return d, r.Structured
}

var rpcID = regexp.MustCompile(`"id":\d+`)

const tasksCaps = `{"tasks":{"list":{},"cancel":{}}}`

func bigPayment(key string) map[string]any {
	return map[string]any{"idempotency_key": key, "effect_type": "payment.charge", "estimated_cost_micros": 150_000_000}
}

// approveByAPI approves as the operator through the admin API.
func approveByAPI(t *testing.T, admin, id string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, admin+"/v1/approvals/"+id+"/approve", strings.NewReader(`{"note":"ok"}`))
	req.Header.Set("Authorization", "Bearer admin-tok")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("approve %s: %d %s", id, resp.StatusCode, b)
	}
}

// approvalInTask is the approval id a working task's status message names.
func approvalInTask(t *testing.T, tk rawTask) string {
	t.Helper()
	i := strings.Index(tk.StatusMessage, "apr_")
	if tk.Status != "working" || i < 0 {
		t.Fatalf("task %+v, want working on an approval", tk)
	}
	return strings.Fields(tk.StatusMessage[i:])[0]
}

// TestATaskAugmentedBeginCompletesWithTheOperatorsDecision (issue 37 item
// 3): a 2025-11-25 client that declares tasks sees the tasks capability
// and taskSupport on the begin tool; its task-augmented begin of a payment
// above the threshold answers a working task naming the approval and its
// page; tasks/result blocks until the operator approves through the admin
// API and then gives execute, with the task completed. On Badger, and on
// PostgreSQL with the operator approving through another serve sharing
// the ledger.
func TestATaskAugmentedBeginCompletesWithTheOperatorsDecision(t *testing.T) {
	check := func(t *testing.T, s, decider *server) {
		raw, init := openRaw(t, s.mcp, "agent-tok", tasksCaps)
		var ir struct {
			Capabilities map[string]any `json:"capabilities"`
		}
		json.Unmarshal(init.Result, &ir)
		want := map[string]any{"list": map[string]any{}, "cancel": map[string]any{}, "requests": map[string]any{"tools": map[string]any{"call": map[string]any{}}}}
		if diff := cmp.Diff(want, ir.Capabilities["tasks"]); diff != "" {
			t.Errorf("initialize's tasks capability (-want +got):\n%s", diff)
		}
		var tl struct {
			Tools []struct {
				Name      string            `json:"name"`
				Execution map[string]string `json:"execution"`
			} `json:"tools"`
		}
		json.Unmarshal(raw.call("tools/list", `{}`).Result, &tl)
		support := map[string]string{}
		for _, tool := range tl.Tools {
			support[tool.Name] = tool.Execution["taskSupport"]
		}
		if support["ratchet_begin_effect"] != "optional" || support["ratchet_report_effect"] != "" {
			t.Errorf("taskSupport by tool %v, want optional on the begin tool only", support)
		}

		tk := raw.beginTask(bigPayment("inv:task"), 3_600_000)
		apr := approvalInTask(t, tk)
		if !strings.Contains(tk.StatusMessage, "https://ratchet.example.com/approvals/"+apr) || tk.PollInterval == 0 || tk.TTL == nil {
			t.Errorf("the working task %+v should name the approval's page, a poll interval and a ttl", tk)
		}
		if got := raw.getTask(tk.TaskID); got.Status != "working" {
			t.Fatalf("tasks/get before the decision: %+v", got)
		}
		type outcome struct {
			decision string
			answer   map[string]any
		}
		waited := make(chan outcome, 1)
		go func() {
			d, a := raw.taskOutcome(tk.TaskID) // blocks until the decision
			waited <- outcome{d, a}
		}()
		time.Sleep(300 * time.Millisecond)
		select {
		case o := <-waited:
			t.Fatalf("tasks/result answered before any decision: %v", o)
		default:
		}
		approveByAPI(t, decider.admin, apr)
		select {
		case o := <-waited:
			if o.decision != "execute" {
				t.Fatalf("tasks/result after the approval: %s %v, want execute", o.decision, o.answer)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("tasks/result did not answer after the approval")
		}
		if got := raw.getTask(tk.TaskID); got.Status != "completed" || !strings.HasPrefix(got.StatusMessage, "execute: ") {
			t.Errorf("tasks/get after the decision: %+v, want completed with the execute summary", got)
		}
	}
	t.Run("badger", func(t *testing.T) {
		s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
		check(t, s, s)
	})
	t.Run("postgres", func(t *testing.T) {
		shared := sharedLedger(t, "tasks_")
		sa := startServe(t, filepath.Join(t.TempDir(), "a"), shared+conversationConfig("https://ratchet.example.com"))
		sb := startServe(t, filepath.Join(t.TempDir(), "b"), shared+conversationConfig("https://ratchet.example.com"))
		check(t, sa, sb)
	})
}

// TestABeginDecidedAtOnceIsACompletedTask: a task-augmented begin that
// needs no approval answers a task that is already completed, whose result
// is the execute; one with bad arguments is a failed task whose status
// message carries the error code; a task for another tool is refused
// -32601.
func TestABeginDecidedAtOnceIsACompletedTask(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig(""))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(map[string]any{"idempotency_key": "mail:1", "effect_type": "email.send"}, 60_000)
	if tk.Status != "completed" {
		t.Fatalf("a begin decided at once: %+v, want a completed task", tk)
	}
	if d, a := raw.taskOutcome(tk.TaskID); d != "execute" {
		t.Errorf("its result: %s %v, want execute", d, a)
	}
	bad := raw.beginTask(map[string]any{"idempotency_key": "mail:2"}, 60_000)
	if bad.Status != "failed" || !strings.HasPrefix(bad.StatusMessage, "invalid_argument: ") {
		t.Errorf("a begin refused: %+v, want a failed task saying invalid_argument", bad)
	}
	a := raw.call("tools/call", `{"name":"ratchet_list_effects","arguments":{},"task":{}}`)
	if a.Error == nil || a.Error.Code != -32601 {
		t.Errorf("a task for the list tool: %s, want error -32601", a.raw)
	}
}

// TestATaskIsOnlyItsCallersToSee: another agent's tasks/get, tasks/result
// and tasks/cancel of a task get the answer an unknown id gets (-32602,
// the same message), and its tasks/list does not show it; the task is
// still working for its owner.
func TestATaskIsOnlyItsCallersToSee(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	mine, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := mine.beginTask(bigPayment("inv:mine"), 3_600_000)
	other, _ := openRaw(t, s.mcp, "other-tok", tasksCaps)
	unknown := other.call("tasks/get", `{"taskId":"task_NOSUCHTASK"}`)
	if unknown.Error == nil || unknown.Error.Code != -32602 {
		t.Fatalf("an unknown task: %s, want -32602", unknown.raw)
	}
	for _, m := range []string{"tasks/get", "tasks/result", "tasks/cancel"} {
		a := other.call(m, `{"taskId":"`+tk.TaskID+`"}`)
		if a.Error == nil || a.Error.Code != -32602 || a.Error.Message != unknown.Error.Message {
			t.Errorf("another agent's %s: %s, want the unknown task's answer %s", m, a.raw, unknown.raw)
		}
	}
	if a := other.call("tasks/list", `{}`); strings.Contains(string(a.raw), tk.TaskID) || a.Error != nil {
		t.Errorf("another agent's tasks/list: %s, want no error and not the task", a.raw)
	}
	if a := mine.call("tasks/list", `{}`); !strings.Contains(string(a.raw), tk.TaskID) {
		t.Errorf("the owner's tasks/list: %s, want the task", a.raw)
	}
	if got := mine.getTask(tk.TaskID); got.Status != "working" {
		t.Errorf("the owner's task after the other's attempts: %+v", got)
	}
}

// TestCancellingATaskLeavesTheApprovalPending: tasks/cancel stops the
// watching (the task is cancelled, a second cancel and tasks/result are
// refused -32602), and the approval stays pending: a plain begin still
// gets approval_required, and once the operator approves, execute.
func TestCancellingATaskLeavesTheApprovalPending(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(bigPayment("inv:cancel"), 3_600_000)
	apr := approvalInTask(t, tk)
	var cancelled rawTask
	a := raw.call("tasks/cancel", `{"taskId":"`+tk.TaskID+`"}`)
	if a.Error != nil || json.Unmarshal(a.Result, &cancelled) != nil || cancelled.Status != "cancelled" {
		t.Fatalf("tasks/cancel: %s", a.raw)
	}
	if again := raw.call("tasks/cancel", `{"taskId":"`+tk.TaskID+`"}`); again.Error == nil || again.Error.Code != -32602 {
		t.Errorf("a second cancel: %s, want -32602", again.raw)
	}
	if d, _ := raw.taskOutcome(tk.TaskID); d != "error -32602" {
		t.Errorf("tasks/result of a cancelled task: %s, want error -32602", d)
	}
	cs := connect(t, s.mcp, "agent-tok")
	if got := structured(t, callResult(t, cs, bigPayment("inv:cancel"))); got["decision"] != "approval_required" || got["approval_id"] != apr {
		t.Fatalf("a plain begin after the cancel: %v, want approval_required on %s", got, apr)
	}
	approveByAPI(t, s.admin, apr)
	if got := structured(t, callResult(t, cs, bigPayment("inv:cancel"))); got["decision"] != "execute" {
		t.Errorf("a plain begin after the approval: %v, want execute", got)
	}
	if got := raw.getTask(tk.TaskID); got.Status != "cancelled" {
		t.Errorf("the cancelled task after the approval: %+v, want still cancelled", got)
	}
}

// TestATaskEndsWithTheExpiryAnswer: when the approval lapses undecided,
// the task completes with approval_required saying it lapsed, and makes
// no new approval request by itself.
func TestATaskEndsWithTheExpiryAnswer(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com")+"defaults:\n  approval_ttl: 3s\n")
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(bigPayment("inv:lapse"), 3_600_000)
	apr := approvalInTask(t, tk)
	if tk.TTL == nil || *tk.TTL > int64((3*time.Second+5*time.Minute)/time.Millisecond) {
		t.Errorf("ttl %v, want at most the approval's expiry plus five minutes", tk.TTL)
	}
	d, a := raw.taskOutcome(tk.TaskID)
	if d != "approval_required" || a["approval_id"] != apr || !strings.Contains(a["message"].(string), "lapsed") {
		t.Fatalf("the task's answer at the expiry: %s %v, want approval_required saying %s lapsed", d, a, apr)
	}
	code, out, errs := cli(t, "admin-tok", nil, "approvals", "list", "--state", "all", "-o", "json", "--admin", s.admin)
	if code != 0 || strings.Count(out, `"approval_id"`) != 1 {
		t.Errorf("approvals after the expiry (%d %s): %s, want the one request only", code, errs, out)
	}
}

// TestClientsWithoutTasksSeeTodaysAnswers: a client that declares no tasks
// gets no tasks capability and no execution on any tool, and its
// tools/call carrying params.task gets the same bytes as without it;
// tasks/get is refused -32601 to it.
func TestClientsWithoutTasksSeeTodaysAnswers(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, init := openRaw(t, s.mcp, "agent-tok", `{}`)
	if strings.Contains(string(init.raw), "tasks") {
		t.Errorf("initialize of a client without tasks: %s", init.raw)
	}
	if tl := raw.call("tools/list", `{}`); strings.Contains(string(tl.raw), "execution") || tl.Error != nil {
		t.Errorf("tools/list of a client without tasks mentions execution: %s", tl.raw)
	}
	raw.call("tools/call", `{"name":"ratchet_begin_effect","arguments":{"idempotency_key":"mail:1","effect_type":"email.send"}}`)
	norm := func(b []byte) string { return rpcID.ReplaceAllString(string(b), `"id":0`) }
	for _, call := range []string{
		`"name":"ratchet_begin_effect","arguments":{"idempotency_key":"mail:2"}`, // refused: no effect_type
		`"name":"ratchet_list_effects","arguments":{}`,
	} {
		plain := raw.call("tools/call", `{`+call+`}`)
		withTask := raw.call("tools/call", `{`+call+`,"task":{"ttl":1000}}`)
		if diff := cmp.Diff(norm(plain.raw), norm(withTask.raw)); diff != "" || plain.Error != nil {
			t.Errorf("params.task from a client without tasks changed the answer (-without +with):\n%s", diff)
		}
	}
	if a := raw.call("tasks/get", `{"taskId":"x"}`); a.Error == nil || a.Error.Code != -32601 {
		t.Errorf("tasks/get of a client without tasks: %s, want -32601", a.raw)
	}
}

// TestARestartForgetsTasksNotDecisions: tasks are held in the serve's
// memory. A tasks/result waiting when SIGTERM comes answers -32603 at once
// and the serve exits without waiting out its grace. After a restart the task is not found (-32602), the operator's
// approval made meanwhile stands, and the client's fallback, beginning
// again with the same key as a task, gets a task completed at once with
// execute.
func TestARestartForgetsTasksNotDecisions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := startServe(t, dir, conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(bigPayment("inv:restart"), 3_600_000)
	apr := approvalInTask(t, tk)
	waiting := make(chan string, 1)
	go func() { d, _ := raw.taskOutcome(tk.TaskID); waiting <- d }()
	time.Sleep(200 * time.Millisecond) // tasks/result is blocked on the task
	stop := time.Now()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil || time.Since(stop) > 10*time.Second {
			t.Errorf("shutdown with a tasks/result waiting: %v after %v, want exit 0 well within the 20 s grace", err, time.Since(stop))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not exit within 30 s of SIGTERM with a tasks/result waiting")
	}
	select {
	case d := <-waiting:
		if d != "error -32603" {
			t.Errorf("the waiting tasks/result at shutdown: %s, want error -32603", d)
		}
	case <-time.After(5 * time.Second): // its connection broke unanswered (the goroutine's t.Fatal)
		t.Error("the waiting tasks/result got no answer at shutdown")
	}

	s = startServe(t, dir, conversationConfig("https://ratchet.example.com"))
	approveByAPI(t, s.admin, apr)
	raw, _ = openRaw(t, s.mcp, "agent-tok", tasksCaps)
	if a := raw.call("tasks/get", `{"taskId":"`+tk.TaskID+`"}`); a.Error == nil || a.Error.Code != -32602 {
		t.Errorf("the task after a restart: %s, want -32602 (forgotten)", a.raw)
	}
	again := raw.beginTask(bigPayment("inv:restart"), 3_600_000)
	if again.Status != "completed" {
		t.Fatalf("beginning again as a task after the approval: %+v, want completed", again)
	}
	if d, a := raw.taskOutcome(again.TaskID); d != "execute" {
		t.Errorf("its result: %s %v, want execute", d, a)
	}
}

// TestTasksAreBoundedPerCaller: a caller holds at most 16 tasks at once;
// the 17th task-augmented begin is refused -32600 before it runs (no
// approval is requested for it), while another caller still gets its
// task.
func TestTasksAreBoundedPerCaller(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	for i := range 16 {
		raw.beginTask(bigPayment("inv:many-"+itoa(i)), 3_600_000)
	}
	a := raw.call("tools/call", `{"name":"ratchet_begin_effect","arguments":`+string(must(json.Marshal(bigPayment("inv:many-16"))))+`,"task":{}}`)
	if a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "at most 16") {
		t.Fatalf("the 17th task: %s, want -32600 naming the bound", a.raw)
	}
	code, out, _ := cli(t, "admin-tok", nil, "approvals", "list", "--state", "pending", "-o", "json", "--admin", s.admin)
	if code != 0 || strings.Count(out, `"approval_id"`) != 16 {
		t.Errorf("pending approvals: %s, want the 16 tasks' only", out)
	}
	other, _ := openRaw(t, s.mcp, "other-tok", tasksCaps)
	if tk := other.beginTask(bigPayment("inv:other"), 3_600_000); tk.Status != "working" {
		t.Errorf("another caller's task: %+v, want working", tk)
	}
}

// rawV2 speaks the stateless 2026-07-28 protocol in raw JSON-RPC, each
// request carrying its capabilities (with the tasks extension when ext,
// form elicitation when forms).
type rawV2 struct {
	t          *testing.T
	url, token string
	ext, forms bool
	next       int
}

func (c *rawV2) call(method, name string, params map[string]any) rpcAnswer {
	c.t.Helper()
	caps := map[string]any{}
	if c.ext {
		caps["extensions"] = map[string]any{"io.modelcontextprotocol/tasks": map[string]any{}}
	}
	if c.forms {
		caps["elicitation"] = map[string]any{"form": map[string]any{}}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "raw-v2", "version": "1"},
		"io.modelcontextprotocol/clientCapabilities": caps}
	c.next++
	body := must(json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params}))
	req, _ := http.NewRequest(http.MethodPost, c.url, strings.NewReader(string(body)))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Authorization": "Bearer " + c.token} {
		req.Header.Set(k, v)
	}
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var a rpcAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		c.t.Fatalf("%s: answer %d %q: %v", method, resp.StatusCode, b, err)
	}
	a.raw = b
	return a
}

// v2Task is a task of the extension.
type v2Task struct {
	ResultType    string `json:"resultType"`
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	TTLMs         *int64 `json:"ttlMs"`
	Result        *struct {
		Structured map[string]any `json:"structuredContent"`
	} `json:"result"`
}

func (c *rawV2) task(a rpcAnswer) v2Task {
	c.t.Helper()
	var tk v2Task
	if a.Error != nil || json.Unmarshal(a.Result, &tk) != nil {
		c.t.Fatalf("answer %s, want a task", a.raw)
	}
	return tk
}

// TestA2026ClientWithTheTasksExtensionGetsATask (issue 37 item 3, the
// 2026-07-28 tasks extension): a client declaring
// io.modelcontextprotocol/tasks sees it in server/discover; its begin of
// a payment above the threshold answers a task (resultType "task",
// working, naming the approval); tasks/get shows it working, then, once
// the operator approved through the admin API, completed with the execute
// inline. A begin decided at once is answered as usual; another agent's
// tasks/get is refused like an unknown id; a client without the extension
// sees none in discover and gets the ordinary approval_required.
func TestA2026ClientWithTheTasksExtensionGetsATask(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	c := &rawV2{t: t, url: s.mcp, token: "agent-tok", ext: true}
	var disc struct {
		Capabilities struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"capabilities"`
	}
	json.Unmarshal(c.call("server/discover", "", map[string]any{}).Result, &disc)
	if _, ok := disc.Capabilities.Extensions["io.modelcontextprotocol/tasks"]; !ok {
		t.Errorf("server/discover to a client with the extension: %v, want it listed", disc.Capabilities.Extensions)
	}
	begin := func(c *rawV2, args map[string]any) rpcAnswer {
		return c.call("tools/call", "ratchet_begin_effect", map[string]any{"name": "ratchet_begin_effect", "arguments": args})
	}
	tk := c.task(begin(c, bigPayment("inv:v2")))
	if tk.ResultType != "task" || tk.Status != "working" || !strings.Contains(tk.StatusMessage, "apr_") || tk.TTLMs == nil {
		t.Fatalf("the begin's answer: %+v, want a working task on the approval", tk)
	}
	apr := approvalInTask(t, rawTask{Status: tk.Status, StatusMessage: tk.StatusMessage})
	get := func(c *rawV2) rpcAnswer { return c.call("tasks/get", "", map[string]any{"taskId": tk.TaskID}) }
	if got := c.task(get(c)); got.Status != "working" || got.ResultType != "complete" {
		t.Fatalf("tasks/get before the decision: %+v", got)
	}
	other := &rawV2{t: t, url: s.mcp, token: "other-tok", ext: true}
	unknown := other.call("tasks/get", "", map[string]any{"taskId": "task_NOSUCHTASK"})
	if a := get(other); a.Error == nil || unknown.Error == nil || a.Error.Message != unknown.Error.Message {
		t.Errorf("another agent's tasks/get: %s, want the unknown id's answer %s", a.raw, unknown.raw)
	}
	approveByAPI(t, s.admin, apr)
	deadline := time.Now().Add(20 * time.Second)
	var done v2Task
	for done = c.task(get(c)); done.Status == "working" && time.Now().Before(deadline); done = c.task(get(c)) {
		time.Sleep(200 * time.Millisecond)
	}
	if done.Status != "completed" || done.Result == nil || done.Result.Structured["decision"] != "execute" {
		t.Fatalf("tasks/get after the approval: %s, want completed with execute", must(json.Marshal(done)))
	}

	var now map[string]any
	json.Unmarshal(begin(c, map[string]any{"idempotency_key": "mail:v2", "effect_type": "email.send"}).Result, &now)
	if now["resultType"] != "complete" || now["structuredContent"].(map[string]any)["decision"] != "execute" {
		t.Errorf("a begin decided at once: %v, want the ordinary execute", now)
	}
	plain := &rawV2{t: t, url: s.mcp, token: "agent-tok"}
	if a := plain.call("server/discover", "", map[string]any{}); strings.Contains(string(a.raw), "io.modelcontextprotocol/tasks") {
		t.Errorf("server/discover to a client without the extension: %s", a.raw)
	}
	json.Unmarshal(begin(plain, bigPayment("inv:v2-plain")).Result, &now)
	if now["resultType"] != "complete" || now["structuredContent"].(map[string]any)["decision"] != "approval_required" {
		t.Errorf("a begin without the extension: %v, want the ordinary approval_required", now)
	}
}

// TestATaskBeginsAgainOnlyForAClientThatAsks: after the operator approves,
// the task begins again only when its client next asks (tasks/get): for a
// client that went away, the agent's own next begin gets execute, not
// in_flight behind a lease taken for nobody (which would lapse into an
// indeterminate effect). The task still gets its answer if asked after.
func TestATaskBeginsAgainOnlyForAClientThatAsks(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(bigPayment("inv:gone"), 3_600_000)
	approveByAPI(t, s.admin, approvalInTask(t, tk))
	time.Sleep(2500 * time.Millisecond) // the watcher has seen the decision; nobody asks
	cs := connect(t, s.mcp, "agent-tok")
	if got := structured(t, callResult(t, cs, bigPayment("inv:gone"))); got["decision"] != "execute" {
		t.Fatalf("the agent's own begin after the approval, the task's client silent: %v, want execute", got)
	}
	if got := raw.getTask(tk.TaskID); got.Status != "completed" || !strings.HasPrefix(got.StatusMessage, "in_flight: ") {
		t.Errorf("the task asked afterwards: %+v, want completed with what a begin now answers (in_flight)", got)
	}
}

// TestThreeCallersCannotFillTheTaskStoreForOthers (review rev37): three
// agents, each within its own bound of 16 tasks, send task-augmented
// begins of up to 1 MB of arguments (refused at once, invalid_argument:
// payload over 64 KiB; each a failed task kept five minutes, which keeps
// its error, not the arguments), sending less when refused. A fourth agent's ordinary
// task-augmented begin must still get a task: three callers within their
// bounds must not be able to refuse everyone else (-32600 "too many tasks
// held by this server"), renewable every five minutes. (Two callers of
// 16 x 1 MiB alone take all of it.)
func TestThreeCallersCannotFillTheTaskStoreForOthers(t *testing.T) {
	cfg := "auth:\n  agents: [{token_sha256: '" + sha("agent-tok") + "', namespace: default, agent_id: bot}, " +
		"{token_sha256: '" + sha("other-tok") + "', namespace: default, agent_id: other}, " +
		"{token_sha256: '" + sha("third-tok") + "', namespace: default, agent_id: third}, " +
		"{token_sha256: '" + sha("fourth-tok") + "', namespace: default, agent_id: fourth}]\n" +
		"  admins: [{token_sha256: '" + sha("admin-tok") + "', name: alice}]\n" +
		"policies:\n  - match: 'payment.*'\n    approval_threshold_micros: 100000000\n"
	s := startServe(t, filepath.Join(t.TempDir(), "data"), cfg)
	fill := func(raw *rawSession, key string, n int) bool { // a begin with n bytes of payload, refused at once; whether it got a task
		args := map[string]any{"idempotency_key": key, "effect_type": "email.send", "payload": map[string]any{"x": strings.Repeat("a", n)}}
		return raw.call("tools/call", `{"name":"ratchet_begin_effect","arguments":`+string(must(json.Marshal(args)))+`,"task":{"ttl":3600000}}`).Error == nil
	}
	for _, tok := range []string{"agent-tok", "other-tok", "third-tok"} {
		raw, _ := openRaw(t, s.mcp, tok, tasksCaps)
		n, held := 1_000_000, 0
		for i := 0; held < 16 && n > 16; i++ { // at most 16 tasks each: its own bound
			if fill(raw, "fill:"+tok+itoa(i), n) {
				held++
			} else {
				n /= 2 // the store is nearly full: what still fits
			}
		}
	}
	fourth, _ := openRaw(t, s.mcp, "fourth-tok", tasksCaps)
	a := fourth.call("tools/call", `{"name":"ratchet_begin_effect","arguments":`+string(must(json.Marshal(bigPayment("inv:fourth"))))+`,"task":{"ttl":3600000}}`)
	if a.Error != nil {
		t.Fatalf("a fourth caller's task-augmented begin, after three others used their own bounds: %s, want a task", a.raw)
	}
}

// TestATasksExecuteIsLeasedWhenCollectedNotWhenDecided (review rev37): a task-augmented
// begin with a 2-second lease waits for its approval; the operator
// approves, and the client collects the result 4 seconds later (it polls
// at its own pace, or reconnects). The execute it collects must hold a
// lease that has not already run out, and the agent's own begin with the
// key must not find the action blocked (lease_expired, "may or may not
// have happened") for a lease nobody ever held. Today the watcher begins
// again the moment the operator decides, so the lease runs from then.
func TestATasksExecuteIsLeasedWhenCollectedNotWhenDecided(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	args := bigPayment("inv:late-collect")
	args["lease_seconds"] = 2
	tk := raw.beginTask(args, 3_600_000)
	approveByAPI(t, s.admin, approvalInTask(t, tk))
	time.Sleep(4 * time.Second) // the client is slow to collect
	d, answer := raw.taskOutcome(tk.TaskID)
	if d == "execute" {
		exp, err := time.Parse(time.RFC3339Nano, answer["lease_expires_at"].(string))
		if err != nil || !exp.After(time.Now()) {
			t.Errorf("the execute collected from the task holds a lease until %v (%v): already run out when collected", answer["lease_expires_at"], err)
		}
	}
	again := raw.call("tools/call", `{"name":"ratchet_begin_effect","arguments":`+string(must(json.Marshal(args)))+`}`)
	var r struct {
		Structured map[string]any `json:"structuredContent"`
	}
	json.Unmarshal(again.Result, &r)
	if r.Structured["decision"] == "blocked" {
		t.Errorf("the agent's begin after collecting: %v; an approved action is now indeterminate for a lease the watcher took", r.Structured)
	}
}

// TestATaskKeepsItsCallsUserConfirmation (review rev37): under a rule
// that asks the user from $50 and an operator from $100, a 2026-07-28
// client with the tasks extension confirms a $150 payment (the
// confirmation's retry) and gets a task waiting for the approval; the
// operator then makes a grant instead of approving. The task's begin
// again, which the grant lets through, must complete with execute under
// the grant, not confirmation_required: the user confirmed this very
// call.
func TestATaskKeepsItsCallsUserConfirmation(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), "auth:\n  agents: [{token_sha256: '"+sha("agent-tok")+"', namespace: default, agent_id: bot}]\n"+
		"  admins: [{token_sha256: '"+sha("admin-tok")+"', name: alice}]\n"+
		"policies:\n  - match: 'payment.*'\n    confirm_with: user\n    confirm_threshold_micros: 50000000\n    approval_threshold_micros: 100000000\n"+
		"defaults:\n  approval_retry_after: 1s\n")
	c := &rawV2{t: t, url: s.mcp, token: "agent-tok", ext: true, forms: true}
	params := map[string]any{"name": "ratchet_begin_effect", "arguments": bigPayment("inv:confirmed")}
	first := c.call("tools/call", "ratchet_begin_effect", params)
	var ask struct {
		InputRequests map[string]any `json:"inputRequests"`
		RequestState  string         `json:"requestState"`
	}
	if first.Error != nil || json.Unmarshal(first.Result, &ask) != nil || ask.InputRequests["ratchet_confirm"] == nil {
		t.Fatalf("the begin: %s, want input_required asking ratchet_confirm", first.raw)
	}
	params["requestState"] = ask.RequestState
	params["inputResponses"] = map[string]any{"ratchet_confirm": map[string]any{"action": "accept", "content": map[string]any{"confirm": true}}}
	tk := c.task(c.call("tools/call", "ratchet_begin_effect", params))
	if tk.Status != "working" || !strings.Contains(tk.StatusMessage, "apr_") {
		t.Fatalf("the confirmed begin: %+v, want a task waiting for the approval", tk)
	}
	code, out, errs := cli(t, "admin-tok", nil, "grants", "create", "--effect-type", "payment.*", "--agent-id", "bot",
		"--max-effects", "1", "--max-cost-micros", "400000000", "--ttl", "1h", "-o", "json", "--admin", s.admin)
	if code != 0 {
		t.Fatalf("grants create: %d %s %s", code, out, errs)
	}
	deadline := time.Now().Add(20 * time.Second)
	done := c.task(c.call("tasks/get", "", map[string]any{"taskId": tk.TaskID}))
	for ; done.Status == "working" && time.Now().Before(deadline); done = c.task(c.call("tasks/get", "", map[string]any{"taskId": tk.TaskID})) {
		time.Sleep(300 * time.Millisecond)
	}
	if done.Status != "completed" || done.Result == nil || done.Result.Structured["decision"] != "execute" || done.Result.Structured["grant_id"] == nil {
		t.Fatalf("the task after the grant: %s, want completed with execute under the grant", must(json.Marshal(done)))
	}
}

// TestAnAbandonedTasksResultBeginsNothing (review rev37b): a client sends
// tasks/result and goes (its HTTP request is cut after half a second, as
// a crashed or timed-out client's is); the operator then approves. The
// SDK does not cancel a handler when its HTTP request goes, so the
// tasks/result kept waiting and began again for nobody once the decision
// came: the agent's own next begin found in_flight behind a lease nobody
// holds (lapsing into an indeterminate effect), where it must get execute.
func TestAnAbandonedTasksResultBeginsNothing(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(bigPayment("inv:abandoned"), 3_600_000)
	if resp, err := (&http.Client{Timeout: 500 * time.Millisecond}).Do(raw.request(`{"jsonrpc":"2.0","id":99,"method":"tasks/result","params":{"taskId":"` + tk.TaskID + `"}}`)); err == nil {
		resp.Body.Close()
		t.Fatalf("tasks/result answered %d before any decision", resp.StatusCode)
	}
	approveByAPI(t, s.admin, approvalInTask(t, tk))
	time.Sleep(2500 * time.Millisecond) // the watcher has seen the decision; the client is gone
	cs := connect(t, s.mcp, "agent-tok")
	if got := structured(t, callResult(t, cs, bigPayment("inv:abandoned"))); got["decision"] != "execute" {
		t.Fatalf("the agent's own begin after the approval, its tasks/result abandoned: %v, want execute", got)
	}
}

// TestTasksAreDeclaredOnlyWhereTheSDKReadsThem (review rev37b): the SDK
// matches a message's keys exactly; an initialize whose "params" declares
// no tasks, with a "Params" that does, or a tools/call whose task is in
// "PARAMS" only, is a client without tasks there: its initialize answers
// no tasks capability (before the fix the peek, matching case-blind, read
// the second key and answered one), and its begin is an ordinary answer,
// not a task.
func TestTasksAreDeclaredOnlyWhereTheSDKReadsThem(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw := &rawSession{t: t, url: s.mcp, token: "agent-tok"}
	_, b := raw.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}},` +
		`"Params":{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"raw","version":"1"}}}`)
	var init struct {
		Result struct {
			Capabilities map[string]any `json:"capabilities"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &init); err != nil || init.Result.Capabilities == nil {
		t.Fatalf("initialize: %s (%v)", b, err)
	}
	if tasks, ok := init.Result.Capabilities["tasks"]; ok {
		t.Errorf("initialize declaring tasks only in a \"Params\" key the SDK does not read: capabilities.tasks %v, want none", tasks)
	}
	raw.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	declared, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	args := string(must(json.Marshal(bigPayment("inv:params-twice"))))
	_, b = declared.post(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ratchet_begin_effect","arguments":` + args + `},` +
		`"PARAMS":{"name":"ratchet_begin_effect","arguments":` + args + `,"task":{"ttl":60000}}}`)
	var call struct {
		Result map[string]any `json:"result"`
	}
	json.Unmarshal(b, &call)
	if _, ok := call.Result["task"]; ok || call.Result["structuredContent"] == nil {
		t.Errorf("a tools/call with its task only in a \"PARAMS\" key the SDK does not read: %s, want the ordinary begin answer", b)
	}
}

// TestATasksResultThePeekCannotReadIsRefused (review rev37b): a
// tasks/result whose body the peek does not read (here its strings
// are written with unicode escapes, so the body has no "task; a batch is
// another) would wait without its HTTP request's context, and begin again
// for a client that went. It is refused at once (-32600, saying to send
// it alone and plainly), not left waiting.
func TestATasksResultThePeekCannotReadIsRefused(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	raw, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	tk := raw.beginTask(bigPayment("inv:escaped"), 3_600_000)
	answered := make(chan []byte, 1)
	go func() {
		resp, err := http.DefaultClient.Do(raw.request(`{"jsonrpc":"2.0","id":42,"method":"ta\u0073ks/result","params":{"t\u0061skId":"\u0074` + tk.TaskID[1:] + `"}}`))
		if err != nil {
			answered <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		answered <- b
	}()
	select {
	case b := <-answered:
		var a rpcAnswer
		if json.Unmarshal(b, &a) != nil || a.Error == nil || a.Error.Code != -32600 {
			t.Errorf("a tasks/result the peek cannot read: %s, want error -32600", b)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a tasks/result the peek cannot read waits on the task without its HTTP request")
	}
}

// TestAClientCannotSendTheInternalTaskHeaders (review rev37b): the
// headers the peek sets, sent by a client itself (lower case, twice),
// change nothing: an initialize without tasks gets no tasks capability,
// and a begin without params.task in a session that declared tasks gets
// its ordinary answer, not a task.
func TestAClientCannotSendTheInternalTaskHeaders(t *testing.T) {
	s := startServe(t, filepath.Join(t.TempDir(), "data"), conversationConfig("https://ratchet.example.com"))
	send := func(raw *rawSession, body string) []byte {
		req := raw.request(body)
		for _, h := range []string{"x-ratchet-internal-tasks-client", "X-RATCHET-INTERNAL-TASK", "x-ratchet-internal-wait"} {
			req.Header.Add(h, "1")
			req.Header.Add(h, "60000")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			raw.session = id
		}
		return must(io.ReadAll(resp.Body))
	}
	plain := &rawSession{t: t, url: s.mcp, token: "agent-tok"}
	b := send(plain, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if strings.Contains(string(b), `"tasks"`) {
		t.Errorf("initialize without tasks, the internal headers sent by the client: %s, want no tasks capability", b)
	}
	declared, _ := openRaw(t, s.mcp, "agent-tok", tasksCaps)
	b = send(declared, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ratchet_begin_effect","arguments":`+string(must(json.Marshal(bigPayment("inv:headers"))))+`}}`)
	var call struct {
		Result map[string]any `json:"result"`
	}
	json.Unmarshal(b, &call)
	if _, ok := call.Result["task"]; ok || call.Result["structuredContent"] == nil {
		t.Errorf("a begin without params.task, the internal headers sent by the client: %s, want the ordinary begin answer", b)
	}
}
