// Package pgstore is a ledger.Store on PostgreSQL, so that every sidecar of
// a fleet dedupes against the same keys and spends against the same
// ceilings.
//
// Other databases that speak PostgreSQL's protocol work if they have its
// transaction-level advisory locks, on which the store's key locks are
// built (see "Concurrency"), and nothing else of the kind (no session
// locks). Every serialization failure is retried, whatever raised it, so a
// database that runs every transaction SERIALIZABLE (and upgrades the
// store's READ COMMITTED to it) works too, with more re-runs. CockroachDB
// added transaction-level advisory locks in 2026 (cockroachdb/cockroach
// pull 168353); versions without them answer that the function does not
// exist, and Open refuses them with ErrNoAdvisoryLocks rather than run
// replicas without locks. Not tested against CockroachDB: whether it runs
// the PL/pgSQL lock function and answers txid_current, txid_status and
// pg_logical_emit_message (used to learn how a lost commit ended, below)
// is unknown.
//
// Schema. The ledger is one table, kv(k bytea primary key, v bytea), in a
// schema of its own (Options.Schema, default "ratchet"), created and
// migrated by Open from the SQL files embedded under migrations/, in
// order, each once, recorded in schema_migrations. Migrations run under a
// transaction-scoped advisory lock, so replicas starting together migrate
// once. The table leaves a fifth of each page free, so that rewriting a
// value (a record on report, a counter) can stay on its page as a HOT
// update, without a new index entry (measured: 8-10% more pairs/s; an
// upgraded ledger gets it on pages written from then on). The store's
// sessions set default_toast_compression to lz4 where the server has it,
// so that the values large enough for the server to compress (the audit
// log's blocks) cost it far less CPU than with the default pglz: a
// session setting, not the table's, so nothing to migrate and no lock on
// a running fleet's table; the server reads either compression, whoever
// wrote it.
//
// Concurrency. Each Update (one batch of the engine's decisions) is one
// READ COMMITTED transaction that locks every key before it reads or
// writes it, and holds its locks until it ends (strict two-phase locking,
// which makes the batches serializable): advisory transaction locks on a
// 64-bit hash of the schema and the key, shared to read, exclusive to
// write. A lock is taken in the same round trip as the statement that
// reads or writes its key, just before it, so a read always sees the last
// commit of every batch that held the key. Batches of different replicas
// run side by side and wait only for those holding a key they need.
//
// No deadlocks: a batch's first key lock statement (the keys the engine
// prefetches, see ledger.Prefetcher) takes its locks in order and waits
// for each; every later one (a key read on demand, a key written after
// being read shared) only tries, and if another session holds a lock, the
// transaction fails with a serialization failure, and Update rolls it
// back and runs the batch again with those keys among the locks it waits
// for first. Agents never see a re-run: the engine decides the batch
// afresh. A key that many batches of several replicas write would cost a
// re-run each time; the engine keeps none (per-replica state counts and
// ceiling shares: see the ledger's "Shares").
//
// Every batch also holds the ledger key, taken shared in its first round
// trip with BEGIN (while the engine gathers the batch). A scan reads a
// range, which no key lock covers (some of its keys may not exist yet), so
// a batch that scans (a saga unwind, the reaper, retention) takes the
// ledger key exclusively: it tries, and failing that runs again taking it
// first, alone. So does a batch that would need more than maxKeyLocks key
// locks, so that none fills the server's lock table.
//
// What replicas still share: a key both need, such as one idempotency key
// begun through two of them at once (exactly what the locks are for), or
// an agent's unreported summary being written. The per-state counts are one
// key per replica (see the ledger's state counts).
//
// The engine answers only after COMMIT, with synchronous_commit as the
// server sets it (on by default).
//
// Round trips. A batch costs a fixed handful whatever its size: BEGIN
// with its id and the ledger key, one or two prefetch queries with their
// keys' locks (the engine names the keys its decisions will read, and one
// SELECT ... WHERE k = ANY($1) fetches them), then the writes' locks, the
// writes (one DELETE and one upsert over unnest'ed arrays) and COMMIT
// together in one pipelined round trip. Reads the engine could not name in
// advance are one statement each; a transaction remembers what it read
// (it holds their locks, so nobody else changes them). Taking locks costs
// the server about a microsecond each, when lock_keys takes them in one
// SQL statement (a loop of PERFORMs cost five times as much). The first
// round trip also gives the engine time to gather its batch: when BEGIN
// went with the first reads instead, batches at 64 callers held 33 ops
// instead of 56, and pairs/s fell by a fifth to a third.
//
// What was measured and set aside (SERIALIZABLE without locks, one lock
// for the whole ledger, the WAL flush taken out of the transaction so that
// two batches are in flight, writes sent while the batch is still being
// decided, plain INSERT and UPDATE for keys known absent or present, one
// MERGE for every write) is in docs/design.md.
//
// A commit's answer can be lost with its connection. The store learns
// each transaction's id in its first round trip (txid_current, sent with
// BEGIN), so when the round trip carrying the writes and COMMIT gets no
// answer it closes that connection and asks the server, on another, how
// the transaction ended (txid_status, in a transaction that writes a WAL
// record, so that its answer waits for that commit to be as durable as a
// batch's: see commitOutcome): committed, and the batch's
// decisions stand and are answered; rolled back, and the batch, which
// recorded nothing, is run again. Only when the server cannot be asked
// within a few seconds is the batch reported failed (unavailable) with its
// outcome unknown; if it did commit, a retried begin finds its effect
// (in_flight, then blocked once the lease runs out) and never executes
// twice. A server that answers with an error (a serialization failure at
// COMMIT, say) has answered: that transaction did not commit.
//
// Dead replicas. A replica holds its batch's locks for the batch's few
// round trips. If its process dies, the kernel closes its connections and
// the server frees the locks at once. If its machine or network goes
// instead, nothing tells the server: it would notice only at its TCP
// keepalive (after two hours by default), and every batch needing one of
// those keys (and every scan) would wait until then. So the store's sessions ask the server for
// keepalives after 10 s idle, every 5 s, 3 probes (a vanished peer is
// found in about 25 s), and to end a session that sits idle inside a
// transaction for Options.StuckTimeout (30 s: a frozen process). Its own
// batch then fails, or is found committed as above. A DSN may set these parameters
// itself.
//
// The store never sees payloads or dimension values: like Badger it only
// holds what the engine writes, which is hashes of those.
package pgstore

import (
	"cmp"
	"context"
	"embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ratchet-mcp/ratchet/ledger"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configures Open. The zero value is valid.
type Options struct {
	// Schema holds Ratchet's tables (default "ratchet").
	Schema string
	// MaxConns bounds the pool of connections for reads (default 8);
	// batches have two more of their own.
	MaxConns int32
	// MaxRetries bounds how often a batch is re-run after a serialization
	// failure (default 50).
	MaxRetries int
	// StuckTimeout is how long the server lets one of the store's sessions
	// sit idle inside a transaction before it ends the session, freeing
	// the locks it holds (default 30s; see "Dead replicas").
	StuckTimeout time.Duration
	// Logger hears of commits whose answer the network lost and how each
	// ended; nil discards that.
	Logger *slog.Logger
}

// Store is a ledger.Store on PostgreSQL.
type Store struct {
	// Batches have a pool of their own, so that readers holding every
	// connection of theirs never make the writer wait.
	reads, writes *pgxpool.Pool
	log           *slog.Logger
	retries       int
	lock          int64  // advisory lock key of the whole ledger (schema)
	seed          uint64 // keys' locks are hashes of the schema and the key
	stats         struct{ commits, roundTrips, statements atomic.Int64 }
}

// Stats counts what the store's batches (Update) sent since Open. Unlike a
// rate, these do not depend on the machine's load: make bench reports
// them per pair.
type Stats struct {
	Commits    int64 // Updates committed
	RoundTrips int64 // requests a batch waited for an answer to, re-runs and rollbacks included
	Statements int64 // SQL statements those carried
}

// Stats reports the store's counts since Open.
func (s *Store) Stats() Stats {
	return Stats{s.stats.commits.Load(), s.stats.roundTrips.Load(), s.stats.statements.Load()}
}

// counted is a batch's connection, counting its round trips and statements.
type counted struct {
	c *pgxpool.Conn
	s *Store
}

func (c counted) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.s.stats.roundTrips.Add(1)
	c.s.stats.statements.Add(1)
	return c.c.Query(ctx, sql, args...)
}

func (c counted) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.s.stats.roundTrips.Add(1)
	c.s.stats.statements.Add(1)
	return c.c.Exec(ctx, sql, args...)
}

func (c counted) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.s.stats.roundTrips.Add(1)
	c.s.stats.statements.Add(int64(b.Len()))
	return c.c.SendBatch(ctx, b)
}

// The store, and the optional power the engine finds by assertion (a
// shared store is never Exclusive).
var (
	_ ledger.Store      = (*Store)(nil)
	_ ledger.Txn        = (*txn)(nil)
	_ ledger.Prefetcher = (*txn)(nil)
)

var schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects to dsn, creates the schema if needed and migrates it.
func Open(ctx context.Context, dsn string, opts *Options) (*Store, error) {
	if opts == nil {
		opts = &Options{}
	}
	schema := opts.Schema
	if schema == "" {
		schema = "ratchet"
	}
	if !schemaRe.MatchString(schema) {
		return nil, fmt.Errorf("postgres schema %q must be a lowercase identifier", schema)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parsing the postgres DSN: %w", err) // never echo the DSN: it may hold a password
	}
	cfg.MaxConns = opts.MaxConns
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 8
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	stuck := cmp.Or(opts.StuckTimeout, 30*time.Second)
	for k, v := range map[string]string{ // see "Dead replicas"; a DSN that sets one wins
		"tcp_keepalives_idle":                 "10",
		"tcp_keepalives_interval":             "5",
		"tcp_keepalives_count":                "3",
		"idle_in_transaction_session_timeout": strconv.FormatInt(max(stuck.Milliseconds(), 1), 10),
	} {
		if _, ok := cfg.ConnConfig.RuntimeParams[k]; !ok {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	// Large values (the audit log's blocks) compressed with lz4, where
	// the server has it (see "Schema"); a DSN that sets it wins.
	_, ownCompression := cfg.ConnConfig.RuntimeParams["default_toast_compression"]
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		registerByteas(c.TypeMap())
		if !ownCompression {
			// A server without lz4 (or older than 14) refuses, and
			// keeps pglz: nothing to do about that here.
			_, _ = c.Exec(ctx, "SET default_toast_compression = lz4")
		}
		return nil
	}
	reads, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	wcfg := cfg.Copy()
	wcfg.MaxConns = 2 // the batch's connection, and one to learn how a lost commit ended
	writes, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		reads.Close()
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	s := &Store{reads: reads, writes: writes, log: opts.Logger, retries: opts.MaxRetries, lock: int64(fnv1a(fnvOffset, "ratchet-ledger:"+schema)), seed: fnv1a(fnvOffset, schema+"\x00")}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.retries == 0 {
		s.retries = 50
	}
	if err := s.migrate(ctx, schema); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// migrate applies the embedded migrations not yet recorded.
func (s *Store) migrate(ctx context.Context, schema string) error {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	return pgx.BeginFunc(ctx, s.writes, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('ratchet-migrate:' || $1))", schema); err != nil {
			if noAdvisoryLocks(err) {
				return fmt.Errorf("%w: %w", ErrNoAdvisoryLocks, err)
			}
			return fmt.Errorf("locking for migration: %w", err)
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
			return fmt.Errorf("creating schema %s: %w", schema, err)
		}
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return fmt.Errorf("creating schema_migrations: %w", err)
		}
		for _, f := range files {
			base := strings.TrimPrefix(f, "migrations/")
			v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
			if err != nil {
				return fmt.Errorf("migration %s has no version number", base)
			}
			var done bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", v).Scan(&done); err != nil {
				return err
			}
			if done {
				continue
			}
			sql, _ := migrations.ReadFile(f)
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("migration %s: %w", base, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", v); err != nil {
				return err
			}
		}
		return nil
	})
}

// ErrNoAdvisoryLocks means the database lacks PostgreSQL's transaction-level
// advisory locks, which the store uses to migrate once and for its key locks.
var ErrNoAdvisoryLocks = errors.New("the database has no PostgreSQL transaction-level advisory locks, which the shared ledger needs (on CockroachDB, use a release that has them)")

// noAdvisoryLocks reports whether err says the advisory lock functions do
// not exist or are not supported.
func noAdvisoryLocks(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42883" || pe.Code == "0A000") && strings.Contains(pe.Message, "advisory")
}

// retryable reports whether err is a serialization failure or deadlock,
// after which the whole transaction may simply be run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Update implements ledger.Store: fn runs in one READ COMMITTED transaction
// that locks every key it touches (see "Concurrency"), re-run from the
// start after a serialization failure.
func (s *Store) Update(ctx context.Context, fn func(ledger.Txn) error) error {
	var err error
	p := &plan{keys: map[int64]bool{}}
	for attempt := range s.retries {
		err = s.try(ctx, fn, p)
		if lost, ok := errors.AsType[*lostCommit](err); ok {
			// Settling is owed even when ctx has ended: the batch's
			// callers are owed the truth about what committed.
			committed, serr := s.commitOutcome(context.WithoutCancel(ctx), lost)
			switch {
			case serr != nil:
				s.log.Error("postgres commit answer lost; its outcome is unknown, the batch is reported failed", "xid", lost.xid, "err", serr)
				return serr
			case committed:
				s.log.Warn("postgres commit answer lost; the server says it committed", "xid", lost.xid, "err", lost.err)
				return nil
			}
			// Rolled back: nothing was recorded, so the batch runs again.
			s.log.Warn("postgres commit answer lost; the server rolled it back, running the batch again", "xid", lost.xid, "err", lost.err)
		} else if err == nil || !retryable(err) {
			return err
		}
		// Back off a little, with jitter, so colliding replicas spread out.
		time.Sleep(time.Duration(rand.IntN(1+attempt*200)) * time.Microsecond)
	}
	return fmt.Errorf("postgres: gave up after %d serialization retries: %w", s.retries, err)
}

func (s *Store) try(ctx context.Context, fn func(ledger.Txn) error, p *plan) error {
	conn, err := s.writes.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres connection: %w", err)
	}
	defer conn.Release()
	// The first round trip begins the transaction, learns its id and
	// takes the ledger key; the engine gathers the batch meanwhile (ops
	// that arrive during it join). Reads go with their keys' locks, and the
	// writes, their locks and COMMIT go together in one round trip.
	q := counted{conn, s}
	t := &txn{ctx: ctx, q: q, s: s, plan: p, ledgerX: p.ledgerX}
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	b.Queue("SELECT txid_current()")
	b.Queue("SELECT lock_keys($1, $2, true)", bigints{s.lock}, []bool{t.ledgerX})
	br := q.SendBatch(ctx, b)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&t.xid)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		t.failed = fmt.Errorf("postgres begin: %w", err)
	} else {
		err = fn(t)
	}
	if err == nil && t.failed == nil {
		b := t.writes()
		commit := b.Len()
		b.Queue("COMMIT")
		br := q.SendBatch(ctx, b)
		for i := 0; i <= commit && err == nil; i++ {
			_, err = br.Exec()
		}
		br.Close()
		if err == nil {
			s.stats.commits.Add(1)
			return nil
		}
		var pe *pgconn.PgError
		if t.xid != 0 && !errors.As(err, &pe) {
			// No answer from the server: the connection went, maybe
			// after the COMMIT was carried out. Closing it ends the
			// session (and its locks) once the server notices; Update
			// then asks how the transaction ended.
			conn.Conn().Close(ctx)
			return &lostCommit{xid: t.xid, err: err}
		}
		err = fmt.Errorf("postgres commit: %w", err)
	} else if t.failed != nil { // a statement failed: the transaction is void
		err = t.failed
	}
	if retryable(err) {
		p.learn(t)
	}
	if _, rerr := q.Exec(ctx, "ROLLBACK"); rerr != nil {
		// Closing the connection rolls back and frees its locks.
		conn.Conn().Close(ctx)
	}
	return err
}

// lostCommit is a batch whose last round trip (its writes and COMMIT) got
// no answer: transaction xid may or may not have committed.
type lostCommit struct {
	xid int64
	err error
}

func (l *lostCommit) Error() string {
	return fmt.Sprintf("postgres commit of transaction %d: no answer: %v", l.xid, l.err)
}

func (l *lostCommit) Unwrap() error { return l.err }

// lostCommitWait bounds how long commitOutcome waits for the server to finish a
// transaction whose connection was lost.
const lostCommitWait = 5 * time.Second

// commitOutcome finds out, on another connection, how a transaction whose commit
// got no answer ended: committed (the batch is recorded and its decisions
// stand) or rolled back (nothing was recorded; Update runs the batch
// again). "Committed" is acted on (the batch's executes are answered), so
// the question's COMMIT must wait, as a batch's does under the server's
// synchronous_commit (and for any synchronous standbys), for the WAL that
// holds the earlier commit: the question writes one WAL record (a
// transactional logical message, which nothing needs to read), since a
// transaction that writes none commits without waiting, id or not, and the
// lost transaction's commit record, already written, comes before it.
// Until the server notices the lost connection the transaction is still in
// progress; commitOutcome waits up to lostCommitWait for it to end. An
// error means it cannot tell: the batch is then reported failed, its
// outcome unknown.
func (s *Store) commitOutcome(ctx context.Context, lost *lostCommit) (committed bool, _ error) {
	ctx, cancel := context.WithTimeout(ctx, lostCommitWait)
	defer cancel()
	for {
		var status *string
		err := pgx.BeginFunc(ctx, s.writes, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT txid_status($1), pg_logical_emit_message(true, 'ratchet', '')", lost.xid).Scan(&status, nil)
		})
		switch {
		case err != nil:
			return false, fmt.Errorf("%w; asking how it ended failed too: %w", lost, err)
		case status == nil:
			return false, fmt.Errorf("%w; the server no longer knows how it ended", lost)
		case *status == "committed":
			return true, nil
		case *status == "aborted":
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("%w; still in progress after %v", lost, lostCommitWait)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// View implements ledger.Store with a read-only snapshot.
func (s *Store) View(ctx context.Context, fn func(ledger.Reader) error) error {
	return pgx.BeginTxFunc(ctx, s.reads, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		t := &txn{ctx: ctx, q: tx}
		err := fn(t)
		if t.failed != nil {
			return t.failed
		}
		return err
	})
}

// Close implements ledger.Store.
func (s *Store) Close() error {
	s.reads.Close()
	s.writes.Close()
	return nil
}

// querier is what a txn sends its statements through: a pgx.Tx, or a
// pooled connection whose transaction Update manages itself.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// txn is one transaction. Writes are buffered and sent together, in one
// round trip (a pgx batch), before a scan and at commit; reads consult the
// buffer first, so a transaction always sees its own writes, then what the
// transaction already read. The first
// statement error is kept: PostgreSQL voids the transaction on any error,
// so the batch is retried or failed as a whole, never committed with a
// hole in it.
type txn struct {
	ctx     context.Context
	q       querier
	failed  error
	xid     int64 // the transaction's id, learned with BEGIN (0: unknown)
	pending ledger.WriteBuffer
	read    map[string][]byte // what this transaction read; nil value: absent

	// Locks, in a batch (Update) only; s is nil in a View.
	s       *Store
	plan    *plan
	locked  bool           // the first key lock statement, which waits, is sent
	ledgerX bool           // the ledger key is held exclusively: no key locks
	held    map[int64]bool // key locks asked for (true: exclusive)
	// wantLedgerX: the next lock statement takes the ledger key exclusively.
	wantLedgerX bool
}

// query runs one query reading keys, preceded in the same round trip by
// the locks of those keys not held yet.
func (t *txn) query(keys [][]byte, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	t.lock(b, keys, false)
	if b.Len() == 0 {
		return t.q.Query(t.ctx, sql, args...)
	}
	b.Queue(sql, args...)
	br := t.q.SendBatch(t.ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return batchRows{rows, br}, nil
}

// maxKeyLocks bounds the key locks of one batch. A batch that would need
// more takes the ledger key exclusively instead, so that no batch fills
// the server's lock table (max_locks_per_transaction × max_connections
// entries, 6400 by default, shared by every session).
const maxKeyLocks = 1024

// lock queues, in b, the locks of keys the transaction is about to read
// (or, with write, to write) and does not hold yet: exclusive to write,
// shared to read. The
// transaction holds the ledger key (shared) from its first round trip.
// Its first key lock statement also takes the locks that failed runs of
// this batch asked for, in order, and waits for each; later ones only try,
// and fail the transaction, to be run again with their keys locked first,
// if another session holds one. A batch that scans, or would need more
// than maxKeyLocks, tries to take the ledger key exclusively instead (and
// then needs no key locks); failing, it runs again with it from the start.
func (t *txn) lock(b *pgx.Batch, keys [][]byte, write bool) {
	if t.s == nil || t.ledgerX {
		return
	}
	wait := !t.locked
	var want []keyLock
	if wait {
		want = make([]keyLock, 0, len(t.plan.keys)+len(keys))
		for h, x := range t.plan.keys {
			want = append(want, keyLock{h, x})
		}
	} else {
		want = make([]keyLock, 0, len(keys))
	}
	for _, k := range keys {
		h := t.s.keyLock(k)
		if held, ok := t.held[h]; ok && (held || !write) {
			continue
		}
		want = append(want, keyLock{h, write})
	}
	// In order, each lock once, exclusive if any of its asks was.
	slices.SortFunc(want, func(a, b keyLock) int { return cmp.Compare(a.h, b.h) })
	n := 0
	for _, l := range want {
		if n > 0 && want[n-1].h == l.h {
			want[n-1].x = want[n-1].x || l.x
			continue
		}
		want[n] = l
		n++
	}
	want = want[:n]
	if len(t.held)+len(want) > maxKeyLocks {
		t.wantLedgerX = true
	}
	if t.wantLedgerX {
		t.ledgerX = true
		b.Queue("SELECT lock_keys($1, $2, false)", bigints{t.s.lock}, []bool{true})
		return
	}
	if len(want) == 0 {
		return
	}
	t.locked = true
	if t.held == nil {
		t.held = make(map[int64]bool, len(want))
	}
	hs, xs := make(bigints, len(want)), make([]bool, len(want))
	for i, l := range want {
		t.held[l.h], hs[i], xs[i] = l.x, l.h, l.x
	}
	b.Queue("SELECT lock_keys($1, $2, $3)", hs, xs, wait)
}

// keyLock is one key lock to take: its advisory lock key, and whether
// exclusively.
type keyLock struct {
	h int64
	x bool
}

// plan is what the runs of one batch that failed teach the next: the key
// locks to take first (true: exclusive) and whether to take the ledger key
// exclusively.
type plan struct {
	keys    map[int64]bool
	ledgerX bool
}

func (p *plan) learn(t *txn) {
	for h, x := range t.held {
		p.keys[h] = p.keys[h] || x
	}
	p.ledgerX = p.ledgerX || t.wantLedgerX
}

// keyLock is the advisory lock key of a ledger key: FNV-1a of the schema
// and the key. Two keys sharing a hash only share a lock.
func (s *Store) keyLock(k []byte) int64 {
	return int64(fnv1a(s.seed, k))
}

const fnvOffset = 14695981039346656037

// fnv1a continues an FNV-1a hash in state h over b.
func fnv1a[B []byte | string](h uint64, b B) uint64 {
	for i := range len(b) {
		h = (h ^ uint64(b[i])) * 1099511628211
	}
	return h
}

// batchRows are the rows of a query sent in a batch; closing them closes
// the batch.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r batchRows) Close() {
	r.Rows.Close()
	r.br.Close()
}

func (t *txn) fail(err error) error {
	if t.failed == nil {
		t.failed = err
	}
	return err
}

// cached returns what the transaction knows of k without asking the
// server: its own write, else what it read (nil value: absent).
func (t *txn) cached(k []byte) ([]byte, bool) {
	if v, ok := t.pending.Lookup(string(k)); ok {
		return v, true
	}
	v, ok := t.read[string(k)]
	return v, ok
}

// kvRows reads the rows of a "SELECT k, v" query, calls each with every
// row's key and a copy of its value, and closes them. The key is the
// row's own buffer, valid only during the call. Both columns come in
// PostgreSQL's binary format, which for bytea is the bytes themselves, so
// a row costs one allocation (the value) where Scan made several.
func kvRows(rows pgx.Rows, each func(k, v []byte)) error {
	defer rows.Close()
	fd := rows.FieldDescriptions()
	raw := len(fd) == 2 && fd[0].Format == pgx.BinaryFormatCode && fd[1].Format == pgx.BinaryFormatCode
	for rows.Next() {
		if !raw {
			var k, v []byte
			if err := rows.Scan(&k, &v); err != nil {
				return err
			}
			each(k, v)
			continue
		}
		r := rows.RawValues()
		if r[0] == nil || r[1] == nil {
			return errors.New("postgres: a ledger row with a null key or value")
		}
		each(r[0], append(make([]byte, 0, len(r[1])), r[1]...)) // never nil: nil means absent
	}
	return rows.Err()
}

func (t *txn) Get(k []byte) ([]byte, error) {
	if v, ok := t.cached(k); ok {
		if v == nil {
			return nil, ledger.ErrNotFound
		}
		return v, nil
	}
	rows, err := t.query([][]byte{k}, "SELECT v FROM kv WHERE k = $1", k)
	if err != nil {
		return nil, t.fail(fmt.Errorf("postgres get: %w", err))
	}
	v, err := pgx.CollectOneRow(rows, pgx.RowTo[[]byte])
	if errors.Is(err, pgx.ErrNoRows) {
		err, v = ledger.ErrNotFound, nil
	} else if err != nil {
		return nil, t.fail(fmt.Errorf("postgres get: %w", err))
	}
	// The transaction holds the key's lock, so nobody else writes it: a
	// value read once holds until it ends (its own writes are checked first).
	if t.read == nil {
		t.read = map[string][]byte{}
	}
	t.read[string(k)] = v
	return v, err
}

// Prefetch implements ledger.Prefetcher: one query reads every key not
// already known to this transaction.
func (t *txn) Prefetch(keys [][]byte) ([][]byte, error) {
	if t.read == nil {
		t.read = make(map[string][]byte, 2*len(keys))
	}
	ask := make(byteas, 0, len(keys))
	for _, k := range keys {
		if _, ok := t.cached(k); !ok {
			ask = append(ask, k)
		}
	}
	if len(ask) > 0 {
		rows, err := t.query(ask, "SELECT k, v FROM kv WHERE k = ANY($1)", ask)
		if err == nil {
			err = kvRows(rows, func(k, v []byte) { t.read[string(k)] = v })
		}
		if err != nil {
			return nil, t.fail(fmt.Errorf("postgres prefetch: %w", err))
		}
		for _, k := range ask {
			if _, ok := t.read[string(k)]; !ok {
				t.read[string(k)] = nil // absent
			}
		}
	}
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i], _ = t.cached(k)
	}
	return vals, nil
}

func (t *txn) Set(k, v []byte) error {
	if v == nil {
		v = []byte{}
	}
	t.pending.Put(string(k), v)
	return nil
}

func (t *txn) Delete(k []byte) error {
	t.pending.Put(string(k), nil)
	return nil
}

// flush sends the buffered writes in one round trip.
func (t *txn) flush() error {
	if t.pending.Len() == 0 {
		return nil
	}
	if err := t.q.SendBatch(t.ctx, t.writes()).Close(); err != nil {
		return t.fail(fmt.Errorf("postgres write: %w", err))
	}
	return nil
}

// writes takes the buffered writes as a batch of at most two statements,
// whatever their number: the keys are distinct (the buffer holds one write
// per key), so one upsert can carry them all. What they write becomes what
// the transaction knows of those keys: once the buffer is emptied, a
// value read before the write must not answer a later Get.
func (t *txn) writes() *pgx.Batch {
	if t.read == nil {
		t.read = map[string][]byte{}
	}
	// Every key in one buffer, deletes first: keys[:d] are deleted,
	// keys[d:] written with vs.
	n, size, d := 0, 0, 0
	for k, v := range t.pending.All() {
		n, size = n+1, size+len(k)
		if v == nil {
			d++
		}
	}
	buf := make([]byte, 0, size)
	keys, vs := make(byteas, n), make(byteas, 0, n-d)
	del, set := 0, d
	for k, v := range t.pending.All() {
		t.read[k] = v // nil: absent
		start := len(buf)
		buf = append(buf, k...)
		if v == nil {
			keys[del], del = buf[start:len(buf):len(buf)], del+1
		} else {
			keys[set], set = buf[start:len(buf):len(buf)], set+1
			vs = append(vs, v)
		}
	}
	b := &pgx.Batch{}
	t.lock(b, keys, true)
	if d > 0 {
		b.Queue("DELETE FROM kv WHERE k = ANY($1)", keys[:d])
	}
	if d < n {
		b.Queue("INSERT INTO kv (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT (k) DO UPDATE SET v = excluded.v", keys[d:], vs)
	}
	t.pending = ledger.WriteBuffer{}
	return b
}

// scanPage is how many rows one scan query fetches.
const scanPage = 512

func (t *txn) Scan(prefix, start []byte, fn func(k, v []byte) (bool, error)) error {
	t.wantLedgerX = true              // no key lock covers a range (see lock)
	if err := t.flush(); err != nil { // the scan must see this transaction's writes
		return err
	}
	from := prefix
	if start != nil && string(start) > string(prefix) {
		from = start
	}
	end := prefixEnd(prefix)
	inclusive := true
	for {
		op := ">="
		if !inclusive {
			op = ">"
		}
		q := "SELECT k, v FROM kv WHERE k " + op + " $1"
		args := []any{from}
		if end != nil {
			q += " AND k < $2"
			args = append(args, end)
		}
		rows, err := t.query(nil, q+" ORDER BY k LIMIT "+strconv.Itoa(scanPage), args...)
		var ks, vs [][]byte
		if err == nil {
			err = kvRows(rows, func(k, v []byte) { ks, vs = append(ks, slices.Clone(k)), append(vs, v) })
		}
		if err != nil {
			return t.fail(fmt.Errorf("postgres scan: %w", err))
		}
		for i := range ks {
			more, err := fn(ks[i], vs[i])
			if err != nil || !more {
				return err
			}
		}
		if len(ks) < scanPage {
			return nil
		}
		from, inclusive = ks[len(ks)-1], false
	}
}

// prefixEnd is the smallest key greater than every key with prefix, or nil
// if there is none (a prefix of only 0xff bytes).
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// byteas is a bytea[] parameter. The store's sessions encode it with
// byteaArrays (registerByteas): the buffer grown once to its size, then
// PostgreSQL's binary array written into it. pgx's own encoding, which it
// falls back to, goes element by element (through reflection for a
// [][]byte, boxing each one), growing the buffer as it goes: for a
// batch's writes, from 256 bytes to tens of KB, a quarter of the bytes the
// engine process allocated on PostgreSQL.
type byteas [][]byte

// registerByteas has m encode byteas as byteaArrays does, and everything
// else of type bytea[] as before.
func registerByteas(m *pgtype.Map) {
	if t, ok := m.TypeForOID(pgtype.ByteaArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: byteaArrays{t.Codec}})
	}
}

// byteaArrays is pgx's bytea[] codec, with a plan of its own for byteas.
type byteaArrays struct{ pgtype.Codec }

func (c byteaArrays) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(byteas); ok && format == pgtype.BinaryFormatCode {
		return byteasPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type byteasPlan struct{}

// Encode appends a as PostgreSQL's binary array (array_recv): the number
// of dimensions, whether any element is null, the elements' type, each
// dimension's length and lower bound, then each element's length (-1:
// null) and bytes.
func (byteasPlan) Encode(value any, buf []byte) ([]byte, error) {
	a := value.(byteas)
	if a == nil {
		return nil, nil // null
	}
	size, null := 20, int32(0)
	for _, e := range a {
		size += 4 + len(e)
		if e == nil {
			null = 1
		}
	}
	if size > math.MaxInt32 {
		return nil, fmt.Errorf("a bytea[] of %d bytes", size)
	}
	buf = slices.Grow(buf, size)
	if len(a) == 0 {
		return binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint64(buf, 0), pgtype.ByteaOID), nil
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, uint32(null))
	buf = binary.BigEndian.AppendUint32(buf, pgtype.ByteaOID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(a)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, e := range a {
		if e == nil {
			buf = binary.BigEndian.AppendUint32(buf, math.MaxUint32) // -1
			continue
		}
		buf = append(binary.BigEndian.AppendUint32(buf, uint32(len(e))), e...)
	}
	return buf, nil
}

func (a byteas) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a byteas) Index(i int) any { return bytea{&a[i]} }
func (a byteas) IndexType() any  { return bytea{} }

// bytea is one element of a byteas: a pointer, which an interface holds
// without an allocation.
type bytea struct{ p *[]byte }

func (b bytea) BytesValue() ([]byte, error) { return *b.p, nil }

// bigints is a bigint[] parameter, encoded as byteas is.
type bigints []int64

func (a bigints) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

func (a bigints) Index(i int) any { return bigint{&a[i]} }
func (a bigints) IndexType() any  { return bigint{} }

// bigint is one element of a bigints.
type bigint struct{ p *int64 }

func (v bigint) Int64Value() (pgtype.Int8, error) { return pgtype.Int8{Int64: *v.p, Valid: true}, nil }
