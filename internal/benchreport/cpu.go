package main

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ratchet-mcp/ratchet/mcp"
)

// The CPU figure for A/Bs: instructions executed per operation, counted by
// valgrind's callgrind. Rates, latencies and even getrusage's CPU time per
// operation move with whatever else the machine runs (on a 2-core machine
// shared with other work, CPU per engine pair measured 276-350 µs in five
// runs of one commit, as batches shrink and grow); callgrind counts the
// instructions this process executes in user space, which two runs of one
// commit agree on within about 4% (docs/design.md). It leaves out the kernel's share (the
// fdatasyncs, the network), which getrusage's figures in sections 1-3 keep.
//
// Each workload runs in a child process (this program with -cpu-worker)
// under callgrind, with n operations and with 2n, each until its two
// lowest counts agree (the lowest kept), and the figure is the difference
// over n: what n operations cost after n of warm-up, without the setup.

// cpuWorkloads are what the figure is measured for: the engine pair as in
// section 1 (64 callers), and each adapter with its floor (16 clients).
var cpuWorkloads = []struct {
	kind, name string
	n          int64
	floor      string // the workload this one is compared with
	target     float64
}{
	{"engine", "engine begin+report pair, 64 callers", 512, "", 0},
	{"mcp-noop", "MCP pair of no-op tool calls (the floor), 16 sessions", 128, "", 0},
	{"mcp", "MCP begin+report pair, 16 sessions", 128, "mcp-noop", 2},
	{"proxy-bare", "bare proxy POST (the floor), 16 clients", 256, "", 0},
	{"proxy", "proxied effect POST, 16 clients", 256, "proxy-bare", 3},
}

// cpuFigure is one workload's instructions per operation.
type cpuFigure struct {
	kind, name string
	perOp      float64
	floor      string
	target     float64
}

// cpuAgree is how close a size's two lowest counts must be, as a fraction
// of the lower, before the lowest is taken; cpuMaxRuns bounds the runs of
// a size that keeps spinning.
const (
	cpuAgree   = 0.02
	cpuMaxRuns = 5
)

// agree reports whether the two lowest of counts are within cpuAgree.
func agree(counts []int64) bool {
	if len(counts) < 2 {
		return false
	}
	c := slices.Sorted(slices.Values(counts))
	return float64(c[1]-c[0]) <= cpuAgree*float64(c[0])
}

var errNoValgrind = errors.New("valgrind is not installed (Debian: apt-get install -y valgrind)")

// benchCPU measures the instructions per operation of the workloads named
// in only (comma-separated kinds, each with its floor), or of every
// workload when only is empty.
func benchCPU(dir, only string) ([]cpuFigure, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		return nil, errNoValgrind
	}
	want := map[string]bool{}
	for k := range strings.SplitSeq(only, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		known := false
		for _, wl := range cpuWorkloads {
			if wl.kind == k {
				known, want[k] = true, true
				if wl.floor != "" {
					want[wl.floor] = true
				}
			}
		}
		if !known {
			return nil, fmt.Errorf("-cpu %q: no such workload (engine, mcp-noop, mcp, proxy-bare, proxy)", k)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var out []cpuFigure
	for _, wl := range cpuWorkloads {
		if len(want) > 0 && !want[wl.kind] {
			continue
		}
		// The n and 2n runs go side by side: callgrind runs a process on
		// one thread at a time, so two keep two cores busy. Now and then a
		// run under callgrind spins in the Go scheduler (findRunnable,
		// goschedImpl, timers), which adds instructions (once 20 times a
		// workload's, and in one make bench both 2n runs of the engine
		// pair, which read 970k a pair against 250k) and never takes any
		// away (docs/design.md, "A tool result written directly"). So each
		// size runs until its two lowest counts agree within cpuAgree, at
		// least twice and at most cpuMaxRuns times, and the lowest counts.
		var counts [2][]int64
		for rep := 0; rep < cpuMaxRuns && (rep < 2 || !agree(counts[0]) || !agree(counts[1])); rep++ {
			var got [2]int64
			var errs [2]error
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Go(func() {
					got[i], errs[i] = callgrind(self, filepath.Join(dir, fmt.Sprint(wl.kind, "-", rep, "-", i)), wl.kind, wl.n*int64(i+1))
				})
			}
			wg.Wait()
			if err := errors.Join(errs[:]...); err != nil {
				return nil, fmt.Errorf("%s: %w", wl.name, err)
			}
			for i, n := range got {
				counts[i] = append(counts[i], n)
			}
		}
		ir := [2]int64{slices.Min(counts[0]), slices.Min(counts[1])}
		out = append(out, cpuFigure{kind: wl.kind, name: wl.name, perOp: float64(ir[1]-ir[0]) / float64(wl.n), floor: wl.floor, target: wl.target})
	}
	return out, nil
}

// callgrindGODEBUG is the environment a Go program runs with under
// callgrind: asynchronous preemption off (callgrind asserts on its
// signals) and RDTSCP off (valgrind 3.19 cannot decode it, and the runtime
// reads the clock with it where the CPU has it).
const callgrindGODEBUG = "GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off"

var irRe = regexp.MustCompile(`Collected : (\d+)`)

// callgrind runs "self -cpu-worker kind:n:dir" under callgrind and returns
// the instructions it executed. Go's asynchronous preemption (signals) is
// off: callgrind's signal handling asserts on it.
func callgrind(self, dir, kind string, n int64) (int64, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "callgrind.out"),
		self, "-cpu-worker", fmt.Sprintf("%s:%d:%s", kind, n, dir))
	cmd.Env = append(os.Environ(), callgrindGODEBUG)
	b, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("callgrind: %v\n%s", err, b)
	}
	m := irRe.FindSubmatch(b)
	if m == nil {
		return 0, fmt.Errorf("callgrind printed no instruction count:\n%s", b)
	}
	return strconv.ParseInt(string(m[1]), 10, 64)
}

// cpuWorker runs one workload n times: arg is kind:n:dir.
func cpuWorker(arg string) error {
	parts := strings.SplitN(arg, ":", 3)
	if len(parts) != 3 {
		return fmt.Errorf("-cpu-worker %q: want kind:n:dir", arg)
	}
	n, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return fmt.Errorf("-cpu-worker %q: %w", arg, err)
	}
	kind, dir := parts[0], parts[2]
	if c, ok := strings.CutPrefix(kind, "engine-"); ok {
		// engine-C is no row of the table: the engine pair from C callers,
		// run by hand (docs/development.md). engine-16 tells an adapter's
		// own instructions from its engine pair's, whose batches are
		// smaller at the adapters' 16 callers than at 64; engine-1 is one
		// op a batch, each batch's fixed cost in full.
		callers, err := strconv.Atoi(c)
		if err != nil || callers < 1 {
			return fmt.Errorf("-cpu-worker: unknown workload %q", kind)
		}
		return enginePairs(dir, callers, n)
	}
	switch kind {
	case "engine":
		return enginePairs(dir, 64, n)
	case "mcp", "mcp-noop":
		eng, _, err := openEngine(filepath.Join(dir, "ledger"), true)
		if err != nil {
			return err
		}
		defer eng.Close(context.Background())
		srv, pair := httptest.NewServer(mcp.Handler(mcp.New(eng, nil), nil)), ratchetMCPPair
		if kind == "mcp-noop" {
			srv, pair = httptest.NewServer(mcp.Handler(noopServer(), nil)), noopPair
		}
		defer srv.Close()
		_, err = mcpPairsN(srv.URL, 16, n, pair)
		return err
	case "proxy", "proxy-bare":
		px, err := startProxies(filepath.Join(dir, "ledger"))
		if err != nil {
			return err
		}
		defer px.close()
		base := px.ratchet.URL + "/stripe"
		if kind == "proxy-bare" {
			base = px.bare.URL
		}
		_, err = httpLoadN(16, time.Hour, n, post(base))
		return err
	}
	return fmt.Errorf("-cpu-worker: unknown workload %q", kind)
}

// enginePairs runs n durable engine pairs from callers callers on a new
// ledger in dir.
func enginePairs(dir string, callers int, n int64) error {
	eng, _, err := openEngine(filepath.Join(dir, "ledger"), true)
	if err != nil {
		return err
	}
	defer eng.Close(context.Background())
	pairs(eng, callers, time.Hour, n)
	return nil
}

// writeCPU writes the CPU figures' table.
func writeCPU(w func(string, ...any), figs []cpuFigure, err error) {
	w("CPU per operation, for A/Bs\n\n")
	w("Instructions executed in user space per operation, counted by valgrind's callgrind (`go run ./internal/benchreport -only cpu`): each workload runs in a child process under callgrind with n and with 2n operations, each until its two lowest counts agree within %.0f%% (at most %d runs), keeping the lowest (a run now and then spins in the Go scheduler, which only adds instructions), and the figure is the difference over n (setup and warm-up left out). "+
		"Two runs of one commit agreed within 4%% (docs/design.md), whatever else the machine runs, where rates and getrusage's CPU time move by a quarter on a busy 2-core machine: compare commits with this table. "+
		"It leaves out the kernel's work (fdatasyncs, loopback networking), which the CPU per pair of sections 1-3 includes; under callgrind a process runs one thread at a time, so batches are not those of a native run.\n\n", cpuAgree*100, cpuMaxRuns)
	if err != nil {
		w("Skipped: %v\n\n", err)
		return
	}
	by := map[string]cpuFigure{}
	w("| operation | instructions per operation | × its floor | target |\n|---|---|---|---|\n")
	for _, f := range figs {
		by[f.kind] = f
		ratio, target := "", ""
		if fl, ok := by[f.floor]; ok {
			ratio, target = fmt.Sprintf("%.2f", f.perOp/fl.perOp), fmt.Sprintf("≤ %.0f× (CPU)", f.target)
		}
		w("| %s | %.0fk | %s | %s |\n", f.name, f.perOp/1000, ratio, target)
	}
	w("\n")
}
