package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/ledger"
)

// Long approvals as tasks (issue 37 item 3; MCP 2025-11-25,
// basic/utilities/tasks). A session client over HTTP that declares
// capabilities.tasks sees the server's tasks capability (list, cancel,
// tools/call) and execution.taskSupport "optional" on the begin tool. Its
// task-augmented begin runs as any begin; if the answer is
// approval_required, the call answers a task (working) that watches the
// approval in the ledger and, once an operator decided, completes with the
// answer of a begin made when the client next asks (execute, denied), or
// with the expiry answer (still approval_required, saying the request
// lapsed) when it lapses undecided.
// Any other answer makes a task that is already completed (failed for a
// tool error). The client polls tasks/get, blocks on tasks/result, lists
// its tasks and cancels one: cancelling stops the watching, the approval
// stays pending. Nothing the client sends decides anything.
//
// Rules a change must keep:
//   - Clients that do not declare tasks get today's bytes: nothing here
//     runs for them but the peek at the request body.
//   - A task belongs to the caller's identity (namespace, agent, OAuth
//     principal) and to nobody else: another caller's task id is "not
//     found", as an unknown one is.
//   - Tasks are bounded (maxTasksPerOwner, maxTaskBytesPerOwner, maxTasks,
//     maxTaskBytes), counting what a task keeps (a watching task its begin,
//     a completed one its result), and live
//     at most until the approval's expiry plus taskKeep; they are in this
//     process's memory only (the begin's arguments too, never persisted): a
//     restart forgets tasks, not decisions, and a task lives in the replica
//     that made it. A client that lost its task begins again with the same
//     key (idempotent).
//
// 2026-07-28 clients get the tasks extension instead (taskMiddlewareV2,
// below).
//
// The Go SDK (v1.8.0) has no tasks: its types drop params.task and the
// tasks capability, so peekTasks reads them from the HTTP body before the
// SDK parses it and passes them on in headers only it sets; the middleware
// answers the task shapes the SDK has no types for. The SDK does not
// cancel a handler whose HTTP request went, so peekTasks also hands a
// tasks/result its request's context (httpWaits): a tasks/result whose
// client went stops waiting, and never begins again for nobody.

// The headers peekTasks sets (and removes from every request first, so a
// client cannot send them).
const (
	taskHeader        = "X-Ratchet-Internal-Task"         // a tools/call's params.task: its ttl in ms, or "-"
	tasksClientHeader = "X-Ratchet-Internal-Tasks-Client" // an initialize that declares capabilities.tasks
	waitHeader        = "X-Ratchet-Internal-Wait"         // a tasks/result's key in httpWaits
)

// httpWaits holds, by waitHeader's key, the context of each tasks/result's
// HTTP request while it is served: the SDK does not cancel a handler whose
// HTTP request went, and a tasks/result waiting for a client that went
// would begin again for nobody (review rev37b).
var httpWaits sync.Map

// Bounds of the task store.
const (
	maxTasksPerOwner = 16       // tasks one caller holds at once
	maxTasks         = 1024     // tasks held at once
	maxTaskBytes     = 32 << 20 // begins and results held at once
	// maxTaskBytesPerOwner is one caller's share of maxTaskBytes: it takes
	// eight callers at their bound to fill the store (review rev37), and
	// sixteen watched begins with the largest payloads fit in it.
	maxTaskBytesPerOwner = maxTaskBytes / 8
	// taskKeep is how long a task's answer stays after the approval's
	// expiry, or after it was created for one that completed at once.
	taskKeep = 5 * time.Minute
	// taskPollMS is the polling interval suggested to clients.
	taskPollMS = 1000
)

// taskWatchEvery is how often a watching task reads its effect. A
// variable so that tests can shorten it.
var taskWatchEvery = time.Second

// relatedTask is the _meta key tying a result to its task.
const relatedTask = "io.modelcontextprotocol/related-task"

// stripTaskHeaders removes the headers only peekTasks may set.
func stripTaskHeaders(h http.Header) {
	h.Del(taskHeader)
	h.Del(tasksClientHeader)
	h.Del(waitHeader)
}

// peekTasks reads a POST body (up to maxBody; a larger one goes on
// unread for the SDK to refuse) and, for an initialize declaring tasks or
// a task-augmented tools/call, sets the header saying so.
func peekTasks(next http.Handler, maxBody int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		if err == nil && int64(len(body)) <= maxBody && bytes.Contains(body, []byte(`"task`)) && markTasks(r.Header, body) {
			key := rand.Text()
			httpWaits.Store(key, r.Context())
			defer httpWaits.Delete(key)
			r.Header.Set(waitHeader, key)
		}
		next.ServeHTTP(w, r)
	})
}

// markTasks sets the task headers for one JSON-RPC request body, and
// reports whether it is a tasks/result (whose HTTP request's context the
// handler must see). Keys are matched exactly, as the SDK matches them.
func markTasks(h http.Header, body []byte) (wait bool) {
	// Maps, not a struct: encoding/json matches a struct's fields
	// case-blind, and the SDK would read "params" where this read "Params"
	// (review rev37b).
	var msg, params map[string]json.RawMessage
	var method string
	if json.Unmarshal(body, &msg) != nil || json.Unmarshal(msg["method"], &method) != nil || json.Unmarshal(msg["params"], &params) != nil {
		return false
	}
	isObject := func(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }
	switch method {
	case "initialize":
		var caps map[string]json.RawMessage
		if json.Unmarshal(params["capabilities"], &caps) == nil && isObject(caps["tasks"]) {
			h.Set(tasksClientHeader, "1")
		}
	case "tools/call":
		var task map[string]json.RawMessage
		if !isObject(params["task"]) || json.Unmarshal(params["task"], &task) != nil {
			return false
		}
		ttl := "-"
		var ms float64
		if json.Unmarshal(task["ttl"], &ms) == nil && ms >= 0 {
			ttl = strconv.FormatInt(int64(min(ms, 1e15)), 10)
		}
		h.Set(taskHeader, ttl)
	case "tasks/result":
		return true
	}
	return false
}

// whileClientWaits is ctx, cancelled when the HTTP request of ex (a
// tasks/result peekTasks marked) has gone, or at once if it has gone
// already; stop releases it. A tasks/result peekTasks did not mark (in a
// batch, or written with escapes so that it has no "task) is refused: it
// would wait without its HTTP request (review rev37b).
func whileClientWaits(ctx context.Context, ex *sdk.RequestExtra) (_ context.Context, stop func(), _ error) {
	key := ex.Header.Get(waitHeader)
	if key == "" {
		return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: "tasks/result must be sent alone in its POST, its method and taskId written without escapes"}
	}
	ctx, cancel := context.WithCancel(ctx)
	hc, ok := httpWaits.Load(key)
	if !ok {
		cancel()
		return ctx, cancel, nil
	}
	after := context.AfterFunc(hc.(context.Context), cancel)
	return ctx, func() { after(); cancel() }, nil
}

// task is one task-augmented begin.
type task struct {
	id      string
	owner   Identity
	created time.Time
	ask     time.Duration // the ttl asked for; zero for none
	size    int           // bytes counted against maxTaskBytes: what the task keeps
	v2      bool          // made for a 2026-07-28 client (the tasks extension)

	// A watching task's begin (set by watch before its watcher starts),
	// how often to begin again anyway, and one begin again at a time.
	in      ledger.BeginRequest
	res     ledger.BeginResult
	retry   time.Duration
	beginMu sync.Mutex

	// Under taskStore.mu.
	ttl       time.Duration
	status    string // working, completed, failed, cancelled
	message   string
	updated   time.Time
	watching  bool
	ready     bool      // the approval is no longer pending: begin again when the client asks
	nextBegin time.Time // when to begin again anyway (retry_after_seconds)
	result    *sdk.CallToolResult
	timer     *time.Timer   // removes the task at created+ttl
	done      chan struct{} // closed when the status is terminal
	gone      chan struct{} // closed when the task is removed or cancelled: the watching stops
}

// taskStore holds the tasks of one server, and which of its sessions
// declared tasks.
type taskStore struct {
	server *sdk.Server
	mu     sync.Mutex
	// sessions declared tasks; pruned of closed sessions as it grows.
	sessions map[*sdk.ServerSession]bool
	live     int // sessions open at the last prune
	tasks    map[string]*task
	owned    map[Identity]holding
	bytes    int
}

// holding is what one caller's tasks hold.
type holding struct{ tasks, bytes int }

func newTaskStore(s *sdk.Server) *taskStore {
	return &taskStore{server: s, sessions: map[*sdk.ServerSession]bool{}, tasks: map[string]*task{}, owned: map[Identity]holding{}}
}

func (ts *taskStore) declare(ss *sdk.ServerSession) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.sessions) >= 2*ts.live+16 {
		open := map[*sdk.ServerSession]bool{}
		for s := range ts.server.Sessions() {
			open[s] = true
		}
		for s := range ts.sessions {
			if !open[s] {
				delete(ts.sessions, s)
			}
		}
		ts.live = len(open)
	}
	ts.sessions[ss] = true
}

func (ts *taskStore) declared(s sdk.Session) bool {
	ss, ok := s.(*sdk.ServerSession)
	if !ok {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.sessions[ss]
}

func tooMany(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: msg + "; cancel a task, or begin without one"}
}

// open makes a working task for owner, refusing one past the bounds. It
// holds no bytes yet: the begin's arguments count only if its task keeps
// them (watch), so a begin refused at once (a failed task) counts its
// error only, not the megabyte of arguments it was refused for.
func (ts *taskStore) open(owner Identity, ask time.Duration, v2 bool) (*task, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	h := ts.owned[owner]
	switch {
	case h.tasks >= maxTasksPerOwner:
		return nil, tooMany(fmt.Sprintf("too many tasks: at most %d at once per caller", maxTasksPerOwner))
	case h.bytes >= maxTaskBytesPerOwner:
		return nil, tooMany(fmt.Sprintf("too many task bytes: at most %d MiB held at once per caller", maxTaskBytesPerOwner>>20))
	case len(ts.tasks) >= maxTasks || ts.bytes >= maxTaskBytes:
		return nil, tooMany("too many tasks held by this server")
	}
	now := time.Now()
	tk := &task{id: "task_" + rand.Text(), owner: owner, created: now, ask: ask, v2: v2,
		status: "working", updated: now, done: make(chan struct{}), gone: make(chan struct{})}
	ts.tasks[tk.id] = tk
	h.tasks++
	ts.owned[owner] = h
	ts.setTTL(tk, taskKeep)
	return tk, nil
}

// hold counts n more bytes kept by tk; the caller holds ts.mu.
func (ts *taskStore) hold(tk *task, n int) {
	h := ts.owned[tk.owner]
	h.bytes += n
	ts.owned[tk.owner] = h
	ts.bytes += n
	tk.size += n
}

// fits reports whether tk may keep n more bytes; the caller holds ts.mu.
func (ts *taskStore) fits(tk *task, n int) bool {
	return ts.owned[tk.owner].bytes+n <= maxTaskBytesPerOwner && ts.bytes+n <= maxTaskBytes
}

// setTTL sets tk's ttl to keep (from its creation), or to what its client
// asked if shorter, and schedules its removal then.
func (ts *taskStore) setTTL(tk *task, keep time.Duration) {
	tk.ttl = keep
	if tk.ask > 0 && tk.ask < keep {
		tk.ttl = tk.ask
	}
	if tk.timer != nil {
		tk.timer.Stop()
	}
	tk.timer = time.AfterFunc(time.Until(tk.created.Add(tk.ttl)), func() { ts.remove(tk) })
}

// remove forgets tk.
func (ts *taskStore) remove(tk *task) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tasks[tk.id] != tk {
		return
	}
	delete(ts.tasks, tk.id)
	ts.hold(tk, -tk.size)
	if h := ts.owned[tk.owner]; h.tasks <= 1 {
		delete(ts.owned, tk.owner)
	} else {
		h.tasks--
		ts.owned[tk.owner] = h
	}
	tk.timer.Stop()
	if tk.status == "working" {
		close(tk.gone)
	}
}

// watch marks tk as waiting for res's approval (of the begin in), until
// its expiry, keeping in: it reports false, and tk does not wait, when in
// does not fit in the byte bounds (the task then completes with the
// approval_required; a 2026-07-28 begin answers as without a task).
func (ts *taskStore) watch(tk *task, in ledger.BeginRequest, res *ledger.BeginResult) bool {
	// About what in holds (its payloads are most of it), not escaping
	// HTML, which would count a payload's "<" six times.
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false)
	if enc.Encode(in) != nil {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tasks[tk.id] != tk || !ts.fits(tk, js.Len()) { // removed meanwhile, or too big
		return false
	}
	ts.hold(tk, js.Len())
	tk.in, tk.res, tk.watching = in, *res, true
	tk.retry = max(time.Duration(res.RetryAfterSeconds)*time.Second, taskWatchEvery)
	tk.nextBegin = time.Now().Add(tk.retry)
	tk.message = "Waiting for an operator to decide approval " + res.ApprovalID + " (it lapses at " + res.ExpiresAt.UTC().Format(time.RFC3339) + ")."
	if res.ApprovalURL != "" {
		tk.message += " Show the user where an operator decides: " + res.ApprovalURL
	}
	ts.setTTL(tk, res.ExpiresAt.Sub(tk.created)+taskKeep)
	return true
}

// finish completes tk with res, unless it was cancelled meanwhile.
func (ts *taskStore) finish(tk *task, res *sdk.CallToolResult) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tk.status != "working" || ts.tasks[tk.id] != tk { // cancelled, or removed
		return
	}
	tk.status, tk.message, tk.result, tk.updated = "completed", summaryOf(res), res, time.Now()
	if res.IsError && !tk.v2 { // the extension's failed is for JSON-RPC errors only
		tk.status = "failed"
	}
	// A result is a begin's answer (a few KB at most): counted, not
	// refused, as the task exists already; open refuses tasks past the
	// bounds.
	if js, err := json.Marshal(res); err == nil {
		ts.hold(tk, len(js))
	}
	close(tk.done)
}

// summaryOf is a tool result's first text (a begin's one-line summary),
// or "" when it has none.
func summaryOf(res *sdk.CallToolResult) string {
	if len(res.Content) > 0 {
		if tc, ok := res.Content[0].(*sdk.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

func taskNotFound() error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "task not found (tasks are kept in memory by the replica that made them, " +
		"until a while after their approval's expiry; a restart forgets them): begin again with the same idempotency key"}
}

// get returns owner's task id; another caller's is not found.
func (ts *taskStore) get(owner Identity, id string) (*task, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tk, ok := ts.tasks[id]
	if !ok || tk.owner != owner {
		return nil, taskNotFound()
	}
	return tk, nil
}

// taskInfo is a task as the protocol shows it.
type taskInfo struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           int64  `json:"ttl"`
	PollInterval  int64  `json:"pollInterval,omitempty"`
}

// info is tk's state; the caller holds ts.mu.
func (tk *task) info() taskInfo {
	in := taskInfo{TaskID: tk.id, Status: tk.status, StatusMessage: tk.message, CreatedAt: tk.created.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: tk.updated.UTC().Format(time.RFC3339Nano), TTL: tk.ttl.Milliseconds()}
	if tk.status == "working" {
		in.PollInterval = taskPollMS
	}
	return in
}

func (ts *taskStore) info(tk *task) taskInfo {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return tk.info()
}

// cancel cancels owner's working task id: it stops watching.
func (ts *taskStore) cancel(owner Identity, id string) (taskInfo, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tk, ok := ts.tasks[id]
	if !ok || tk.owner != owner {
		return taskInfo{}, taskNotFound()
	}
	if tk.status != "working" {
		return taskInfo{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "cannot cancel task: already in terminal status '" + tk.status + "'"}
	}
	tk.status, tk.updated = "cancelled", time.Now()
	tk.message = "Cancelled: Ratchet stopped watching. Nothing was decided; the approval stays pending: begin again with the same key to see its decision."
	close(tk.gone)
	close(tk.done)
	return tk.info(), nil
}

// list is owner's tasks, oldest first.
func (ts *taskStore) list(owner Identity) []taskInfo {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var mine []*task
	for _, tk := range ts.tasks {
		if tk.owner == owner {
			mine = append(mine, tk)
		}
	}
	slices.SortFunc(mine, func(a, b *task) int { return a.created.Compare(b.created) })
	out := []taskInfo{}
	for _, tk := range mine {
		out = append(out, tk.info())
	}
	return out
}

// The results the SDK has no types for.
type (
	createTaskResult struct {
		sdk.ResultBase
		Task taskInfo `json:"task"`
	}
	taskResult struct {
		sdk.ResultBase
		taskInfo
	}
	taskListResult struct {
		sdk.ResultBase
		Tasks      []taskInfo `json:"tasks"`
		NextCursor string     `json:"nextCursor,omitempty"`
	}
	taskIDParams struct {
		sdk.ParamsBase
		TaskID string `json:"taskId"`
	}
	taskListParams struct {
		sdk.ParamsBase
		Cursor string `json:"cursor,omitempty"`
	}
)

func (p *taskIDParams) id() string {
	if p == nil {
		return ""
	}
	return p.TaskID
}

// serverTasks is the tasks capability Ratchet declares.
var serverTasks = map[string]any{"list": struct{}{}, "cancel": struct{}{}, "requests": map[string]any{"tools": map[string]any{"call": struct{}{}}}}

// The initialize and tools/list answers of a client that declared tasks.
type (
	initWithTasks struct {
		*sdk.InitializeResult
		Capabilities capsWithTasks `json:"capabilities"`
	}
	capsWithTasks struct {
		*sdk.ServerCapabilities
		Tasks any `json:"tasks"`
	}
	toolsWithTasks struct {
		*sdk.ListToolsResult
		Tools []any `json:"tools"`
	}
	toolWithTasks struct {
		*sdk.Tool
		Execution map[string]string `json:"execution"`
	}
)

// ownerKey holds a tasks/* request's caller in its handler's context.
type ownerKey struct{}

// taskKey holds a task-augmented begin's task in its handler's context.
type taskKey struct{}

// taskMiddleware adds tasks for the sessions that declared them.
func (t *tools) taskMiddleware(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		ex := req.GetExtra()
		if ex == nil || ex.Header == nil || !taskMethod(method, req, ex) { // stdio; most calls: at once
			return next(ctx, method, req)
		}
		if method == "server/discover" || statelessClient(req) { // discover is of 2026-07-28 only, and sets the session's version itself
			return t.taskMiddlewareV2(ctx, next, method, req)
		}
		switch {
		case method == "initialize" && ex.Header.Get(tasksClientHeader) != "":
			res, err := next(ctx, method, req)
			ir, ok := res.(*sdk.InitializeResult)
			ss, sok := req.GetSession().(*sdk.ServerSession)
			if err != nil || !ok || !sok {
				return res, err
			}
			t.tasks.declare(ss)
			caps := ir.Capabilities
			if caps == nil {
				caps = &sdk.ServerCapabilities{}
			}
			return &initWithTasks{InitializeResult: ir, Capabilities: capsWithTasks{caps, serverTasks}}, nil
		case method == "tools/list" && t.tasks.declared(req.GetSession()):
			res, err := next(ctx, method, req)
			lr, ok := res.(*sdk.ListToolsResult)
			if err != nil || !ok {
				return res, err
			}
			out := &toolsWithTasks{ListToolsResult: lr, Tools: []any{}}
			for _, tool := range lr.Tools {
				if tool.Name == beginSpec.name {
					out.Tools = append(out.Tools, toolWithTasks{tool, map[string]string{"taskSupport": "optional"}})
				} else {
					out.Tools = append(out.Tools, tool)
				}
			}
			return out, nil
		case method == "tools/call" && ex.Header.Get(taskHeader) != "" && t.tasks.declared(req.GetSession()):
			cr, ok := req.(*sdk.CallToolRequest)
			if !ok {
				break
			}
			return t.taskCall(ctx, next, cr, ex.Header.Get(taskHeader))
		case strings.HasPrefix(method, "tasks/"):
			if !t.tasks.declared(req.GetSession()) {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + ": this session did not declare the tasks capability in initialize"}
			}
			ctx = context.WithValue(ctx, ownerKey{}, t.identityOf(ex))
			if method == "tasks/result" {
				wctx, stop, err := whileClientWaits(ctx, ex)
				if err != nil {
					return nil, err
				}
				defer stop()
				ctx = wctx
			}
		}
		return next(ctx, method, req)
	}
}

// taskMethod reports whether the middleware may have something to do
// with a request: the methods it answers, and a tools/call of the begin
// or one peekTasks marked.
func taskMethod(method string, req sdk.Request, ex *sdk.RequestExtra) bool {
	switch method {
	case "initialize", "tools/list", "server/discover":
		return true
	case "tools/call":
		cr, ok := req.(*sdk.CallToolRequest)
		return ok && (cr.Params.Name == beginSpec.name || ex.Header.Get(taskHeader) != "")
	}
	return strings.HasPrefix(method, "tasks/")
}

// taskCall runs a task-augmented tools/call.
func (t *tools) taskCall(ctx context.Context, next sdk.MethodHandler, req *sdk.CallToolRequest, ttl string) (sdk.Result, error) {
	if req.Params.Name != beginSpec.name {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tool " + strconv.Quote(req.Params.Name) +
			" does not run as a task (execution.taskSupport is forbidden; only " + beginSpec.name + " does): call it without params.task"}
	}
	var ask time.Duration
	if ms, err := strconv.ParseInt(ttl, 10, 64); err == nil {
		ask = time.Duration(ms) * time.Millisecond
	}
	owner := t.identityOf(req.Extra)
	tk, err := t.tasks.open(owner, ask, false)
	if err != nil {
		return nil, err
	}
	res, err := next(context.WithValue(ctx, taskKey{}, tk), "tools/call", req)
	cr, ok := res.(*sdk.CallToolResult)
	if err != nil || !ok {
		t.tasks.remove(tk)
		if err == nil {
			err = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the begin made no tool result"}
		}
		return nil, err
	}
	t.tasks.mu.Lock()
	watching := tk.watching
	t.tasks.mu.Unlock()
	if !watching {
		t.tasks.finish(tk, cr)
	}
	t.log.Info("task created", "task_id", tk.id, "namespace", owner.Namespace, "agent_id", owner.AgentID, "watching", watching)
	out := &createTaskResult{Task: t.tasks.info(tk)}
	if text := summaryOf(cr); text != "" {
		out.Meta = sdk.Meta{"io.modelcontextprotocol/model-immediate-response": text}
	}
	return out, nil
}

// watchApproval makes the begin's task wait for its approval, when the
// begin in ctx is task-augmented: it reports whether it does.
func (t *tools) watchApproval(ctx context.Context, in ledger.BeginRequest, res *ledger.BeginResult) bool {
	tk, _ := ctx.Value(taskKey{}).(*task)
	if tk == nil || res.Decision != ledger.DecisionApprovalRequired || res.ExpiresAt == nil || res.EffectID == "" {
		return false
	}
	// in keeps its user confirmation, which was obtained for this very
	// call: a begin again that a grant (not an approval) lets through must
	// not ask the user anew (review rev37).
	if !t.tasks.watch(tk, in, res) {
		return false
	}
	go t.watch(tk)
	return true
}

// watch waits for an operator's decision on the task's approval: it
// reads the effect every taskWatchEvery and marks the task ready once the
// approval is no longer pending; at the approval's expiry it completes the
// task with the expiry answer (without beginning again, which would ask
// anew for a client that may be gone).
//
// It never begins again itself: beginAgain does, when the client asks
// (tasks/get, or a tasks/result waiting). A begin for a client that went
// would take the execute lease for nobody, which lapses into an
// indeterminate effect for an operator to resolve, where the agent's own
// next begin would have got execute.
func (t *tools) watch(tk *task) {
	exp := *tk.res.ExpiresAt
	tick := time.NewTicker(taskWatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-tk.gone:
			return
		case <-tk.done:
			return
		case <-t.done:
			return
		case <-tick.C:
		}
		if !time.Now().Before(exp.Add(-taskWatchEvery / 2)) {
			t.tasks.finish(tk, t.beginResult(lapsed(&tk.res), nil))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		eff, err := t.eng.Get(ctx, tk.in.Namespace, tk.res.EffectID, "")
		cancel()
		if err != nil {
			t.log.Debug("a task reading its effect", "task_id", tk.id, "error", err)
			continue
		}
		a := eff.Approval
		if a != nil && a.ApprovalID == tk.res.ApprovalID && a.State == ledger.ApprovalExpired {
			t.tasks.finish(tk, t.beginResult(lapsed(&tk.res), nil))
			return
		}
		if eff.State != ledger.StateAwaitingApproval || a == nil || a.ApprovalID != tk.res.ApprovalID || a.State != ledger.ApprovalPending {
			t.tasks.mu.Lock()
			tk.ready = true
			t.tasks.mu.Unlock()
		}
	}
}

// beginAgain begins again for a waiting task whose client asked, when the
// approval was decided or retry_after_seconds have passed since the last
// begin (what a polling agent does, so that a grant made since is seen),
// and completes the task unless the answer is still the same wait. One
// begin at a time per task: a second caller finds the task done.
func (t *tools) beginAgain(ctx context.Context, tk *task) {
	tk.beginMu.Lock()
	defer tk.beginMu.Unlock()
	now := time.Now()
	t.tasks.mu.Lock()
	due := tk.status == "working" && tk.watching && (tk.ready || !now.Before(tk.nextBegin))
	t.tasks.mu.Unlock()
	if !due || !now.Add(taskWatchEvery).Before(*tk.res.ExpiresAt) { // near the expiry the watcher answers
		return
	}
	r, err := t.eng.Begin(ctx, tk.in)
	if le := ledger.Classify(err); err != nil && (le.Code == ledger.CodeUnavailable || le.Code == ledger.CodeInternal) {
		t.log.Debug("a task beginning again", "task_id", tk.id, "error", err)
		return
	}
	if err == nil && r.Decision == ledger.DecisionApprovalRequired && r.ApprovalID == tk.res.ApprovalID {
		t.tasks.mu.Lock() // still waiting (one approver of several so far)
		tk.ready, tk.nextBegin = false, now.Add(tk.retry)
		t.tasks.mu.Unlock()
		return
	}
	t.tasks.finish(tk, t.beginResult(r, err))
	t.log.Info("task completed", "task_id", tk.id, "namespace", tk.in.Namespace, "agent_id", tk.in.AgentID)
}

// lapsed is the expiry answer: the action still needs approval, and the
// request lapsed undecided.
func lapsed(res *ledger.BeginResult) *ledger.BeginResult {
	out := *res
	out.RetryAfterSeconds = 0
	out.DimensionWarning, out.BudgetWarning, out.IntegrationWarning = nil, nil, nil
	out.Message = fmt.Sprintf("Approval %s lapsed at %s without a decision. Do not perform this action; begin again with the same key to ask again.",
		res.ApprovalID, res.ExpiresAt.UTC().Format(time.RFC3339))
	return &out
}

// beginResult is the begin tool's result for a begin's answer.
func (t *tools) beginResult(res *ledger.BeginResult, err error) *sdk.CallToolResult {
	if err != nil {
		return errorResult(err)
	}
	out, err := toolResult(beginSpec.name, res, t.beginSummary(res))
	if err != nil {
		return errorResult(err)
	}
	return out
}

// registerTasks adds the tasks methods.
func (t *tools) registerTasks(s *sdk.Server) {
	owner := func(ctx context.Context) Identity {
		id, _ := ctx.Value(ownerKey{}).(Identity)
		return id
	}
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(sdk.AddReceivingCustomMethod(s, "tasks/get", func(ctx context.Context, _ *sdk.ServerSession, p *taskIDParams) (*taskResult, error) {
		tk, err := t.tasks.get(owner(ctx), p.id())
		if err != nil {
			return nil, err
		}
		t.beginAgain(ctx, tk) // the client is here
		return &taskResult{taskInfo: t.tasks.info(tk)}, nil
	}))
	must(sdk.AddReceivingCustomMethod(s, "tasks/result", func(ctx context.Context, _ *sdk.ServerSession, p *taskIDParams) (*sdk.CallToolResult, error) {
		tk, err := t.tasks.get(owner(ctx), p.id())
		if err != nil {
			return nil, err
		}
		tick := time.NewTicker(taskWatchEvery)
		defer tick.Stop()
	wait:
		for {
			t.beginAgain(ctx, tk) // the client is here, waiting
			select {
			case <-tk.done:
				break wait
			case <-tk.gone:
				break wait
			case <-t.done:
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "Ratchet is shutting down and forgets its tasks: begin again with the same idempotency key"}
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-tick.C:
			}
		}
		t.tasks.mu.Lock()
		status, res := tk.status, tk.result
		t.tasks.mu.Unlock()
		if res == nil {
			if status == "cancelled" {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "task was cancelled: it has no result; begin again with the same idempotency key"}
			}
			return nil, taskNotFound()
		}
		out := *res
		out.Meta = sdk.Meta{relatedTask: map[string]string{"taskId": tk.id}}
		return &out, nil
	}))
	must(sdk.AddReceivingCustomMethod(s, "tasks/list", func(ctx context.Context, _ *sdk.ServerSession, p *taskListParams) (*taskListResult, error) {
		if p != nil && p.Cursor != "" {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor: every task is on the first page"}
		}
		return &taskListResult{Tasks: t.tasks.list(owner(ctx))}, nil
	}))
	// tasks/update (2026-07-28) is answered by taskMiddlewareV2; it is
	// registered so that the SDK routes it.
	must(sdk.AddReceivingCustomMethod(s, "tasks/update", func(context.Context, *sdk.ServerSession, *taskIDParams) (*ackV2, error) {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: "tasks/update is of the 2026-07-28 tasks extension"}
	}))
	must(sdk.AddReceivingCustomMethod(s, "tasks/cancel", func(ctx context.Context, _ *sdk.ServerSession, p *taskIDParams) (*taskResult, error) {
		info, err := t.tasks.cancel(owner(ctx), p.id())
		if err != nil {
			return nil, err
		}
		t.log.Info("task cancelled", "task_id", p.id())
		return &taskResult{taskInfo: info}, nil
	}))
}

// The tasks extension of 2026-07-28 (io.modelcontextprotocol/tasks,
// SEP-2663). A client declares it in each request's capabilities; the
// server lists it in server/discover (to that client only) and decides per
// call whether to answer a task: Ratchet does for a begin that is
// approval_required, and answers every other begin as usual. tasks/get
// carries the result; there is no tasks/result or tasks/list, and
// tasks/cancel and tasks/update are acknowledgements. A tool error is a
// completed task there (failed is for JSON-RPC errors).

// tasksExtension is the extension's identifier.
const tasksExtension = "io.modelcontextprotocol/tasks"

// declaresTasksExtension reports whether req's capabilities (in its
// _meta, as the SDK decoded it) include the tasks extension.
func declaresTasksExtension(req sdk.Request) bool {
	p := req.GetParams()
	if p == nil || reflect.ValueOf(p).IsNil() { // a request without params
		return false
	}
	caps, _ := p.GetMeta()["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[tasksExtension]
	return ok
}

// The extension's results.
type (
	taskV2 struct {
		sdk.ResultBase
		ResultType     string          `json:"resultType"`
		TaskID         string          `json:"taskId"`
		Status         string          `json:"status"`
		StatusMessage  string          `json:"statusMessage,omitempty"`
		CreatedAt      string          `json:"createdAt"`
		LastUpdatedAt  string          `json:"lastUpdatedAt"`
		TTLMs          int64           `json:"ttlMs"`
		PollIntervalMs int64           `json:"pollIntervalMs,omitempty"`
		Result         json.RawMessage `json:"result,omitempty"`
	}
	ackV2 struct {
		sdk.ResultBase
		ResultType string `json:"resultType"`
	}
)

// infoV2 is tk as the extension shows it, with resultType rt.
func (ts *taskStore) infoV2(tk *task, rt string) *taskV2 {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	in := tk.info()
	out := &taskV2{ResultType: rt, TaskID: in.TaskID, Status: in.Status, StatusMessage: in.StatusMessage, CreatedAt: in.CreatedAt,
		LastUpdatedAt: in.LastUpdatedAt, TTLMs: in.TTL, PollIntervalMs: in.PollInterval}
	if tk.status == "completed" {
		// The result as the call would have answered it, resultType
		// included (the SDK sets it only on what it sends itself).
		if js, err := json.Marshal(tk.result); err == nil && len(js) > 1 && js[0] == '{' {
			out.Result = append([]byte(`{"resultType":"complete",`), js[1:]...)
		}
	}
	return out
}

func (t *tools) taskMiddlewareV2(ctx context.Context, next sdk.MethodHandler, method string, req sdk.Request) (sdk.Result, error) {
	switch method {
	case "server/discover":
		res, err := next(ctx, method, req)
		dr, ok := res.(*sdk.DiscoverResult)
		if err != nil || !ok || !declaresTasksExtension(req) {
			return res, err
		}
		caps := sdk.ServerCapabilities{}
		if dr.Capabilities != nil {
			caps = *dr.Capabilities
		}
		caps.Extensions = maps.Clone(caps.Extensions)
		caps.AddExtension(tasksExtension, nil)
		out := *dr
		out.Capabilities = &caps
		return &out, nil
	case "tools/call":
		cr, ok := req.(*sdk.CallToolRequest)
		if !ok || cr.Params.Name != beginSpec.name || !declaresTasksExtension(req) {
			break
		}
		tk, err := t.tasks.open(t.identityOf(cr.Extra), 0, true)
		if err != nil {
			return next(ctx, method, req) // no room for a task: the begin answers as usual
		}
		res, err := next(context.WithValue(ctx, taskKey{}, tk), method, req)
		t.tasks.mu.Lock()
		watching := tk.watching
		t.tasks.mu.Unlock()
		if err != nil || !watching {
			t.tasks.remove(tk)
			return res, err
		}
		t.log.Info("task created", "task_id", tk.id, "namespace", tk.owner.Namespace, "agent_id", tk.owner.AgentID, "watching", true)
		return t.tasks.infoV2(tk, "task"), nil
	case "tasks/get", "tasks/cancel", "tasks/update":
		p, _ := req.GetParams().(*taskIDParams)
		owner := t.identityOf(req.GetExtra())
		tk, err := t.tasks.get(owner, p.id())
		if err != nil {
			return nil, err
		}
		switch method {
		case "tasks/get":
			t.beginAgain(ctx, tk) // the client is here
			return t.tasks.infoV2(tk, "complete"), nil
		case "tasks/cancel": // an acknowledgement, whatever the task's state
			if _, err := t.tasks.cancel(owner, tk.id); err == nil {
				t.log.Info("task cancelled", "task_id", tk.id)
			}
		}
		return &ackV2{ResultType: "complete"}, nil // tasks/update: Ratchet asks for no input
	case "tasks/result", "tasks/list":
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + " is not part of the 2026-07-28 tasks extension: tasks/get carries the result"}
	}
	return next(ctx, method, req)
}
