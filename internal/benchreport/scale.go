package main

import (
	"bufio"
	"context"
	"encoding/json"
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
	settle    time.Duration // both sides idle until neither wrote, before the slices
	loaded    sideFigures
	empty     sideFigures // the same section's empty ledger
	capped    bool        // scaleCap ended the slices before both sides wrote scaleMemtables
	mem       memFigures
}

// sideFigures are one side's totals over its slices and its drain: the
// rate is its pairs over the time they took, the drain included.
type sideFigures struct {
	pairs, slices, memtables int
	elapsed, drain, cpu      time.Duration
	written                  int64 // bytes the ledger's block device wrote while this side ran (deviceWritten); -1 unknown
	p99                      time.Duration
}

func (f sideFigures) perSec() float64 { return float64(f.pairs) / f.elapsed.Seconds() }

// The scale section's slices: each side runs scaleSlice pairs at a time,
// the two alternating, until each has written scaleMemtables memtables
// (16 MiB each, about 6,000 pairs): several level 0 compactions each at
// Badger's trigger of 8 or 16 level 0 tables, so the mean does not depend
// on where they fall. scaleCap bounds the slices on a slow machine.
const (
	scaleSlice     = 16000
	scaleMemtables = 32
	scaleCap       = 5 * time.Minute
)

// memFigures are a process's resident memory in MiB: in all, anonymous
// (Go heap, stacks, Badger's tables in memory) and file-backed (mapped
// ledger files), and the Go heap in use as the process reports it, at the
// end of the load; and the most it was resident at any moment (VmHWM:
// a compaction building tables in memory can pass the end's figure many
// times over).
type memFigures struct {
	rss, anon, file, heap, peak float64
	heapGoal                    float64 // the Go heap's size at which the next collection starts
	files                       fileMiB
}

// fileMiB is a process's file-backed resident pages in MiB, by what is
// mapped: the ledger's tables (each table's index and last block are read
// through its mapping when it opens, and Linux maps the page cache around
// each page read), Badger's logs (the memtable's, written through its
// mapping as it fills, and the value log), the program itself, and the
// rest (the C library and such).
type fileMiB struct {
	tables, logs, binary, other float64
}

// fileResident reads /proc/<pid>/smaps text: each mapping's resident
// pages less its anonymous ones (a private mapping's written pages), by
// the file mapped; exe is the program's path.
func fileResident(smaps []byte, exe string) fileMiB {
	var out fileMiB
	var cur *float64
	var rss float64
	flush := func() {
		if cur != nil {
			*cur += rss / 1024
		}
		cur, rss = nil, 0
	}
	for line := range strings.Lines(string(smaps)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's first line: range, perms, offset, dev, inode[, path]
			flush()
			if len(f) < 6 || strings.HasPrefix(f[5], "[") || f[4] == "0" {
				continue // anonymous: the heap, stacks, [vdso]
			}
			switch path := f[5]; {
			case strings.HasSuffix(path, ".sst"):
				cur = &out.tables
			case strings.HasSuffix(path, ".mem"), strings.HasSuffix(path, ".vlog"):
				cur = &out.logs
			case path == exe:
				cur = &out.binary
			default:
				cur = &out.other
			}
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "Rss:":
			rss += kb
		case "Anonymous:":
			rss -= kb
		}
	}
	flush()
	return out
}

// benchScale fills a ledger with n effects, then measures opening it, the
// engine at 64 callers on it against an empty ledger, and the resident
// memory of a real "ratchet serve" on it under load for d.
//
// Each ledger's engine runs in its own process (this program with
// -scale-worker), and the one not running a slice is paused (SIGSTOP):
// a compaction, Badger's and so the ledger's, runs only in its own side's
// slices, and each side's CPU and disk writes are its process's. Both
// first settle (run idle until neither writes); after the slices each side
// runs alone, idle, until its compactions are done, and that drain counts
// in its time: a side whose writes leave a base-level rewrite behind pays
// for it.
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
	loaded, err := startScaleSide(ledgerDir)
	if err != nil {
		return out, err
	}
	defer loaded.kill()
	out.open = loaded.open
	empty, err := startScaleSide(filepath.Join(dir, "empty", "ledger"))
	if err != nil {
		return out, err
	}
	defer empty.kill()
	sides := []*scaleSide{loaded, empty}
	t0 = time.Now()
	for _, s := range sides {
		resume(s.cmd.Process)
	}
	settled(sides...)
	out.settle = time.Since(t0)
	for _, s := range sides {
		if err := s.pause(); err != nil {
			return out, err
		}
		s.f = sideFigures{}
	}
	t0 = time.Now()
	for loaded.f.memtables < scaleMemtables || empty.f.memtables < scaleMemtables {
		if out.capped = time.Since(t0) > scaleCap; out.capped {
			break
		}
		for _, s := range sides {
			if s.f.memtables < scaleMemtables {
				if err := s.slice(); err != nil {
					return out, err
				}
			}
		}
	}
	for _, s := range sides {
		if err := s.finish(); err != nil {
			return out, err
		}
	}
	out.loaded, out.empty = loaded.f, empty.f
	out.mem, err = serveRSS(dir, d)
	return out, err
}

// scaleSide is a -scale-worker process and its totals since its last
// pause after settling.
type scaleSide struct {
	cmd  *exec.Cmd
	dir  string
	in   io.WriteCloser
	out  *json.Decoder
	open time.Duration
	f    sideFigures
	// the process's counters at its last pause, and the device's at its
	// last resume
	cpu       time.Duration
	memTables uint64 // the store's count at the last slice's answer
	devAt     int64
}

// scaleAnswer is a -scale-worker's answer to a line: its open time at
// start, a slice's pairs and time and the memtables its store has begun
// since it opened, and at "end" its begins' p99.
type scaleAnswer struct {
	Open, Elapsed, P99 time.Duration
	Pairs              int
	MemTables          uint64
	Err                string
}

// startScaleSide starts a -scale-worker on dir and returns it paused,
// once it has opened the ledger.
func startScaleSide(dir string) (*scaleSide, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &scaleSide{cmd: exec.Command(self, "-scale-worker", dir), dir: dir, devAt: deviceWritten(dir)}
	s.cmd.Stderr = os.Stderr
	if s.in, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.out = json.NewDecoder(stdout)
	a, err := s.answer()
	if err != nil {
		s.kill()
		return nil, err
	}
	s.open, s.memTables = a.Open, a.MemTables
	return s, s.pause()
}

func (s *scaleSide) answer() (scaleAnswer, error) {
	var a scaleAnswer
	if err := s.out.Decode(&a); err != nil {
		return a, fmt.Errorf("scale worker on %s: %w", s.dir, err)
	}
	if a.Err != "" {
		return a, fmt.Errorf("scale worker on %s: %s", s.dir, a.Err)
	}
	return a, nil
}

// pause stops the process and adds what it used since the last pause, and
// what the device wrote since the last resume, to its totals. The device
// is read rather than the process's /proc/<pid>/io write_bytes, which
// counts a dirtied page cache folio (up to 2 MiB here) for each small
// overwrite of the store's preallocated log (docs/design.md).
func (s *scaleSide) pause() error {
	if err := pauseProcess(s.cmd.Process); err != nil {
		return err
	}
	waitStopped(s.cmd.Process.Pid)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return err
	}
	cpu, ok := statCPU(b)
	if !ok {
		return fmt.Errorf("scale worker: cannot read its CPU time")
	}
	written := deviceWritten(s.dir)
	s.f.cpu += cpu - s.cpu
	if written < 0 || s.devAt < 0 || s.f.written < 0 {
		s.f.written = -1
	} else {
		s.f.written += written - s.devAt
	}
	s.cpu = cpu
	return nil
}

// resume lets the process run again, noting the device's counter.
func (s *scaleSide) resume() {
	s.devAt = deviceWritten(s.dir)
	resume(s.cmd.Process)
}

// slice resumes the process, runs scaleSlice pairs and pauses it again.
func (s *scaleSide) slice() error {
	s.resume()
	fmt.Fprintln(s.in, scaleSlice)
	a, err := s.answer()
	if err != nil {
		return err
	}
	s.f.pairs += a.Pairs
	s.f.elapsed += a.Elapsed
	s.f.slices++
	s.f.memtables += int(a.MemTables - s.memTables)
	s.memTables = a.MemTables
	return s.pause()
}

// finish lets the process run idle until its compactions are done (the
// drain, counted in its time), then ends it and reads its begins' p99.
func (s *scaleSide) finish() error {
	s.resume()
	s.f.drain = settled(s)
	s.f.elapsed += s.f.drain
	if err := s.pause(); err != nil {
		return err
	}
	resume(s.cmd.Process)
	fmt.Fprintln(s.in, "end")
	a, err := s.answer()
	if err != nil {
		return err
	}
	s.f.p99 = a.P99
	s.in.Close()
	return s.cmd.Wait()
}

func (s *scaleSide) kill() {
	if s.cmd.ProcessState == nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// settled waits, the processes running, until none has written to disk
// for a second (compaction done: Badger writes its tables as it builds
// them), at most a minute, and returns how long until the last write
// seen.
func settled(sides ...*scaleSide) time.Duration {
	t0 := time.Now()
	last := make([]int64, len(sides))
	for i, s := range sides {
		last[i] = writeBytes(s.cmd.Process.Pid)
	}
	lastChange, still := t0, 0
	for still < 4 && time.Since(t0) < time.Minute {
		time.Sleep(250 * time.Millisecond)
		changed := false
		for i, s := range sides {
			if w := writeBytes(s.cmd.Process.Pid); w != last[i] {
				last[i], changed = w, true
			}
		}
		if changed {
			lastChange, still = time.Now(), 0
		} else {
			still++
		}
	}
	return lastChange.Sub(t0)
}

// writeBytes is the bytes a process has caused to be written to disk
// (/proc/<pid>/io write_bytes), -1 where that cannot be read.
func writeBytes(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// waitStopped waits (at most a second) until a signalled process is
// stopped (state T in /proc/<pid>/stat), so that its counters no longer
// move.
func waitStopped(pid int) {
	for range 100 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "T" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scaleWorker is one side of the scale section: it opens an engine on dir
// (syncing), answers its open time, then for each line on stdin, a number
// of pairs, runs them at 64 callers and answers their count and time; on
// "end" it answers its begins' p99 over all its slices and closes.
func scaleWorker(dir string) error {
	enc := json.NewEncoder(os.Stdout)
	eng, st, open, err := openEngineStore(dir, true)
	if err != nil {
		enc.Encode(scaleAnswer{Err: err.Error()})
		return err
	}
	// The loaded ledger's preload used the "bench:" keys.
	keyPrefix = "scale:"
	enc.Encode(scaleAnswer{Open: open, MemTables: st.MemTables()})
	var lat latencies
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "end" {
			enc.Encode(scaleAnswer{P99: lat.pct(0.99)})
			break
		}
		n, err := strconv.Atoi(sc.Text())
		if err != nil {
			return fmt.Errorf("-scale-worker: %q: %w", sc.Text(), err)
		}
		t0 := time.Now()
		r := pairsInto(&lat, eng, 64, time.Hour, int64(n))
		enc.Encode(scaleAnswer{Pairs: r.ops, Elapsed: time.Since(t0), MemTables: st.MemTables()})
	}
	return eng.Close(context.Background())
}

var (
	mcpURLRe   = regexp.MustCompile(`mcp=(http://\S+/mcp)`)
	adminURLRe = regexp.MustCompile(`admin=(http://\S+)`)
	heapRe     = regexp.MustCompile(`(?m)^go_memstats_heap_inuse_bytes (\S+)$`)
	heapGoalRe = regexp.MustCompile(`(?m)^go_memstats_next_gc_bytes (\S+)$`)
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
	if sm, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", cmd.Process.Pid)); err == nil {
		exe, _ := filepath.Abs(cmd.Path)
		out.files = fileResident(sm, exe)
	}
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	m, _ := io.ReadAll(resp.Body)
	out.heap, out.heapGoal = metricMiB(heapRe, m), metricMiB(heapGoalRe, m)
	return out, nil
}

// metricMiB is the byte count re captures in a /metrics text, in MiB;
// zero when it is not there.
func metricMiB(re *regexp.Regexp, metrics []byte) float64 {
	h := re.FindSubmatch(metrics)
	if h == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(h[1]), 64)
	return v / (1 << 20)
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
