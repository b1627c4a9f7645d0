package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type scaleResult struct {
	preloaded int
	preload   time.Duration
	open      time.Duration
	loaded    result
	empty     result // the same section's empty ledger
	mem       memFigures
}

// memFigures are a process's resident memory in MiB: in all, anonymous
// (Go heap, stacks, Badger's tables in memory) and file-backed (mapped
// ledger files), and the Go heap in use as the process reports it, at the
// end of the load; and the most it was resident at any moment (VmHWM:
// a compaction building tables in memory can pass the end's figure many
// times over).
type memFigures struct {
	rss, anon, file, heap, peak float64
}

// benchScale fills a ledger with n effects, then measures opening it, the
// engine at 64 callers on it, and the resident memory of a real
// "ratchet serve" on it under load.
func benchScale(dir string, n int, d time.Duration) (scaleResult, error) {
	var out scaleResult
	ledgerDir := filepath.Join(dir, "ledger")
	// The preload is not what is measured, so it runs without fsync.
	eng, _, err := openEngine(ledgerDir, false)
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	r := pairs(eng, 64, time.Hour, int64(n))
	out.preload, out.preloaded = time.Since(t0), r.ops
	if err := eng.Close(context.Background()); err != nil {
		return out, err
	}
	eng, open, err := openEngine(ledgerDir, true)
	if err != nil {
		return out, err
	}
	out.open = open
	// The loaded and an empty ledger are measured alternately, twice each,
	// keeping each one's best run, as in the MCP and proxy sections: drift
	// (here the compaction a bulk preload leaves behind) favours neither.
	empty, _, err := openEngine(filepath.Join(dir, "empty", "ledger"), true)
	if err != nil {
		eng.Close(context.Background())
		return out, err
	}
	for range 2 {
		if r := pairs(eng, 64, d, 0); r.perSec > out.loaded.perSec {
			out.loaded = r
		}
		if r := pairs(empty, 64, d, 0); r.perSec > out.empty.perSec {
			out.empty = r
		}
	}
	empty.Close(context.Background())
	if err := eng.Close(context.Background()); err != nil {
		return out, err
	}
	out.mem, err = serveRSS(dir, d)
	return out, err
}

var (
	mcpURLRe   = regexp.MustCompile(`mcp=(http://\S+/mcp)`)
	adminURLRe = regexp.MustCompile(`admin=(http://\S+)`)
	heapRe     = regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)$`)
)

// serveMemLimit is the GOMEMLIMIT the Kubernetes manifest gives the
// sidecar (configs/kubernetes), under a 512 MiB memory limit.
const serveMemLimit = "400MiB"

// served is a "ratchet serve" the bench started.
type served struct {
	cmd        *exec.Cmd
	mcp, admin string
}

// stop ends it (SIGTERM) and waits for it to exit.
func (s *served) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
}

// startServe builds ratchet into dir and starts "ratchet serve" on dir
// with the default configuration but for listening on free loopback ports,
// with env added to its environment; it returns once the server says where
// it listens.
func startServe(dir string, env ...string) (*served, error) {
	return startServeWith(dir, "", env...)
}

// startServeWith is startServe with more configuration (YAML, appended
// to the listen line).
func startServeWith(dir, extra string, env ...string) (*served, error) {
	bin := filepath.Join(dir, "ratchet")
	if b, err := exec.Command("go", "build", "-o", bin, "./cmd/ratchet").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building ratchet: %v %s", err, b)
	}
	cfg := filepath.Join(dir, "bench.yaml")
	os.WriteFile(cfg, []byte("listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\n"+extra), 0o600)
	cmd := exec.Command(bin, "serve", "--config", cfg, "--data-dir", dir)
	cmd.Env = append(os.Environ(), env...)
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &served{cmd: cmd}
	urls := make(chan [2]string, 1)
	exited := make(chan string, 1)
	go func() {
		var log []string
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log = append(log, sc.Text())
			m, a := mcpURLRe.FindStringSubmatch(sc.Text()), adminURLRe.FindStringSubmatch(sc.Text())
			if m != nil && a != nil {
				urls <- [2]string{m[1], a[1]}
			}
		}
		exited <- strings.Join(log, "\n")
	}()
	select {
	case u := <-urls:
		s.mcp, s.admin = u[0], u[1]
		return s, nil
	case log := <-exited:
		cmd.Wait()
		return nil, fmt.Errorf("ratchet serve exited:\n%s", log)
	case <-time.After(60 * time.Second):
		s.stop()
		return nil, fmt.Errorf("ratchet serve did not start")
	}
}

// serveRSS starts "ratchet serve" on dir, drives MCP load for d, and reads
// the process's resident set size (total, anonymous and file-backed) and,
// from its metrics, its Go heap in use.
func serveRSS(dir string, d time.Duration) (memFigures, error) {
	var out memFigures
	srv, err := startServe(dir, "GOMEMLIMIT="+serveMemLimit)
	if err != nil {
		return out, err
	}
	defer srv.stop()
	cmd, url, admin := srv.cmd, srv.mcp, srv.admin
	_, err = mcpPairs(url, 16, d, beginReport("rss:"))
	if err != nil {
		return out, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		return out, err
	}
	mib := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			kb, _ := strconv.ParseFloat(f[1], 64)
			mib[f[0]] = kb / 1024
		}
	}
	if mib["VmRSS:"] == 0 {
		return out, fmt.Errorf("no VmRSS")
	}
	out.rss, out.anon, out.file, out.peak = mib["VmRSS:"], mib["RssAnon:"], mib["RssFile:"], mib["VmHWM:"]
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	if h := heapRe.FindSubmatch(m); h != nil {
		v, _ := strconv.ParseFloat(string(h[1]), 64)
		out.heap = v / (1 << 20)
	}
	return out, nil
}

// idleFigures are an idle "ratchet serve"'s CPU, as a share of one core,
// and its wake-ups a second (context switches of all its threads: each is
// a thread that ran and went back to sleep, or was made to).
type idleFigures struct {
	cpuPct, wakeups float64
	threads         int
}

// benchIdle starts "ratchet serve" with an empty ledger in dir and the
// default configuration, lets it settle (startup, and the store's first
// idle spell, see badgerstore), and measures it for d with no traffic.
func benchIdle(dir string, d time.Duration) (idleFigures, error) {
	var out idleFigures
	srv, err := startServe(dir)
	if err != nil {
		return out, err
	}
	defer srv.stop()
	time.Sleep(15 * time.Second)
	pid := srv.cmd.Process.Pid
	cpu0, sw0, _, err := procFigures(pid)
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	time.Sleep(d)
	cpu1, sw1, threads, err := procFigures(pid)
	if err != nil {
		return out, err
	}
	el := time.Since(t0).Seconds()
	return idleFigures{cpuPct: 100 * (cpu1 - cpu0).Seconds() / el, wakeups: float64(sw1-sw0) / el, threads: threads}, nil
}

// procFigures reads a process's CPU time (/proc/<pid>/stat) and the
// context switches of all its threads (/proc/<pid>/task/*/status).
func procFigures(pid int) (time.Duration, int64, int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	var sw int64
	for _, t := range tasks {
		st, err := os.ReadFile(t)
		if err != nil {
			continue // a thread that exited
		}
		for _, l := range strings.Split(string(st), "\n") {
			if f := strings.Fields(l); len(f) == 2 && strings.HasSuffix(f[0], "ctxt_switches:") {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				sw += n
			}
		}
	}
	cpu, _ := statCPU(b)
	return cpu, sw, len(tasks), nil
}

// beginReport is one MCP begin+report pair of a distinct key (prefix and
// the pair's number) through Ratchet's tools: the load of the scale and
// flush sections.
func beginReport(prefix string) func(ctx context.Context, cs *sdk.ClientSession, k int64) error {
	return func(ctx context.Context, cs *sdk.ClientSession, k int64) error {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
			"idempotency_key": fmt.Sprint(prefix, k), "effect_type": "bench.charge"}})
		if err != nil || res.IsError {
			return fmt.Errorf("begin: %v %v", err, res)
		}
		_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_report_effect", Arguments: map[string]any{
			"effect_id": res.StructuredContent.(map[string]any)["effect_id"], "outcome": "succeeded"}})
		return err
	}
}
