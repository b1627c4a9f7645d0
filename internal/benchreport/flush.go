package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// flushFigures are a "ratchet serve"'s memory around Badger's first
// memtable flush (issue 32): the flush builds a table from the full
// memtable while a new one fills, so it is where a fresh sidecar's memory
// peaks.
type flushFigures struct {
	effects    int64   // effects begun when the first table was written
	flushed    bool    // whether a table was written at all
	peak, rss  float64 // VmHWM and VmRSS, MiB, a few seconds after
	heap       float64 // Go heap in use then, MiB
	attempts   float64 // delivery attempts, all results (the dead-sink run)
	events     int64   // events queued (the dead-sink run)
	elapsed    time.Duration
	tablesSeen int
}

// flushDeadline bounds each run: a ledger that has not flushed by then is
// reported as such.
const flushDeadline = 3 * time.Minute

// benchFlushNoSink drives begin+report pairs through MCP into a fresh
// "ratchet serve" (no sink) until Badger writes its first table, then
// reads the process's memory.
func benchFlushNoSink(dir string) (flushFigures, error) {
	srv, err := startServeWith(dir, "", "GOMEMLIMIT="+serveMemLimit)
	if err != nil {
		return flushFigures{}, err
	}
	defer srv.stop()
	return driveUntilFlush(srv, dir, 0, beginReport("flush:"))
}

// benchFlushDeadSink queues events approval requests for a webhook sink
// whose port refuses connections, then lets the worker retry for 30 s,
// and reads the process's memory and its delivery attempts.
func benchFlushDeadSink(dir string, events int64) (flushFigures, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return flushFigures{}, err
	}
	dead := ln.Addr().String()
	ln.Close()
	cfg := fmt.Sprintf(`notify:
  sinks:
    - {name: hook, type: webhook, url: "http://%s/hook", secret_env: BENCH_HOOK_SECRET}
  routes:
    - sinks: [hook]
policies:
  - match: "bench.approve"
    approval_threshold_micros: 0
`, dead)
	srv, err := startServeWith(dir, cfg, "GOMEMLIMIT="+serveMemLimit, "BENCH_HOOK_SECRET=bench-secret")
	if err != nil {
		return flushFigures{}, err
	}
	defer srv.stop()
	fig, err := driveUntilFlush(srv, dir, events, func(ctx context.Context, cs *sdk.ClientSession, k int64) error {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
			"idempotency_key": fmt.Sprint("dead:", k), "effect_type": "bench.approve", "estimated_cost_micros": 1}})
		if err != nil {
			return fmt.Errorf("begin: %v", err)
		}
		if st, _ := res.StructuredContent.(map[string]any); st["decision"] != "approval_required" {
			return fmt.Errorf("begin: want approval_required, got %v", res.StructuredContent)
		}
		return nil
	})
	fig.events = events
	return fig, err
}

var deliveriesRe = regexp.MustCompile(`(?m)^ratchet_notify_deliveries_total\{[^}]*\} (\S+)$`)

// driveUntilFlush runs pair on 16 MCP sessions until the ledger's first
// table appears (limit 0) or, with a limit, for limit pairs and then 30 s
// of the worker's retries; then it reads the process's memory.
func driveUntilFlush(srv *served, dir string, limit int64, pair func(context.Context, *sdk.ClientSession, int64) error) (flushFigures, error) {
	var out flushFigures
	ctx, cancel := context.WithTimeout(context.Background(), flushDeadline)
	defer cancel()
	// Tables written under the load: the store's checkpoint at open
	// flushes Badger's memtable (the ledger's id and its log's applied
	// key) to a small table of its own before the server listens.
	sst := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "ledger", "*.sst"))
		return len(m)
	}
	atOpen := sst()
	tables := func() int { return sst() - atOpen }
	var (
		next, done atomic.Int64
		stop       atomic.Bool
		wg         sync.WaitGroup
		errOnce    sync.Once
		loadErr    error
	)
	t0 := time.Now()
	for range 16 {
		cs, err := mcp.Connect(ctx, srv.mcp, "", "bench")
		if err != nil {
			return out, err
		}
		defer cs.Close()
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				k := next.Add(1)
				if limit > 0 && k > limit {
					return
				}
				if err := pair(ctx, cs, k); err != nil {
					errOnce.Do(func() { loadErr = err })
					stop.Store(true)
					return
				}
				done.Add(1)
			}
		})
	}
	if limit == 0 {
		for tables() == 0 && ctx.Err() == nil && !stop.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		out.effects, out.flushed = done.Load(), tables() > 0
		stop.Store(true)
		wg.Wait()
		time.Sleep(3 * time.Second) // the flush's last allocations and a GC cycle
	} else {
		wg.Wait()
		out.effects = done.Load()
		time.Sleep(30 * time.Second)
		out.flushed = tables() > 0
	}
	out.elapsed = time.Since(t0)
	out.tablesSeen = tables()
	if loadErr != nil {
		return out, loadErr
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", srv.cmd.Process.Pid))
	if err != nil {
		return out, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmHWM:":
			out.peak = kb / 1024
		case "VmRSS:":
			out.rss = kb / 1024
		}
	}
	resp, err := http.Get(srv.admin + "/metrics")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	out.heap = metricMiB(heapRe, m)
	for _, d := range deliveriesRe.FindAllSubmatch(m, -1) {
		v, _ := strconv.ParseFloat(string(d[1]), 64)
		out.attempts += v
	}
	return out, nil
}

// writeFlush writes the memory-at-first-flush table.
func writeFlush(w func(string, ...any), noSink, deadSink flushFigures, errNo, errDead error) {
	w("### Memory at the first memtable flush\n\n")
	w("A fresh `ratchet serve` (GOMEMLIMIT %s, as in the Kubernetes manifest), 16 MCP sessions. Without a sink: begin+report pairs until Badger writes its first table under the load (a `*.sst` file appears in the ledger directory besides the small one the store's checkpoint at open writes), then 3 s; the peak is the process's VmHWM (/proc/<pid>/status), its most resident at any moment since it started. With a dead sink: approval requests for a webhook whose port refuses connections, then 30 s of the worker's retries; writes per event are the worker's (a claim and a record per delivery attempt, from `ratchet_notify_deliveries_total`).\n\n", serveMemLimit)
	w("| run | effects | first table written | peak RSS (VmHWM) | RSS, Go heap in use after | worker writes per event | target |\n|---|---|---|---|---|---|---|\n")
	row := func(name string, f flushFigures, err error, writes string) {
		if err != nil {
			w("| %s | failed: %v | | | | | |\n", name, err)
			return
		}
		w("| %s | %d | %v (%d tables) | %.0f MiB | %.0f MiB, %.0f MiB | %s | peak < 192 MiB |\n", name, f.effects, f.flushed, f.tablesSeen, f.peak, f.rss, f.heap, writes)
	}
	row("no sink", noSink, errNo, "none")
	row(fmt.Sprintf("dead webhook sink, %d approval requests", deadSink.events), deadSink, errDead,
		fmt.Sprintf("%.3f (%.0f attempts)", 2*deadSink.attempts/float64(max(deadSink.events, 1)), deadSink.attempts))
	w("\n")
}
