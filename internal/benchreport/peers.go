package main

// The designs a user would build instead of Ratchet, on the engine's
// workload (section 1 at 64 callers): distinct keys, a global and a
// per-counterparty ceiling, every answer durable. They do only the key and
// the counters: no lease, fingerprint, record, audit log or outbox, so they
// are what Ratchet's extra work is compared with.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
)

// peerLimit is every peer's ceiling, large enough never to refuse (as
// benchRules' are), so each begin checks and moves both counters.
const peerLimit = int64(1) << 60

// peerKeys are one begin's keys: the idempotency key, the global counter
// and the counterparty's.
func peerKeys(k int64) (idem, global, party string) {
	return fmt.Sprint("peer:", k), "budget:global", fmt.Sprint("budget:acct_", k%50)
}

// --- Redis + one Lua script -------------------------------------------------

// redisBegin is the textbook begin on Redis: claim the key with SET NX,
// check both ceilings, then INCRBY both counters, atomically (a script runs
// alone). KEYS: idempotency key, global counter, counterparty counter;
// ARGV: cost, limit. 1 is execute, 0 a duplicate, -1 over a ceiling.
const redisBegin = `
if not redis.call('SET', KEYS[1], 'pending', 'NX') then return 0 end
local cost, lim = tonumber(ARGV[1]), tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') + cost > lim or tonumber(redis.call('GET', KEYS[3]) or '0') + cost > lim then
  redis.call('DEL', KEYS[1])
  return -1
end
redis.call('INCRBY', KEYS[2], cost)
redis.call('INCRBY', KEYS[3], cost)
return 1
`

// redisServer is a private redis-server the bench started: its own port
// and directory, the append-only file synced before every answer
// (appendfsync always, Redis's durable setting), no snapshots.
type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

// startRedis starts Debian's redis-server on a free loopback port with its
// own directory under dir. errNoRedis when it is not installed.
func startRedis(dir string) (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
		"--protected-mode", "yes", "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{cmd: cmd, addr: fmt.Sprint("127.0.0.1:", port)}
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := dialRedis(s.addr)
		if err == nil {
			_, err = c.do("PING")
			c.close()
			if err == nil {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.stop()
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("redis-server on %s did not answer: %v\n%s", s.addr, err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var errNoRedis = errors.New("redis-server is not installed (Debian: apt-get install -y redis-server)")

func (s *redisServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// cpu is the CPU time (user and system) redis-server has used, from
// /proc/<pid>/stat in clock ticks (100 a second on Linux).
func (s *redisServer) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	d, _ := statCPU(b)
	return d
}

// userHZ is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go builds for.
const userHZ = 100

// statCPU is utime+stime of a /proc/<pid>/stat line, false (and zero) for
// a line it cannot read.
func statCPU(b []byte) (time.Duration, bool) {
	// The command name (field 2) is in parentheses and may hold spaces:
	// utime and stime are the 12th and 13th fields after it.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+s) * time.Second / userHZ, true
}

// redisConn is one connection speaking RESP2: each call writes one command
// and reads its reply (what a client library does, without a dependency).
type redisConn struct {
	c net.Conn
	r *bufio.Reader
	w *bufio.Writer
}

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &redisConn{c: c, r: bufio.NewReader(c), w: bufio.NewWriter(c)}, nil
}

func (c *redisConn) close() { c.c.Close() }

// do sends one command and returns its reply: a string, an int64, nil, or
// a []any; an error reply is returned as an error.
func (c *redisConn) do(args ...string) (any, error) {
	fmt.Fprintf(c.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(c.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return c.reply()
}

func (c *redisConn) reply() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 {
		return nil, fmt.Errorf("redis: short reply %q", line)
	}
	body := line[1 : len(line)-2]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, fmt.Errorf("redis: %s", body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.reply(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unknown reply %q", line)
}

// redisPairs runs callers that each begin (the script) and report (SET XX
// of the outcome) distinct keys on their own connection; CPU per pair
// includes redis-server's.
func redisPairs(s *redisServer, callers int, d time.Duration) (result, error) {
	c, err := dialRedis(s.addr)
	if err != nil {
		return result{}, err
	}
	sha, err := c.do("SCRIPT", "LOAD", redisBegin)
	c.close()
	if err != nil {
		return result{}, err
	}
	pool := make(chan *redisConn, callers)
	for range callers {
		c, err := dialRedis(s.addr)
		if err != nil {
			return result{}, err
		}
		defer c.close()
		pool <- c
	}
	var lat latencies
	lim, cost := strconv.FormatInt(peerLimit, 10), "1000"
	cpu0 := s.cpu()
	r, err := load(callers, d, 0, func(k int64) error {
		c := <-pool
		defer func() { pool <- c }()
		idem, global, party := peerKeys(k)
		t0 := time.Now()
		v, err := c.do("EVALSHA", sha.(string), "3", idem, global, party, cost, lim)
		lat.add([]time.Duration{time.Since(t0)})
		if err != nil || v != int64(1) {
			return fmt.Errorf("redis begin: %v %v", v, err)
		}
		if _, err := c.do("SET", idem, "succeeded", "XX"); err != nil {
			return fmt.Errorf("redis report: %w", err)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.cpu += (s.cpu() - cpu0) / time.Duration(max(r.ops, 1))
	r.busy = r.cpu.Seconds() * r.perSec
	r.p50, r.p99 = lat.pct(0.5), lat.pct(0.99)
	return r, nil
}

// --- Badger, group commit of the key and the counters -------------------------

// badgerFloor is the embedded design's floor: one writer takes every call
// waiting and applies them in one Badger transaction through Ratchet's own
// store (the same durability: the store's Update returns once the batch is
// durable in its log), and a second goroutine answers the batch. A begin claims the key and moves both counters; a report
// overwrites the key.
type badgerFloor struct {
	st   *badgerstore.Store
	reqs chan *floorOp
	stop chan struct{}
	wg   sync.WaitGroup
}

type floorOp struct {
	k      int64
	report bool
	res    int // 1 execute, 0 duplicate
	done   chan error
}

func openFloor(dir string) (*badgerFloor, error) {
	st, err := badgerstore.Open(dir, &badgerstore.Options{MinFreeBytes: -1})
	if err != nil {
		return nil, err
	}
	f := &badgerFloor{st: st, reqs: make(chan *floorOp, 4096), stop: make(chan struct{})}
	batches := make(chan []*floorOp, 64)
	f.wg.Add(2)
	go f.writer(batches)
	go f.syncer(batches)
	return f, nil
}

func (f *badgerFloor) close() {
	close(f.stop)
	f.wg.Wait()
	f.st.Close()
}

func (f *badgerFloor) writer(batches chan<- []*floorOp) {
	defer f.wg.Done()
	defer close(batches)
	for {
		var batch []*floorOp
		select {
		case op := <-f.reqs:
			batch = append(batch, op)
		case <-f.stop:
			return
		}
	drain:
		for {
			select {
			case op := <-f.reqs:
				batch = append(batch, op)
			default:
				break drain
			}
		}
		err := f.st.Update(context.Background(), func(txn ledger.Txn) error {
			for _, op := range batch {
				if err := op.apply(txn); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			for _, op := range batch {
				op.done <- err
			}
			continue
		}
		batches <- batch
	}
}

func (op *floorOp) apply(txn ledger.Txn) error {
	idem, global, party := peerKeys(op.k)
	if op.report {
		return txn.Set([]byte(idem), []byte("succeeded"))
	}
	if _, err := txn.Get([]byte(idem)); err == nil {
		op.res = 0
		return nil
	}
	for _, c := range []string{global, party} {
		if v := counterOf(txn, c); v+1000 > peerLimit {
			return fmt.Errorf("over %s", c)
		}
	}
	for _, c := range []string{global, party} {
		if err := txn.Set([]byte(c), []byte(strconv.FormatInt(counterOf(txn, c)+1000, 10))); err != nil {
			return err
		}
	}
	op.res = 1
	return txn.Set([]byte(idem), []byte("pending"))
}

// counterOf reads a counter; absent is zero.
func counterOf(r interface{ Get([]byte) ([]byte, error) }, key string) int64 {
	v, err := r.Get([]byte(key))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n
}

func (f *badgerFloor) syncer(batches <-chan []*floorOp) {
	defer f.wg.Done()
	for b := range batches {
		// Update made each batch durable: answer what is committed.
		all := [][]*floorOp{b}
	more:
		for {
			select {
			case b, ok := <-batches:
				if !ok {
					break more
				}
				all = append(all, b)
			default:
				break more
			}
		}
		var err error
		for _, b := range all {
			for _, op := range b {
				op.done <- err
			}
		}
	}
}

func (f *badgerFloor) call(k int64, report bool) (int, error) {
	op := &floorOp{k: k, report: report, done: make(chan error, 1)}
	f.reqs <- op
	err := <-op.done
	return op.res, err
}

func floorPairs(f *badgerFloor, callers int, d time.Duration) (result, error) {
	var lat latencies
	r, err := load(callers, d, 0, func(k int64) error {
		t0 := time.Now()
		res, err := f.call(k, false)
		lat.add([]time.Duration{time.Since(t0)})
		if err != nil || res != 1 {
			return fmt.Errorf("floor begin: %d %v", res, err)
		}
		_, err = f.call(k, true)
		return err
	})
	r.p50, r.p99 = lat.pct(0.5), lat.pct(0.99)
	return r, err
}

// --- Badger, one transaction per call --------------------------------------------

// openTxnPerCall opens Badger as a user would for a transaction per call:
// conflict detection on (two calls moving one counter: one of them is
// re-run), SyncWrites on (Badger syncs each commit; commits that arrive
// together share a sync), otherwise the options Ratchet's store uses.
func openTxnPerCall(dir string) (*badger.DB, error) {
	return badger.Open(badger.DefaultOptions(dir).WithSyncWrites(true).WithLogger(nil).
		WithNumVersionsToKeep(1).WithMemTableSize(32 << 20).WithNumMemtables(2).WithNumCompactors(3).
		WithBlockCacheSize(64 << 20).WithIndexCacheSize(32 << 20).WithValueThreshold(1 << 20))
}

// txnPerCallPairs begins and reports each effect in its own transaction,
// re-running one that conflicted.
func txnPerCallPairs(db *badger.DB, callers int, d time.Duration) (result, error) {
	var lat latencies
	retry := func(fn func(*badger.Txn) error) error {
		for {
			err := db.Update(fn)
			if !errors.Is(err, badger.ErrConflict) {
				return err
			}
		}
	}
	r, err := load(callers, d, 0, func(k int64) error {
		idem, global, party := peerKeys(k)
		t0 := time.Now()
		err := retry(func(txn *badger.Txn) error {
			if _, err := txn.Get([]byte(idem)); err == nil {
				return fmt.Errorf("duplicate %s", idem)
			}
			for _, c := range []string{global, party} {
				n := int64(0)
				if it, err := txn.Get([]byte(c)); err == nil {
					if err := it.Value(func(v []byte) error { n, err = strconv.ParseInt(string(v), 10, 64); return err }); err != nil {
						return err
					}
				}
				if n+1000 > peerLimit {
					return fmt.Errorf("over %s", c)
				}
				if err := txn.Set([]byte(c), []byte(strconv.FormatInt(n+1000, 10))); err != nil {
					return err
				}
			}
			return txn.Set([]byte(idem), []byte("pending"))
		})
		lat.add([]time.Duration{time.Since(t0)})
		if err != nil {
			return fmt.Errorf("txn begin: %w", err)
		}
		return retry(func(txn *badger.Txn) error { return txn.Set([]byte(idem), []byte("succeeded")) })
	})
	r.p50, r.p99 = lat.pct(0.5), lat.pct(0.99)
	return r, err
}

// peerResults are section 1's peers at 64 callers, with Ratchet's engine
// measured alternately with them; redisErr says why Redis has no row.
type peerResults struct {
	engine, redis, floor, txn result
	redisErr                  error
}

// benchPeers measures Ratchet's engine and each peer alternately, twice
// each, keeping each one's best run, so drift on a shared machine favours
// none of them.
func benchPeers(dir string, callers int, d time.Duration) (peerResults, error) {
	var out peerResults
	best := func(into *result, r result) {
		if r.perSec > into.perSec {
			*into = r
		}
	}
	rs, err := startRedis(filepath.Join(dir, "redis"))
	if err != nil {
		out.redisErr = err
	} else {
		defer rs.stop()
	}
	for i := range 2 {
		eng, _, err := openEngine(filepath.Join(dir, fmt.Sprint("peers-engine-", i)), true)
		if err != nil {
			return out, err
		}
		best(&out.engine, pairs(eng, callers, d, 0))
		eng.Close(context.Background())
		if rs != nil {
			r, err := redisPairs(rs, callers, d)
			if err != nil {
				return out, err
			}
			best(&out.redis, r)
		}
		f, err := openFloor(filepath.Join(dir, fmt.Sprint("peers-floor-", i)))
		if err != nil {
			return out, err
		}
		r, err := floorPairs(f, callers, d)
		f.close()
		if err != nil {
			return out, err
		}
		best(&out.floor, r)
		db, err := openTxnPerCall(filepath.Join(dir, fmt.Sprint("peers-txn-", i)))
		if err != nil {
			return out, err
		}
		r, err = txnPerCallPairs(db, callers, d)
		db.Close()
		if err != nil {
			return out, err
		}
		best(&out.txn, r)
	}
	return out, nil
}

// writePeers measures and writes section 1's peer table.
func writePeers(w func(string, ...any), dir string, d time.Duration) peerResults {
	const callers = 64
	w("### Against the designs a user would build instead\n\n")
	w("%d callers, the same workload, each design measured alternately with Ratchet's engine, twice each, best run of each shown. "+
		"The peers do only the key and the two counters (no lease, fingerprint, effect record, audit log or outbox). "+
		"Redis: a private `redis-server` (%s) the bench starts on a free loopback port with its own directory, `appendfsync always`, no snapshots; a begin is one Lua script (SET NX, both ceilings checked, INCRBY both counters), a report a SET XX, each caller on its own connection; its CPU per pair includes redis-server's. "+
		"Badger group commit: one writer applies every waiting call in one Update of Ratchet's own store (the same log and fdatasync), a second goroutine answers each batch once durable: the embedded design's floor. "+
		"Badger transaction per call: `db.Update` per call, SyncWrites and conflict detection on, a conflicted call re-run. "+
		"The naive PostgreSQL design is in section 4.\n\n", callers, redisVersion())
	pr, err := benchPeers(filepath.Join(dir, "peers"), callers, d)
	if err != nil {
		fail(err)
	}
	w("| design | pairs/s | begin p50 | begin p99 | CPU per pair (cores busy) | Ratchet's ratio to it | target |\n|---|---|---|---|---|---|---|\n")
	w("| Ratchet's engine (audit log on) | %.0f | %s | %s | %s | | p99 ≤ 4 ms, CPU ≤ 50 µs |\n", pr.engine.perSec, ms(pr.engine.p50), ms(pr.engine.p99), cpu(pr.engine))
	row := func(name string, r result, target string) {
		w("| %s | %.0f | %s | %s | %s | %.2f | %s |\n", name, r.perSec, ms(r.p50), ms(r.p99), cpu(r), pr.engine.perSec/r.perSec, target)
	}
	if pr.redisErr != nil {
		w("| Redis + Lua, appendfsync always | skipped: %v | | | | | ≥ 1.0 |\n", pr.redisErr)
	} else {
		row("Redis + Lua, appendfsync always", pr.redis, "≥ 1.0")
	}
	row("Badger, group commit of the key and counters", pr.floor, "≥ 0.5")
	row("Badger, one transaction per call", pr.txn, "≥ 10")
	w("\n")
	return pr
}

// redisVersion names the redis-server used, or "not installed".
func redisVersion() string {
	b, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "not installed"
	}
	f := strings.Fields(string(b))
	for _, x := range f {
		if strings.HasPrefix(x, "v=") {
			return "Redis " + strings.TrimPrefix(x, "v=")
		}
	}
	return strings.TrimSpace(string(b))
}
