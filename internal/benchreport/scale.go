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

// serveRSS starts "ratchet serve" on dir, drives MCP load for d, and reads
// the process's resident set size (total, anonymous and file-backed) and,
// from its metrics, its Go heap in use.
func serveRSS(dir string, d time.Duration) (memFigures, error) {
	var out memFigures
	bin := filepath.Join(dir, "ratchet")
	if b, err := exec.Command("go", "build", "-o", bin, "./cmd/ratchet").CombinedOutput(); err != nil {
		return out, fmt.Errorf("building ratchet: %v %s", err, b)
	}
	cfg := filepath.Join(dir, "bench.yaml")
	os.WriteFile(cfg, []byte("listen: {mcp: '127.0.0.1:0', admin: '127.0.0.1:0', proxy: '127.0.0.1:0'}\n"), 0o600)
	cmd := exec.Command(bin, "serve", "--config", cfg, "--data-dir", dir)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+serveMemLimit)
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		return out, err
	}
	defer cmd.Wait()
	defer cmd.Process.Signal(syscall.SIGTERM)
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
	var url, admin string
	select {
	case u := <-urls:
		url, admin = u[0], u[1]
	case log := <-exited:
		return out, fmt.Errorf("ratchet serve exited:\n%s", log)
	case <-time.After(60 * time.Second):
		return out, fmt.Errorf("ratchet serve did not start")
	}
	_, err := mcpPairs(url, 16, d, func(ctx context.Context, cs *sdk.ClientSession, k int64) error {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_begin_effect", Arguments: map[string]any{
			"idempotency_key": fmt.Sprint("rss:", k), "effect_type": "bench.charge"}})
		if err != nil || res.IsError {
			return fmt.Errorf("begin: %v %v", err, res)
		}
		_, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "ratchet_report_effect", Arguments: map[string]any{
			"effect_id": res.StructuredContent.(map[string]any)["effect_id"], "outcome": "succeeded"}})
		return err
	})
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
