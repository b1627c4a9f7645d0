// Package pgstore is a ledger.Store on PostgreSQL, so that every sidecar of
// a fleet dedupes against the same keys and spends against the same
// ceilings.
//
// Other databases that speak PostgreSQL's protocol work if they have its
// advisory locks and SERIALIZABLE isolation. CockroachDB has SERIALIZABLE
// (and serialization failures are retried as on PostgreSQL) but no advisory
// locks, so Open refuses it with ErrNoAdvisoryLocks rather than run
// replicas without the lock that keeps them from livelocking; supporting it
// needs a lock of another kind (a lock row taken FOR UPDATE in a
// transaction of its own). Not built, nor tested against CockroachDB.
//
// Schema. The ledger is one table, kv(k bytea primary key, v bytea), in a
// schema of its own (Options.Schema, default "ratchet"), created and
// migrated by Open from the SQL files embedded under migrations/, in
// order, each once, recorded in schema_migrations. Migrations run under a
// transaction-scoped advisory lock, so replicas starting together migrate
// once. The table leaves a fifth of each page free, so that rewriting a
// value (a record on report, a counter) can stay on its page as a HOT
// update, without a new index entry (measured: 8-10% more pairs/s; an
// upgraded ledger gets it on pages written from then on).
//
// Concurrency. Each Update (one batch of the engine's decisions) is one
// SERIALIZABLE transaction, run while its connection holds an advisory lock
// on the ledger (taken before BEGIN, so the snapshot is fresh), so the
// batches of all replicas commit one after another. Every batch touches
// the same hot keys (a global ceiling's counter, the per-state counts),
// and without the lock replicas under load livelock on serialization
// failures (measured: a batch exhausted 50 retries with three replicas at
// 64 callers). With it, the fleet behaves as one writer with group commit
// per replica. SERIALIZABLE stays on as a
// safety net: a serialization failure still re-runs the whole batch, so
// agents never see one. The engine answers only after COMMIT, with
// synchronous_commit as the server sets it (on by default).
//
// Measured and set aside: letting batches that write no ceiling counter run
// side by side (the lock taken shared, per-replica state-count keys summed
// on read). Under SERIALIZABLE, PostgreSQL tracks reads by index page, and
// every batch inserts time-ordered keys into the same right-hand pages of
// the primary key, so concurrent batches conflicted on nearly every commit
// (about 1.5 rollbacks per commit with three replicas) and throughput fell
// below the serialised figure. Replicas writing in parallel would need
// REPEATABLE READ with the invariants that SERIALIZABLE now guards (one
// execute per key, ceilings, unreported counts) re-proved under it, and
// ceilings split into per-replica shares of the limit.
//
// Round trips. A batch costs a fixed handful whatever its size: the lock,
// BEGIN, one or two prefetch queries (the engine names the keys its
// decisions will read, see ledger.Prefetcher, and one
// SELECT ... WHERE k = ANY($1) fetches them), then the writes (one DELETE
// and one upsert over unnest'ed arrays), COMMIT and the unlock together in
// one pipelined round trip. Reads the engine could not name in advance are
// one statement each; a transaction remembers what it read. (Sending the
// lock, BEGIN and the first reads as one pipeline, so that the server
// starts a batch the moment another replica unlocks, was measured and
// gained nothing. Nor did taking the WAL flush out of the lock: each batch
// committed with synchronous_commit off for itself, so that its writes
// were visible and the lock free at once, and its answer waited for a
// later transaction writing one WAL record (a logical message) under the
// server's setting, whose flush covers every earlier commit. Three
// processes gained nothing measurable on 2 cores, where the database and
// the replicas share the CPU; it was reverted.)
//
// A commit's answer can be lost with its connection. The store learns
// each transaction's id in its first round trip (txid_current, sent with
// BEGIN), so when the round trip carrying the writes and COMMIT gets no
// answer it closes that connection and asks the server, on another, how
// the transaction ended (txid_status): committed, and the batch's
// decisions stand and are answered; rolled back, and the batch, which
// recorded nothing, is run again. Only when the server cannot be asked
// within a few seconds is the batch reported failed (unavailable) with its
// outcome unknown; if it did commit, a retried begin finds its effect
// (in_flight, then blocked once the lease runs out) and never executes
// twice. A server that answers with an error (a serialization failure at
// COMMIT, say) has answered: that transaction did not commit. An unlock
// that fails after a COMMIT that succeeded does not fail the batch: the
// connection is closed instead, which releases the lock.
//
// Dead replicas. A replica holds the ledger lock for a batch's few round
// trips. If its process dies, the kernel closes its connections and the
// server frees the lock at once. If its machine or network goes instead,
// nothing tells the server: it would notice only at its TCP keepalive
// (after two hours by default), and every replica's writes would wait on
// the lock until then. So the store's sessions ask the server for
// keepalives after 10 s idle, every 5 s, 3 probes (a vanished peer is
// found in about 25 s), and to end a session that sits idle inside a
// transaction for Options.StuckTimeout (30 s: a frozen process). Its own
// batch then fails or is settled as above. A DSN may set these parameters
// itself.
//
// The store never sees payloads or dimension values: like Badger it only
// holds what the engine writes, which is hashes of those.
package pgstore

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// the ledger lock it holds (default 30s; see "Dead replicas").
	StuckTimeout time.Duration
	// Logger hears of commits whose answer the network lost and how each
	// was settled; nil discards that.
	Logger *slog.Logger
}

// Store is a ledger.Store on PostgreSQL.
type Store struct {
	// Batches have a pool of their own, so that readers holding every
	// connection of theirs never make the writer wait.
	reads, writes *pgxpool.Pool
	log           *slog.Logger
	retries       int
	lock          int64 // advisory lock key of this ledger (schema)
}

var _ ledger.Store = (*Store)(nil)

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
	reads, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	wcfg := cfg.Copy()
	wcfg.MaxConns = 2 // the batch's connection, and one to settle a lost commit
	writes, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		reads.Close()
		return nil, fmt.Errorf("connecting to postgres: %w", err)
	}
	h := fnv.New64a()
	h.Write([]byte("ratchet-ledger:" + schema))
	s := &Store{reads: reads, writes: writes, log: opts.Logger, retries: opts.MaxRetries, lock: int64(h.Sum64())}
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

// ErrNoAdvisoryLocks means the database lacks PostgreSQL's advisory locks,
// which the store uses to migrate once and to order replicas' batches.
var ErrNoAdvisoryLocks = errors.New("the database has no PostgreSQL advisory locks, which the shared ledger needs (CockroachDB, for one, has none)")

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

// Update implements ledger.Store: fn runs in one SERIALIZABLE transaction,
// re-run from the start after a serialization failure.
func (s *Store) Update(fn func(ledger.Txn) error) error {
	ctx := context.Background()
	var err error
	for attempt := range s.retries {
		err = s.try(ctx, fn)
		if lost, ok := errors.AsType[*lostCommit](err); ok {
			committed, serr := s.settle(ctx, lost)
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

func (s *Store) try(ctx context.Context, fn func(ledger.Txn) error) error {
	conn, err := s.writes.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres connection: %w", err)
	}
	defer conn.Release()
	// The lock is taken before BEGIN: a SERIALIZABLE transaction's
	// snapshot is fixed at its first statement, so locking inside it would
	// leave a batch that waited working on a stale snapshot. The lock is
	// the session's. (Lock and BEGIN cannot share a round trip: in one
	// query string the lock would be part of the transaction.) BEGIN goes
	// with the batch's first statement, and the writes, COMMIT and the
	// unlock go together in one round trip.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", s.lock); err != nil {
		s.abandon(ctx, conn)
		return fmt.Errorf("postgres ledger lock: %w", err)
	}
	t := &txn{ctx: ctx, q: conn, begin: "BEGIN ISOLATION LEVEL SERIALIZABLE"}
	err = fn(t)
	if err == nil && t.failed == nil {
		b := t.writes()
		commit := b.Len()
		b.Queue("COMMIT")
		b.Queue("SELECT pg_advisory_unlock($1)", s.lock)
		br := conn.SendBatch(ctx, b)
		for i := 0; i <= commit && err == nil; i++ {
			_, err = br.Exec()
		}
		if err == nil {
			// COMMIT succeeded: the batch is durable whatever happens to
			// the unlock. A session that could not release the lock is
			// closed, which releases it.
			if err := br.Close(); err != nil {
				conn.Conn().Close(ctx)
			}
			return nil
		}
		br.Close()
		var pe *pgconn.PgError
		if t.xid != 0 && !errors.As(err, &pe) {
			// No answer from the server: the connection went, maybe
			// after the COMMIT was carried out. Closing it ends the
			// session (and its lock) once the server notices; Update
			// then asks how the transaction ended.
			conn.Conn().Close(ctx)
			return &lostCommit{xid: t.xid, err: err}
		}
		err = fmt.Errorf("postgres commit: %w", err)
	} else if t.failed != nil { // a statement failed: the transaction is void
		err = t.failed
	}
	s.abandon(ctx, conn)
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

// settleWait bounds how long settle waits for the server to finish a
// transaction whose connection was lost.
const settleWait = 5 * time.Second

// settle finds out, on another connection, how a transaction whose commit
// got no answer ended: committed (the batch is recorded and its decisions
// stand) or rolled back (nothing was recorded; Update runs the batch
// again). The question is asked in a transaction that takes an id of its
// own, so its COMMIT waits, as any commit does under the server's
// synchronous_commit (and for any synchronous standbys), for the WAL that
// holds the earlier commit. Until the server notices the lost connection
// the transaction is still in progress; settle waits up to settleWait for
// it to end. An error means it cannot tell: the batch is then reported
// failed, its outcome unknown.
func (s *Store) settle(ctx context.Context, lost *lostCommit) (committed bool, _ error) {
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	for {
		var status *string
		err := pgx.BeginFunc(ctx, s.writes, func(tx pgx.Tx) error {
			var own int64
			return tx.QueryRow(ctx, "SELECT txid_status($1), txid_current()", lost.xid).Scan(&status, &own)
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
			return false, fmt.Errorf("%w; still in progress after %v", lost, settleWait)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// abandon rolls back whatever transaction conn is in and releases the
// ledger lock; if even that fails, the connection is closed, which ends
// both on the server, rather than returned to the pool holding the lock.
func (s *Store) abandon(ctx context.Context, conn *pgxpool.Conn) {
	if _, err := conn.Exec(ctx, "ROLLBACK; SELECT pg_advisory_unlock_all()"); err != nil {
		conn.Conn().Close(ctx)
	}
}

// View implements ledger.Store with a read-only snapshot.
func (s *Store) View(fn func(ledger.Reader) error) error {
	ctx := context.Background()
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
	begin   string // BEGIN not sent yet: it goes with the first statement
	xid     int64  // the transaction's id, learned with BEGIN (0: unknown)
	pending ledger.WriteBuffer
	read    map[string][]byte // what this transaction read; nil value: absent
}

// query runs one query, preceded in the same round trip by BEGIN when the
// transaction has not begun yet, and by a query for the transaction's id,
// which Update needs if the answer to its COMMIT is lost.
func (t *txn) query(sql string, args ...any) (pgx.Rows, error) {
	if t.begin == "" {
		return t.q.Query(t.ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(t.begin)
	b.Queue("SELECT txid_current()")
	b.Queue(sql, args...)
	t.begin = ""
	br := t.q.SendBatch(t.ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	if err := br.QueryRow().Scan(&t.xid); err != nil {
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

// kvRows reads the rows of a "SELECT k, v" query and closes them.
func kvRows(rows pgx.Rows) (ks, vs [][]byte, err error) {
	defer rows.Close()
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			return nil, nil, err
		}
		ks, vs = append(ks, k), append(vs, v)
	}
	return ks, vs, rows.Err()
}

func (t *txn) Get(k []byte) ([]byte, error) {
	if v, ok := t.cached(k); ok {
		if v == nil {
			return nil, ledger.ErrNotFound
		}
		return v, nil
	}
	rows, err := t.query("SELECT v FROM kv WHERE k = $1", k)
	if err != nil {
		return nil, t.fail(fmt.Errorf("postgres get: %w", err))
	}
	v, err := pgx.CollectOneRow(rows, pgx.RowTo[[]byte])
	if errors.Is(err, pgx.ErrNoRows) {
		err, v = ledger.ErrNotFound, nil
	} else if err != nil {
		return nil, t.fail(fmt.Errorf("postgres get: %w", err))
	}
	// Under the ledger lock nobody else writes, so a value read once holds
	// for the rest of the transaction (its own writes are checked first).
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
		t.read = map[string][]byte{}
	}
	var ask [][]byte
	for _, k := range keys {
		if _, ok := t.cached(k); !ok {
			ask = append(ask, k)
		}
	}
	if len(ask) > 0 {
		rows, err := t.query("SELECT k, v FROM kv WHERE k = ANY($1)", ask)
		if err == nil {
			var ks, vs [][]byte
			if ks, vs, err = kvRows(rows); err == nil {
				for _, k := range ask {
					t.read[string(k)] = nil // absent unless found
				}
				for i, k := range ks {
					t.read[string(k)] = vs[i]
				}
			}
		}
		if err != nil {
			return nil, t.fail(fmt.Errorf("postgres prefetch: %w", err))
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
	var dels, ks, vs [][]byte
	if t.read == nil {
		t.read = map[string][]byte{}
	}
	for k, v := range t.pending.All() {
		t.read[k] = v // nil: absent
		if v == nil {
			dels = append(dels, []byte(k))
		} else {
			ks, vs = append(ks, []byte(k)), append(vs, v)
		}
	}
	b := &pgx.Batch{}
	if t.begin != "" {
		b.Queue(t.begin)
		t.begin = ""
	}
	if len(dels) > 0 {
		b.Queue("DELETE FROM kv WHERE k = ANY($1)", dels)
	}
	if len(ks) > 0 {
		b.Queue("INSERT INTO kv (k, v) SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT (k) DO UPDATE SET v = excluded.v", ks, vs)
	}
	t.pending = ledger.WriteBuffer{}
	return b
}

// scanPage is how many rows one scan query fetches.
const scanPage = 512

func (t *txn) Scan(prefix, start []byte, fn func(k, v []byte) (bool, error)) error {
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
		rows, err := t.query(q+" ORDER BY k LIMIT "+strconv.Itoa(scanPage), args...)
		var ks, vs [][]byte
		if err == nil {
			ks, vs, err = kvRows(rows)
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
