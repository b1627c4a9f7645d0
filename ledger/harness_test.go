package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
	"github.com/ratchet-mcp/ratchet/ledger/badgerstore"
	"github.com/ratchet-mcp/ratchet/ledger/pgstore"
)

// The whole suite runs once per backend: on Badger in this process, then
// (TestMain) on PostgreSQL in a child run of the same test binary with
// RATCHET_TEST_BACKEND=postgres, each harness in a fresh schema.
var testBackend = os.Getenv("RATCHET_TEST_BACKEND")

// pgDSN is the server for the PostgreSQL run.
func pgDSN() string { return pgtest.DSNOrDefault() }

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	fuzzing := flag.Lookup("test.fuzz").Value.String() != "" || flag.Lookup("test.bench").Value.String() != ""
	if testBackend == "" && code == 0 && !fuzzing {
		code = runPostgresSuite()
	}
	os.Exit(code)
}

func runPostgresSuite() int {
	if err := pgtest.Reachable(pgDSN()); err != nil {
		if pgtest.Required() {
			fmt.Println("FAIL: the PostgreSQL suite is required (RATCHET_REQUIRE_PG) but no server answers:", err)
			return 1
		}
		fmt.Println("PostgreSQL suite skipped: no server answers (set RATCHET_TEST_PG_DSN):", err)
		return 0
	}
	fmt.Println("=== the same suite on the PostgreSQL backend")
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "RATCHET_TEST_BACKEND=postgres")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return 1
	}
	return 0
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
	// back, when set, steps the clock back by that much right after the
	// next reading (once).
	back time.Duration
}

func newClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.t
	c.t, c.back = c.t.Add(-c.back), 0
	return now
}

// stepBackAfterNextReading makes the clock jump back by d just after it
// is next read.
func (c *fakeClock) stepBackAfterNextReading(d time.Duration) {
	c.mu.Lock()
	c.back = d
	c.mu.Unlock()
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func i64(v int64) *int64 { return &v }

// testRules is the policy most tests run under.
func testRules() []ledger.Rule {
	return []ledger.Rule{
		{Match: "payment.*", ApprovalThresholdMicros: i64(100_000_000), RequireDimensions: []string{"counterparty"},
			Ceilings: []ledger.Ceiling{
				{Name: "daily-spend", LimitMicros: i64(500_000_000), Window: "24h", Per: "global"},
				{Name: "per-counterparty", LimitMicros: i64(200_000_000), Window: "24h", Per: "dimension:counterparty"},
			}},
		{Match: "email.send", Ceilings: []ledger.Ceiling{{Name: "email-rate", LimitCount: i64(3), Window: "1h", Per: "agent"}}},
		{Match: "db.drop.*", Deny: true},
		{Match: "sms.*", MaxUnreported: 2, MaxLeaseSeconds: 120},
		{Match: "cloud.*", Ceilings: []ledger.Ceiling{{Name: "cloud-spend", LimitMicros: i64(1000), Window: "1h", Per: "global"}}},
		{Match: "llm.*", Ceilings: []ledger.Ceiling{{Name: "run-budget", LimitMicros: i64(100), Window: "run", Per: "run"}}},
	}
}

// harness runs an engine on a real Badger directory with a fake clock and
// can close and reopen it on the same directory.
type harness struct {
	t      testing.TB
	dir    string
	clock  *fakeClock
	rules  []ledger.Rule
	secret []byte
	eng    *ledger.Engine
	opts   badgerstore.Options
	defs   ledger.Defaults
	logger *slog.Logger
	schema string // postgres only
	// auditRetention is the engine's Options.AuditRetention.
	auditRetention time.Duration
	// route, when set, is the engine's Options.Route (default: every
	// notification to "test-sink").
	route func(ledger.Event) []string
	// wrap, when set, wraps the Badger store the next opens use.
	wrap func(*badgerstore.Store) ledger.Store
	obs  ledger.Observer // nil: none
	// thresholds are the engine's Options.BudgetThresholds.
	thresholds []float64
}

func newHarness(t testing.TB, rules []ledger.Rule) *harness {
	t.Helper()
	return newHarnessWithSecret(t, rules, nil)
}

// newHarnessWithSecret is newHarness on a ledger keyed with secret; nil
// means a new one.
func newHarnessWithSecret(t testing.TB, rules []ledger.Rule, secret []byte) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), clock: newClock(), rules: rules, secret: secret}
	if h.secret == nil {
		var err error
		if h.secret, err = ledger.LoadOrCreateSecret(h.dir + "/hmac.key"); err != nil {
			t.Fatal(err)
		}
	}
	if testBackend == "postgres" {
		h.schema = pgtest.Schema(t, pgDSN(), "t_") // dropped after the engine closes (cleanups run last first)
	}
	h.open()
	t.Cleanup(func() {
		if h.eng != nil {
			if err := h.eng.Close(context.Background()); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	})
	return h
}

// openStore opens the backend under test.
func (h *harness) openStore() ledger.Store {
	h.t.Helper()
	if h.schema != "" {
		st, err := pgstore.Open(context.Background(), pgDSN(), &pgstore.Options{Schema: h.schema})
		if err != nil {
			h.t.Fatal(err)
		}
		return st
	}
	st, err := badgerstore.Open(h.dir+"/ledger", &h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	if h.wrap != nil {
		return h.wrap(st)
	}
	return st
}

// stored returns every byte the backend keeps: the data dir's files, or
// every key and value of the PostgreSQL table.
func (h *harness) stored(t testing.TB) []byte {
	t.Helper()
	var all bytes.Buffer
	if h.schema != "" {
		conn, err := pgx.Connect(context.Background(), pgDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(context.Background(), "SELECT k, v FROM "+h.schema+".kv")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var k, v []byte
			rows.Scan(&k, &v)
			all.Write(k)
			all.Write(v)
		}
		rows.Close()
		return all.Bytes()
	}
	filepath.Walk(h.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			all.Write(b)
		}
		return nil
	})
	return all.Bytes()
}

// storedKeys lists the keys under prefix as stored, reading the backend
// itself with the engine closed, then reopens the engine.
func (h *harness) storedKeys(prefix string) []string {
	h.t.Helper()
	if err := h.eng.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	st := h.openStore()
	var keys []string
	err := st.View(context.Background(), func(r ledger.Reader) error {
		return r.Scan([]byte(prefix), nil, func(k, _ []byte) (bool, error) {
			keys = append(keys, string(k))
			return true, nil
		})
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		h.t.Fatal(err)
	}
	h.open()
	return keys
}

func (h *harness) open() {
	h.t.Helper()
	st := h.openStore()
	var err error
	h.eng, err = ledger.New(ledger.Options{Store: st, Secret: h.secret, Policies: h.rules, Clock: h.clock,
		Defaults: h.defs, Logger: h.logger, Observer: h.obs, ReapInterval: -1, PurgeInterval: -1,
		Audit: true, AuditRetention: h.auditRetention, Route: h.routeOrDefault(),
		BudgetThresholds: h.thresholds})
	if err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) reopen() {
	h.t.Helper()
	if err := h.eng.Close(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.open()
}

func (h *harness) begin(req ledger.BeginRequest) *ledger.BeginResult {
	h.t.Helper()
	res, err := h.eng.Begin(context.Background(), req)
	if err != nil {
		h.t.Fatalf("begin %q: %v", req.IdempotencyKey, err)
	}
	return res
}

func (h *harness) beginWant(req ledger.BeginRequest, want ledger.Decision) *ledger.BeginResult {
	h.t.Helper()
	res := h.begin(req)
	if res.Decision != want {
		h.t.Fatalf("begin %q: decision %s (reason %q: %s), want %s", req.IdempotencyKey, res.Decision, res.Reason, res.Message, want)
	}
	return res
}

func (h *harness) report(id string, o ledger.Outcome, mod ...func(*ledger.ReportRequest)) *ledger.Effect {
	h.t.Helper()
	req := ledger.ReportRequest{EffectID: id, Outcome: o}
	for _, m := range mod {
		m(&req)
	}
	eff, err := h.eng.Report(context.Background(), req)
	if err != nil {
		h.t.Fatalf("report %s %s: %v", id, o, err)
	}
	return eff
}

func (h *harness) get(id string) *ledger.Effect {
	h.t.Helper()
	eff, err := h.eng.Get(context.Background(), "", id, "")
	if err != nil {
		h.t.Fatalf("get %s: %v", id, err)
	}
	return eff
}

func wantCode(t testing.TB, err error, code ledger.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code)
	}
	var le *ledger.Error
	if !errors.As(err, &le) {
		t.Fatalf("!errors.As(err, &le): got error %v, want code %s", err, code)
	}
	if le.Code != code {
		t.Fatalf("le.Code != code: got error %v, want code %s", err, code)
	}
	if le.Message == "" {
		t.Fatalf("error %s has no message", code)
	}
}

func pay(key, counterparty string, cost int64) ledger.BeginRequest {
	return ledger.BeginRequest{IdempotencyKey: key, EffectType: "payment.charge", Vendor: "stripe",
		AgentID: "bot", Payload: json.RawMessage(`{"amount":` + json.Number(itoa(cost)).String() + `}`),
		Dimensions: map[string]string{"counterparty": counterparty}, EstimatedCostMicros: i64(cost)}
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

func (h *harness) routeOrDefault() func(ledger.Event) []string {
	if h.route != nil {
		return h.route
	}
	return func(ledger.Event) []string { return []string{"test-sink"} }
}
