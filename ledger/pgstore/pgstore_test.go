package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ratchet-mcp/ratchet/internal/pgtest"
	"github.com/ratchet-mcp/ratchet/ledger"
)

func TestConcurrentOpensMigrateOnce(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "s_")
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			s, err := Open(context.Background(), dsn, &Options{Schema: schema})
			if err != nil {
				t.Error(err)
				return
			}
			s.Close()
		})
	}
	wg.Wait()
	conn, _ := pgx.Connect(context.Background(), dsn)
	defer conn.Close(context.Background())
	files, _ := fs.Glob(migrations, "migrations/*.sql")
	var n int
	conn.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".schema_migrations").Scan(&n)
	if n != len(files) || n < 2 {
		t.Fatalf("%d migration rows, want one per migration (%d)", n, len(files))
	}
	var opts []string
	conn.QueryRow(context.Background(), "SELECT reloptions FROM pg_class WHERE oid = '"+schema+".kv'::regclass").Scan(&opts)
	if !slices.Contains(opts, "fillfactor=80") {
		t.Errorf("kv options %v: the fillfactor migration did not apply", opts)
	}
	if _, err := Open(context.Background(), dsn, &Options{Schema: "Bad-Name"}); err == nil {
		t.Fatal("a schema name that is not an identifier was accepted")
	}
}

func TestScanPagesInOrder(t *testing.T) {
	s := openFresh(t)
	const n = 1300 // more than two pages
	err := s.Update(context.Background(), func(tx ledger.Txn) error {
		for i := range n {
			if err := tx.Set([]byte(fmt.Sprintf("p\x00%05d", i)), []byte{byte(i)}); err != nil {
				return err
			}
		}
		tx.Set([]byte("p\x01after"), []byte("x"))
		return tx.Set([]byte("o\xffbefore"), []byte("x"))
	})
	if err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	err = s.View(context.Background(), func(r ledger.Reader) error {
		return r.Scan([]byte("p\x00"), []byte("p\x0000100"), func(k, _ []byte) (bool, error) {
			got = append(got, k)
			return true, nil
		})
	})
	if err != nil || len(got) != n-100 || string(got[0]) != "p\x0000100" || string(got[len(got)-1]) != fmt.Sprintf("p\x00%05d", n-1) {
		t.Fatalf("scan: %d keys, %v", len(got), err)
	}
	for i := 1; i < len(got); i++ {
		if bytes.Compare(got[i-1], got[i]) >= 0 {
			t.Fatal("scan out of order")
		}
	}
	// A failing statement voids the batch: nothing of it is written.
	err = s.Update(context.Background(), func(tx ledger.Txn) error {
		tx.Set([]byte("q\x00kept?"), []byte("x"))
		return fmt.Errorf("the op failed")
	})
	if err == nil {
		t.Fatal("a failed batch committed")
	}
	s.View(context.Background(), func(r ledger.Reader) error {
		if _, err := r.Get([]byte("q\x00kept?")); err != ledger.ErrNotFound {
			t.Fatalf("a failed batch left a write: %v", err)
		}
		return nil
	})
	for in, want := range map[string]string{"p\x00": "p\x01", "a\xff": "b", "\xff\xff": ""} {
		if got := prefixEnd([]byte(in)); string(got) != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrefetchAndLockRelease(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "s_")
	s, err := Open(context.Background(), dsn, &Options{Schema: schema, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(context.Background(), func(tx ledger.Txn) error {
		tx.Set([]byte("a"), []byte("1"))
		return tx.Set([]byte("empty"), nil)
	}); err != nil {
		t.Fatal(err)
	}
	err = s.Update(context.Background(), func(tx ledger.Txn) error {
		tx.Set([]byte("mine"), []byte("2"))
		tx.Delete([]byte("a"))
		vals, err := tx.(ledger.Prefetcher).Prefetch([][]byte{[]byte("a"), []byte("empty"), []byte("none"), []byte("mine"), []byte("empty")})
		if err != nil {
			return err
		}
		// Own writes win (a deleted key is absent); a stored empty value is
		// present; a missing key is nil.
		if vals[0] != nil || vals[1] == nil || len(vals[1]) != 0 || vals[2] != nil || string(vals[3]) != "2" || vals[4] == nil {
			t.Errorf("prefetch = %q", vals)
		}
		if v, err := tx.Get([]byte("empty")); err != nil || len(v) != 0 {
			t.Errorf("get after prefetch = %q, %v", v, err)
		}
		if _, err := tx.Get([]byte("none")); err != ledger.ErrNotFound {
			t.Errorf("get of a prefetched absent key = %v", err)
		}
		return fmt.Errorf("the batch failed")
	})
	if err == nil {
		t.Fatal("a failed batch committed")
	}
	// The failed batch released the ledger lock: another store (another
	// replica) can commit, and so can this one.
	other, err := Open(context.Background(), dsn, &Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for _, st := range []*Store{other, s} {
		if err := st.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("after"), []byte("x")) }); err != nil {
			t.Fatal(err)
		}
	}
	s.View(context.Background(), func(r ledger.Reader) error {
		if v, err := r.Get([]byte("a")); err != nil || string(v) != "1" {
			t.Errorf("a = %q, %v: the failed batch's delete leaked", v, err)
		}
		return nil
	})
}

func TestNoAdvisoryLocksIsNamed(t *testing.T) {
	// What PostgreSQL-protocol databases without advisory locks answer
	// (an unknown function, or an unsupported feature) is recognised; other
	// errors are not.
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "42883", Message: "unknown function: pg_advisory_xact_lock()"}:                                   true,
		&pgconn.PgError{Code: "0A000", Message: "pg_advisory_xact_lock is not supported"}:                                      true,
		fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "42883", Message: "function pg_advisory_lock(bigint) does not exist"}): true,
		&pgconn.PgError{Code: "42883", Message: "function foo() does not exist"}:                                               false,
		&pgconn.PgError{Code: "40001", Message: "could not serialize access"}:                                                  false,
		fmt.Errorf("connection refused"): false,
	} {
		if noAdvisoryLocks(err) != want {
			t.Errorf("noAdvisoryLocks(%v) = %v", err, !want)
		}
	}
}

// TestReadsAfterAScanSeeTheWritesItFlushed: a scan sends the buffered
// writes to the server first; a key read before it and written since must
// then read as written, not as first read.
func TestReadsAfterAScanSeeTheWritesItFlushed(t *testing.T) {
	s := openFresh(t)
	if err := s.Update(context.Background(), func(tx ledger.Txn) error {
		tx.Set([]byte("c\x00gone"), []byte("old"))
		return tx.Set([]byte("c\x00counter"), []byte("1"))
	}); err != nil {
		t.Fatal(err)
	}
	err := s.Update(context.Background(), func(tx ledger.Txn) error {
		if _, err := tx.(ledger.Prefetcher).Prefetch([][]byte{[]byte("c\x00counter"), []byte("c\x00gone")}); err != nil {
			return err
		}
		tx.Set([]byte("c\x00counter"), []byte("2"))
		tx.Delete([]byte("c\x00gone"))
		if err := tx.Scan([]byte("m\x00"), nil, func(k, v []byte) (bool, error) { return true, nil }); err != nil {
			return err
		}
		if v, err := tx.Get([]byte("c\x00counter")); err != nil || string(v) != "2" {
			t.Errorf("counter after a scan = %q, %v; want the write before it", v, err)
		}
		if v, err := tx.Get([]byte("c\x00gone")); err != ledger.ErrNotFound {
			t.Errorf("deleted key after a scan = %q, %v; want not found", v, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openFresh opens a store in a fresh schema, closed when the test ends.
func openFresh(t *testing.T) *Store {
	t.Helper()
	dsn := pgtest.DSN(t)
	s, err := Open(context.Background(), dsn, &Options{Schema: pgtest.Schema(t, dsn, "s_")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestTheOutcomeOfALostCommitIsAskedDurably: the answer "committed" to a
// lost commit is acted on (its batch's executes are answered), so the
// question's own COMMIT must wait for the WAL flush (and any synchronous
// standbys) past the lost commit's record, as every batch's COMMIT does.
// A transaction that writes no WAL commits without waiting for anything,
// even with an id of its own, so the question writes a record.
func TestTheOutcomeOfALostCommitIsAskedDurably(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := openFresh(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var xid int64
	if err := conn.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	// Another session's flush can cover the question by chance; ten
	// questions are not all covered.
	for i := range 10 {
		var before, flushed int64
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn() - '0/0'").Scan(&before); err != nil {
			t.Fatal(err)
		}
		committed, err := s.commitOutcome(ctx, &lostCommit{xid: xid, err: errors.New("cut")})
		if err != nil || !committed {
			t.Fatalf("commitOutcome = %v, %v; want committed", committed, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn() - '0/0'").Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		if flushed <= before {
			t.Fatalf("question %d: the WAL is flushed to %d, not past %d where the question's commit began: it was answered before it was durable", i, flushed, before)
		}
	}
}

// TestLostCommitAnswers: when the connection goes during the round trip
// that carries a batch's COMMIT, the store asks the server how the
// transaction ended instead of reporting an unknown outcome: committed
// stands, rolled back is run again. Only when it cannot ask does the
// batch fail.
func TestLostCommitAnswers(t *testing.T) {
	dsn := pgtest.DSN(t)
	r := newRelay(t, dsn)
	var logged bytes.Buffer // Update runs on the test's goroutine
	s, err := Open(context.Background(), r.dsn, &Options{Schema: pgtest.Schema(t, dsn, "s_"), MaxConns: 1,
		Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		name   string
		cut    int32
		refuse bool   // and refuse new connections, so nobody can ask
		runs   int    // times the batch runs
		ok     bool   // Update succeeds
		log    string // what the operator is told
	}{
		{"answer lost after the server committed", answerLost, false, 1, true, "the server says it committed"},
		{"request lost before the server saw the commit", requestLost, false, 2, true, "the server rolled it back"},
		{"answer lost and the server out of reach", answerLost, true, 1, false, "its outcome is unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := []byte("lost\x00" + tc.name)
			// pgx prepares a statement the first time a connection sends
			// it, in a round trip of its own: a batch of the same shape
			// first, so that the cut falls on the round trip of the
			// writes and the COMMIT.
			if err := s.Update(context.Background(), func(tx ledger.Txn) error {
				tx.Get([]byte("warm"))
				return tx.Set([]byte("warm"), []byte("x"))
			}); err != nil {
				t.Fatal(err)
			}
			runs := 0
			err := s.Update(context.Background(), func(tx ledger.Txn) error {
				runs++
				// A read first: the round trip that begins the
				// transaction and learns its id.
				if _, err := tx.Get(k); err != ledger.ErrNotFound {
					return fmt.Errorf("get before the write: %v", err)
				}
				if runs == 1 {
					r.refuse.Store(tc.refuse)
					r.cut.Store(tc.cut) // the next request is the writes and COMMIT
				}
				return tx.Set(k, fmt.Appendf(nil, "run %d", runs))
			})
			select {
			case <-r.cutDone:
			default:
				t.Fatal("the relay cut nothing: the test proves nothing")
			}
			r.refuse.Store(false)
			if (err == nil) != tc.ok || runs != tc.runs {
				t.Fatalf("Update = %v after %d runs; want success %v after %d", err, runs, tc.ok, tc.runs)
			}
			if !tc.ok && !strings.Contains(err.Error(), "no answer") {
				t.Errorf("the error does not say the outcome is unknown: %v", err)
			}
			if !strings.Contains(logged.String(), tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, logged.String())
			}
			logged.Reset()
			// What the server holds: the run that committed. (Where the
			// store could not ask, the transaction had committed.)
			s.View(context.Background(), func(rd ledger.Reader) error {
				if v, err := rd.Get(k); err != nil || string(v) != fmt.Sprint("run ", tc.runs) {
					t.Errorf("stored %q, %v; want run %d", v, err, tc.runs)
				}
				return nil
			})
		})
	}
}

// The ways relay loses the next request of a connection.
const (
	passThrough int32 = iota
	answerLost        // the server gets it; its answer, up to the COMMIT, is swallowed, then both sides close
	requestLost       // dropped, and both sides close: the server never sees it
)

// relay is a TCP relay between a store and the server that can lose one
// round trip, as a network can.
type relay struct {
	dsn     string // the server's DSN, through the relay
	server  string
	cut     atomic.Int32 // what happens to the next request (then passThrough again)
	refuse  atomic.Bool  // close new connections at once
	cutDone chan struct{}
}

func newRelay(t *testing.T, dsn string) *relay {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		t.Skip("the relay needs a server reached over TCP, not a Unix socket")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	u := url.URL{Scheme: "postgres", User: url.UserPassword(cfg.User, cfg.Password), Host: ln.Addr().String(), Path: cfg.Database, RawQuery: "sslmode=disable"}
	r := &relay{dsn: u.String(), server: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), cutDone: make(chan struct{}, 1)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if r.refuse.Load() {
				c.Close()
				continue
			}
			go r.serve(c)
		}
	}()
	return r
}

func (r *relay) serve(client net.Conn) {
	server, err := net.Dial("tcp", r.server)
	if err != nil {
		client.Close()
		return
	}
	var once sync.Once
	closeBoth := func() {
		once.Do(func() { client.Close(); server.Close() })
	}
	var muted atomic.Bool
	go func() { // the server's answers
		buf := make([]byte, 64<<10)
		var held []byte
		for {
			n, err := server.Read(buf)
			if muted.Load() {
				if held = append(held, buf[:n]...); bytes.Contains(held, []byte("COMMIT\x00")) {
					r.cutDone <- struct{}{} // before the client can see the cut
					closeBoth()
					return
				}
			} else if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			switch r.cut.Swap(passThrough) {
			case requestLost:
				r.cutDone <- struct{}{}
				closeBoth()
				return
			case answerLost:
				muted.Store(true)
			}
			if _, werr := server.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			closeBoth()
			return
		}
	}
}

// TestAStuckReplicaLosesTheLock: a replica that takes the ledger lock,
// begins a batch and goes silent (a frozen process; a vanished machine
// looks the same to the server until its keepalives fail) must not stall
// the others: the server ends its session, which frees the lock.
func TestAStuckReplicaLosesTheLock(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "s_")
	ctx := context.Background()
	stuck, err := Open(ctx, dsn, &Options{Schema: schema, StuckTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	conn, err := stuck.writes.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var idle, interval, count string
	var tcp bool // over a Unix socket the server has no keepalives to set
	if err := conn.QueryRow(ctx, "SELECT current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'), inet_server_addr() IS NOT NULL").Scan(&idle, &interval, &count, &tcp); err != nil {
		t.Fatal(err)
	}
	if tcp && (idle != "10" || interval != "5" || count != "3") {
		t.Errorf("the server's keepalives for the store's sessions: idle %s, interval %s, count %s", idle, interval, count)
	}
	for _, q := range []string{"SELECT pg_advisory_lock(" + strconv.FormatInt(stuck.lock, 10) + ")", "BEGIN ISOLATION LEVEL SERIALIZABLE", "SELECT 1"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	other, err := Open(ctx, dsn, &Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	done := make(chan error, 1)
	go func() {
		done <- other.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("after"), []byte("x")) })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		conn.Conn().Close(ctx) // let the waiting batch finish
		<-done
		t.Fatal("the stuck session kept the ledger lock for 10 s")
	}
}

// TestWritesDoNotWaitForReaders: readers holding every connection for
// reads leave the writer its own.
func TestWritesDoNotWaitForReaders(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := Open(context.Background(), dsn, &Options{Schema: pgtest.Schema(t, dsn, "s_"), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := make(chan struct{})
	var readers, reading sync.WaitGroup
	for range 2 {
		readers.Add(1)
		reading.Add(1)
		go func() {
			defer readers.Done()
			s.View(context.Background(), func(ledger.Reader) error {
				reading.Done()
				<-release
				return nil
			})
		}()
	}
	reading.Wait()
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	defer readers.Wait()
	defer free()
	done := make(chan error, 1)
	go func() {
		done <- s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("w"), []byte("x")) })
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		free()
		t.Fatal("a batch waited 5 s for readers to give back a connection")
	}
}

// openPair opens two stores (two replicas) on one fresh schema.
func openPair(t *testing.T) (a, b *Store) {
	t.Helper()
	dsn := pgtest.DSN(t)
	schema := pgtest.Schema(t, dsn, "s_")
	for _, s := range []**Store{&a, &b} {
		st, err := Open(context.Background(), dsn, &Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		*s = st
	}
	return a, b
}

// holdBatch runs a batch on s that reads the keys read and then waits
// until release is called before writing v to each key of write. It
// returns once the reads are done (the batch holds their locks) and
// reports the batch's error on done. A test that fails early releases it
// as it ends, before the stores close.
func holdBatch(t *testing.T, s *Store, read, write []string, v string) (release func(), done chan error) {
	t.Helper()
	done = make(chan error, 1)
	holding, released := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	release = func() { rel.Do(func() { close(released) }) }
	t.Cleanup(release)
	go func() {
		done <- s.Update(context.Background(), func(tx ledger.Txn) error {
			for _, k := range read {
				if _, err := tx.Get([]byte(k)); err != nil && err != ledger.ErrNotFound {
					return err
				}
			}
			once.Do(func() { close(holding) })
			<-released
			for _, k := range write {
				tx.Set([]byte(k), []byte(v))
			}
			return nil
		})
	}()
	select {
	case <-holding:
	case err := <-done:
		t.Fatalf("the holding batch ended early: %v", err)
	}
	return release, done
}

// waitsForIt checks that what (whose result got delivers) waits for the
// batch holdBatch started: nothing comes within 300 ms, then, once that
// batch is released and done, the result.
func waitsForIt[T any](t *testing.T, got <-chan T, release func(), done chan error, what string) T {
	t.Helper()
	select {
	case v := <-got:
		t.Fatalf("%s went ahead of the batch holding its keys (%v)", what, v)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return <-got
}

// TestBatchesOnOtherKeysRunSideBySide: a replica's batch waits only for
// batches that hold a key it needs, not for every other replica's.
func TestBatchesOnOtherKeysRunSideBySide(t *testing.T) {
	a, b := openPair(t)
	release, done := holdBatch(t, a, []string{"x"}, []string{"x"}, "a")
	other := make(chan error, 1)
	go func() {
		other <- b.Update(context.Background(), func(tx ledger.Txn) error {
			if _, err := tx.Get([]byte("y")); err != ledger.ErrNotFound {
				return fmt.Errorf("y: %v", err)
			}
			return tx.Set([]byte("y"), []byte("b"))
		})
	}()
	select {
	case err := <-other:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a batch on other keys waited 5 s for another replica's batch")
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestBatchesOnOneKeyTakeTurns: two replicas read a key and write it
// (a counter): the second sees the first's write, whatever the timing, so
// no update is lost; it waits rather than failing.
func TestBatchesOnOneKeyTakeTurns(t *testing.T) {
	a, b := openPair(t)
	if err := a.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("n"), []byte("0")) }); err != nil {
		t.Fatal(err)
	}
	incr := func(tx ledger.Txn) error {
		v, err := tx.Get([]byte("n"))
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(string(v))
		return tx.Set([]byte("n"), []byte(strconv.Itoa(n+1)))
	}
	release, done := holdBatch(t, a, []string{"n"}, nil, "")
	second := make(chan error, 1)
	go func() { second <- b.Update(context.Background(), incr) }()
	if err := waitsForIt(t, second, release, done, "a batch writing a key another replica's batch read"); err != nil {
		t.Fatal(err)
	}
	// Many increments from both replicas at once: none lost.
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if err := []*Store{a, b}[i%2].Update(context.Background(), incr); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	a.View(context.Background(), func(r ledger.Reader) error {
		if v, err := r.Get([]byte("n")); err != nil || string(v) != "41" {
			t.Errorf("n = %q, %v; want 41", v, err)
		}
		return nil
	})
}

// TestAScanWaitsForEveryBatch: a scan covers keys no lock names (some
// not written yet), so a batch that scans runs alone, and sees what the
// batch it waited for wrote.
func TestAScanWaitsForEveryBatch(t *testing.T) {
	a, b := openPair(t)
	release, done := holdBatch(t, a, []string{"p\x00other"}, []string{"p\x00new"}, "a")
	scanned := make(chan []string, 1)
	go func() {
		var keys []string
		err := b.Update(context.Background(), func(tx ledger.Txn) error {
			keys = keys[:0]
			return tx.Scan([]byte("p\x00"), nil, func(k, _ []byte) (bool, error) {
				keys = append(keys, string(k))
				return true, nil
			})
		})
		if err != nil {
			t.Error(err)
		}
		scanned <- keys
	}()
	if keys := waitsForIt(t, scanned, release, done, "a scan"); !slices.Equal(keys, []string{"p\x00new"}) {
		t.Fatalf("the scan saw %q, want the key the other batch wrote", keys)
	}
}

// TestAReadStopsWhenItsRequestEnds: a View's queries run on its context,
// so a read whose request ended (a client gone, a deadline) fails instead
// of waiting on the server.
func TestAReadStopsWhenItsRequestEnds(t *testing.T) {
	s := openFresh(t)
	if err := s.Update(context.Background(), func(tx ledger.Txn) error { return tx.Set([]byte("r\x00a"), []byte("x")) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err := s.View(ctx, func(r ledger.Reader) error {
		if _, err := r.Get([]byte("r\x00a")); err != nil {
			return err
		}
		cancel() // the request ends mid-read
		_, err := r.Get([]byte("r\x00b"))
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a read after its context ended: %v", err)
	}
	err = s.View(ctx, func(r ledger.Reader) error { _, err := r.Get([]byte("r\x00a")); return err })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a View begun after its context ended: %v", err)
	}
}

// TestStatsCountWhatABatchSent: make bench reports round trips and
// statements per pair from Stats, so they must count what a batch sent:
// a batch that reads one key and writes one is its opening round trip
// (BEGIN, txid, the ledger lock), the read, and the writes with COMMIT;
// a batch that fails adds its ROLLBACK and commits nothing.
func TestStatsCountWhatABatchSent(t *testing.T) {
	s := openFresh(t)
	diff := func(before Stats) Stats {
		a := s.Stats()
		return Stats{a.Commits - before.Commits, a.RoundTrips - before.RoundTrips, a.Statements - before.Statements}
	}
	before := s.Stats()
	if err := s.Update(context.Background(), func(tx ledger.Txn) error {
		if _, err := tx.Get([]byte("c\x00counter")); err != nil && err != ledger.ErrNotFound {
			return err
		}
		return tx.Set([]byte("c\x00counter"), []byte("1"))
	}); err != nil {
		t.Fatal(err)
	}
	ok := diff(before)
	if ok.Commits != 1 || ok.RoundTrips < 3 || ok.Statements < ok.RoundTrips+2 {
		t.Errorf("a committed batch counted %+v; want 1 commit, at least 3 round trips (open, read, writes+COMMIT) and the opening's 3 statements plus the rest", ok)
	}
	before = s.Stats()
	failed := errors.New("refused")
	if err := s.Update(context.Background(), func(tx ledger.Txn) error {
		if _, err := tx.Get([]byte("c\x00counter")); err != nil {
			return err
		}
		return failed
	}); !errors.Is(err, failed) {
		t.Fatalf("Update = %v, want %v", err, failed)
	}
	if bad := diff(before); bad.Commits != 0 || bad.RoundTrips < 3 {
		t.Errorf("a failed batch counted %+v; want no commit and its opening, read and ROLLBACK round trips", bad)
	}
	t.Logf("committed batch: %+v", ok)
}

// TestBatchWritesInsertRewriteAndDelete: a batch's writes insert keys not
// there, rewrite keys there (read first or not) and delete keys, and a
// batch taking the ledger key exclusively (no key locks) writes the same
// way.
func TestBatchWritesInsertRewriteAndDelete(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	if err := s.Update(ctx, func(tx ledger.Txn) error {
		for _, k := range []string{"a", "b", "c", "d"} {
			tx.Set([]byte("p\x00"+k), []byte("1"+k))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx ledger.Txn) error {
		if _, err := tx.Get([]byte("p\x00a")); err != nil {
			return err
		}
		if _, err := tx.Get([]byte("p\x00x")); err != ledger.ErrNotFound {
			return fmt.Errorf("p x: %v, want not found", err)
		}
		tx.Set([]byte("p\x00a"), []byte("2a")) // read, present
		tx.Set([]byte("p\x00b"), []byte("2b")) // blind, present
		tx.Set([]byte("p\x00x"), []byte("2x")) // read, absent
		tx.Set([]byte("p\x00y"), nil)          // blind, absent, empty
		tx.Delete([]byte("p\x00c"))
		tx.Set([]byte("p\x00z"), []byte("gone")) // written, then deleted
		return tx.Delete([]byte("p\x00z"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, func(tx ledger.Txn) error {
		// a scan: the ledger key taken exclusively, then run again
		if err := tx.Scan([]byte("q\x00"), nil, func(_, _ []byte) (bool, error) { return true, nil }); err != nil {
			return err
		}
		tx.Set([]byte("p\x00d"), []byte("3d"))
		return tx.Set([]byte("p\x00w"), []byte("3w"))
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if err := s.View(ctx, func(r ledger.Reader) error {
		return r.Scan([]byte("p\x00"), nil, func(k, v []byte) (bool, error) {
			got[string(k[2:])] = string(v)
			return true, nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "2a", "b": "2b", "d": "3d", "w": "3w", "x": "2x", "y": ""}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("the ledger after the batches (-want +got):\n%s", d)
	}
}

func TestAPrefetchTellsEmptyValuesFromAbsentKeysAmongMany(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	// Keys of every byte value, a few hundred of them (one bytea[] each
	// way), every other one written, some with empty values.
	var keys [][]byte
	want := map[string][]byte{}
	for i := range 300 {
		k := []byte{'p', 0, byte(i), 0xff, byte(i >> 8), 0}
		keys = append(keys, k)
		switch i % 4 {
		case 0:
			want[string(k)] = []byte{}
		case 2:
			want[string(k)] = bytes.Repeat([]byte{byte(i)}, i)
		}
	}
	if err := s.Update(ctx, func(tx ledger.Txn) error {
		for k, v := range want {
			tx.Set([]byte(k), v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"prefetch", "get"} {
		got := map[string][]byte{}
		if err := s.Update(ctx, func(tx ledger.Txn) error {
			if how == "prefetch" {
				vals, err := tx.(ledger.Prefetcher).Prefetch(keys)
				if err != nil {
					return err
				}
				for i, v := range vals {
					if v != nil {
						got[string(keys[i])] = v
					}
				}
			}
			for _, k := range keys { // after a prefetch, from what it read
				v, err := tx.Get(k)
				switch {
				case errors.Is(err, ledger.ErrNotFound):
					if _, ok := got[string(k)]; ok {
						return fmt.Errorf("%q: prefetched present, Get says absent", k)
					}
				case err != nil:
					return err
				case v == nil:
					return fmt.Errorf("%q: present with a nil value", k)
				default:
					got[string(k)] = v
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: the values read (-want +got):\n%s", how, d)
		}
	}
}

func TestLargeValuesAreCompressedWithLz4UnlessTheDSNSaysOtherwise(t *testing.T) {
	dsn := pgtest.DSN(t)
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "SET default_toast_compression = lz4"); err != nil {
		t.Skipf("the server has no lz4: %v", err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	for name, c := range map[string]struct{ dsn, want string }{
		"the store's": {dsn, "lz4"},
		"the DSN's":   {dsn + sep + "default_toast_compression=pglz", "pglz"},
	} {
		if !strings.Contains(dsn, "://") && name == "the DSN's" {
			c.dsn = dsn + " default_toast_compression=pglz"
		}
		s, err := Open(context.Background(), c.dsn, &Options{Schema: pgtest.Schema(t, dsn, "s_")})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		big := bytes.Repeat([]byte("an audit block compresses well. "), 1000)
		if err := s.Update(ctx, func(tx ledger.Txn) error { return tx.Set([]byte("h\x00big"), big) }); err != nil {
			t.Fatal(err)
		}
		var method string
		if err := s.writes.QueryRow(ctx, "SELECT pg_column_compression(v) FROM kv WHERE k = $1", []byte("h\x00big")).Scan(&method); err != nil {
			t.Fatal(err)
		}
		if method != c.want {
			t.Errorf("with %s setting, a %d-byte value is stored compressed with %q, want %s", name, len(big), method, c.want)
		}
		s.Close()
	}
}

func TestAByteaArrayReachesTheServerAsPgxWouldSendIt(t *testing.T) {
	s := openFresh(t)
	ctx := context.Background()
	conn, err := s.writes.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, ok := conn.Conn().TypeMap().PlanEncode(pgtype.ByteaArrayOID, pgtype.BinaryFormatCode, byteas{}).(byteasPlan); !ok {
		t.Fatal("the store's sessions do not encode byteas with byteasPlan")
	}
	many := make([][]byte, 1000)
	for i := range many {
		many[i] = bytes.Repeat([]byte{byte(i), 0, 0xff}, i%40)
	}
	for name, a := range map[string][][]byte{
		"empty":       {},
		"one":         {[]byte("k\x00one")},
		"empty value": {{}, []byte("x")},
		"a null":      {[]byte("a"), nil, []byte("c")},
		"many":        many,
	} {
		var same bool
		var n int
		if err := conn.QueryRow(ctx, "SELECT $1::bytea[] IS NOT DISTINCT FROM $2::bytea[], cardinality($1::bytea[])", byteas(a), a).Scan(&same, &n); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !same || n != len(a) {
			t.Errorf("%s: the server got a different array from byteas (%d elements, want %d)", name, n, len(a))
		}
	}
}
