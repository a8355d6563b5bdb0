package pgdb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

func open(t *testing.T, schema string) *DB {
	t.Helper()
	db, err := Open(context.Background(), Config{DSN: pgtest.Shared(t).DSN, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestConcurrentOpensMigrateOnce opens one schema from several instances
// at once: each migration is recorded once and every instance works.
func TestConcurrentOpensMigrateOnce(t *testing.T) {
	schema := pgtest.Shared(t).Schema(t)
	all, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	dbs := make([]*DB, 6)
	errs := make([]error, len(dbs))
	for i := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dbs[i], errs[i] = Open(context.Background(), Config{DSN: pgtest.Shared(t).DSN, Schema: schema})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		defer dbs[i].Close()
	}
	var n int
	if err := dbs[0].Pool.QueryRow(context.Background(), "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != len(all) {
		t.Fatalf("schema_migrations has %d rows, want %d", n, len(all))
	}
	if v, err := dbs[3].Version(context.Background()); err != nil || v != all[len(all)-1].version {
		t.Fatalf("version %d, %v; want %d", v, err, all[len(all)-1].version)
	}
}

func TestMasterKeyCheck(t *testing.T) {
	schema := pgtest.Shared(t).Schema(t)
	key := make([]byte, 32)
	other := append([]byte{1}, key[1:]...)
	a := open(t, schema)
	if err := a.CheckMasterKey(context.Background(), key); err != nil {
		t.Fatalf("first start: %v", err)
	}
	b := open(t, schema)
	if err := b.CheckMasterKey(context.Background(), key); err != nil {
		t.Fatalf("same key: %v", err)
	}
	err := b.CheckMasterKey(context.Background(), other)
	if err == nil || !strings.Contains(err.Error(), "master key does not match") {
		t.Fatalf("other key: %v", err)
	}
}

func TestUpdateCommitsAndRollsBack(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	if err := db.Update(ctx, func(tx storage.Tx) error {
		_, err := Of(tx).Exec(ctx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("refused")
	if err := db.Update(ctx, func(tx storage.Tx) error {
		if _, err := Of(tx).Exec(ctx, "INSERT INTO meta (name, value) VALUES ('b', '\\x02')"); err != nil {
			return err
		}
		return refusal
	}); err != refusal {
		t.Fatalf("fn's error: got %v", err)
	}
	var names []string
	if err := db.View(ctx, func(tx storage.Tx) error {
		rows, err := Of(tx).Query(ctx, "SELECT name FROM meta ORDER BY name")
		if err != nil {
			return err
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				return err
			}
			names = append(names, s)
		}
		return rows.Err()
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(names, ",") != "a" {
		t.Fatalf("stored %v, want [a]", names)
	}
}

// TestErrorsKeepThePasswordSecret: neither a DSN that does not parse nor
// a server that refuses the login shows the password.
func TestErrorsKeepThePasswordSecret(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	u, err := url.Parse(pgtest.Shared(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("nobody_here", secret)
	for _, dsn := range []string{
		u.String(),
		"postgres://nobody_here:" + secret + "@127.0.0.1:1/x?sslmode=disable",
		"host=127.0.0.1 port=1 user=x password=" + secret + " connect_timeout=bogus",
		"postgres://x:" + secret + "@[::1/x",
	} {
		_, err := Open(context.Background(), Config{DSN: dsn, Schema: "kg_never"})
		if err == nil {
			t.Fatalf("%q opened", dsn)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// TestUnreachableIsUnavailable: a server that is gone gives
// storage.ErrUnavailable within the timeout, not a hang.
func TestUnreachableIsUnavailable(t *testing.T) {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(context.Background(), Config{DSN: srv.DSN, Timeout: 2 * time.Second})
	if err != nil {
		srv.Stop()
		t.Fatal(err)
	}
	defer db.Close()
	srv.Stop()
	err = db.View(context.Background(), func(tx storage.Tx) error {
		_, err := Of(tx).Exec(context.Background(), "SELECT 1")
		return err
	})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}

func TestSchemaNameChecked(t *testing.T) {
	for _, s := range []string{"Keygate", "a b", "x;drop", strings.Repeat("a", 64)} {
		if _, err := Open(context.Background(), Config{DSN: "postgres://x@127.0.0.1:1/x", Schema: s}); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("schema %q: %v", s, err)
		}
	}
}

// metaNames lists the names in meta, in order.
func metaNames(t *testing.T, db *DB) string {
	t.Helper()
	ctx := context.Background()
	var names []string
	if err := db.View(ctx, func(tx storage.Tx) error {
		rows, err := Of(tx).Query(ctx, "SELECT name FROM meta ORDER BY name")
		if err != nil {
			return err
		}
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return strings.Join(names, ",")
}

// TestQueuedStatements: statements given to Queue run before the next
// statement that is read (which sees them), or with the commit; one that
// fails fails the transaction, which then leaves nothing, and the
// connection goes on serving.
func TestQueuedStatements(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	err := db.Update(ctx, func(tx storage.Tx) error {
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')")
		Queue(tx, "INSERT INTO meta (name, value) VALUES ($1, $2)", "b", []byte{2})
		var n int
		if err := Of(tx).QueryRow(ctx, "SELECT count(*) FROM meta").Scan(&n); err != nil || n != 2 {
			return fmt.Errorf("the read after two queued inserts sees %d rows, %v", n, err)
		}
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('c', '\\x03')")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := metaNames(t, db); got != "a,b,c" {
		t.Fatalf("stored %s, want a,b,c", got)
	}

	// A queued statement that fails with the commit: nothing of the
	// transaction stays, and the error is the statement's.
	err = db.Update(ctx, func(tx storage.Tx) error {
		if _, err := Of(tx).Exec(ctx, "INSERT INTO meta (name, value) VALUES ('d', '\\x04')"); err != nil {
			return err
		}
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('a', '\\x05')") // duplicate key
		return nil
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("commit after a failing queued insert: %v, want a unique violation", err)
	}
	// ... and one that fails before a read: the read reports it.
	err = db.Update(ctx, func(tx storage.Tx) error {
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('e', '\\x06')")
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('b', '\\x07')")
		rows, err := Of(tx).Query(ctx, "SELECT name FROM meta")
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		return err
	})
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("read after a failing queued insert: %v, want a unique violation", err)
	}
	if got := metaNames(t, db); got != "a,b,c" {
		t.Fatalf("stored %s after the failed transactions, want a,b,c", got)
	}
}

// TestTransactionSnapshots: BEGIN goes out with the first statement, and
// a repeatable-read transaction still reads one snapshot from its first
// statement on; a transaction that sends nothing commits.
func TestTransactionSnapshots(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	if err := db.View(ctx, func(storage.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(storage.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	err := db.View(ctx, func(tx storage.Tx) error {
		var before, after int
		if err := Of(tx).QueryRow(ctx, "SELECT count(*) FROM meta").Scan(&before); err != nil {
			return err
		}
		if _, err := db.Pool.Exec(ctx, "INSERT INTO meta (name, value) VALUES ('x', '\\x01')"); err != nil {
			return err
		}
		if err := Of(tx).QueryRow(ctx, "SELECT count(*) FROM meta").Scan(&after); err != nil {
			return err
		}
		if after != before {
			return fmt.Errorf("a read-only transaction saw %d rows, then %d", before, after)
		}
		var mode string
		if err := Of(tx).QueryRow(ctx, "SHOW transaction_isolation").Scan(&mode); err != nil || mode != "repeatable read" {
			return fmt.Errorf("isolation %q, %v", mode, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A write in a read-only transaction is refused, even queued.
	err = db.View(ctx, func(tx storage.Tx) error {
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('y', '\\x01')")
		return nil
	})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("queued write in View: %v, want read_only_sql_transaction", err)
	}
}

// TestAfterCommit: the functions run once the transaction has committed,
// never when it rolls back.
func TestAfterCommit(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	var ran []string
	err := db.Update(ctx, func(tx storage.Tx) error {
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')")
		AfterCommit(tx, func() {
			var n int
			if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM meta WHERE name = 'a'").Scan(&n); err != nil || n != 1 {
				t.Errorf("after commit another connection sees %d rows, %v", n, err)
			}
			ran = append(ran, "committed")
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("refused")
	if err := db.Update(ctx, func(tx storage.Tx) error {
		AfterCommit(tx, func() { ran = append(ran, "refused") })
		return refusal
	}); err != refusal {
		t.Fatal(err)
	}
	if err := db.Update(ctx, func(tx storage.Tx) error {
		AfterCommit(tx, func() { ran = append(ran, "failed") })
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')")
		return nil
	}); err == nil {
		t.Fatal("duplicate insert committed")
	}
	if strings.Join(ran, ",") != "committed" {
		t.Fatalf("ran %v, want [committed]", ran)
	}
}

// TestSavepoint: a savepoint rolled back undoes its statements only.
func TestSavepoint(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	err := db.Update(ctx, func(tx storage.Tx) error {
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')")
		sp, err := Of(tx).Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')"); err == nil {
			return errors.New("duplicate insert in the savepoint succeeded")
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, err = Of(tx).Exec(ctx, "INSERT INTO meta (name, value) VALUES ('b', '\\x02')")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := metaNames(t, db); got != "a,b" {
		t.Fatalf("stored %s, want a,b", got)
	}
}

// Listen hears notifications across its pings, and after its connection
// is cut it listens again and resyncs, since it may have missed some.
func TestListenSurvivesSilenceAndLoss(t *testing.T) {
	d := open(t, pgtest.Shared(t).Schema(t))
	defer func(p time.Duration) { listenPing = p }(listenPing)
	listenPing = 50 * time.Millisecond

	channel := d.Channel("test")
	payloads, resyncs := make(chan string, 10), make(chan struct{}, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Listen(ctx, channel, func(p string) { payloads <- p }, func() { resyncs <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()

	wait := func(what string, c <-chan struct{}) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s", what)
		}
	}
	notify := func(payload string) {
		t.Helper()
		if _, err := d.Pool.Exec(context.Background(), "SELECT pg_notify($1, $2)", channel, payload); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-payloads:
			if got != payload {
				t.Fatalf("payload %q, want %q", got, payload)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notification %q never arrived", payload)
		}
	}
	wait("first resync", resyncs)
	time.Sleep(300 * time.Millisecond) // several pings
	notify("after silence")

	// Cut the listening connection from the server's side.
	if _, err := d.Pool.Exec(context.Background(),
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE (query LIKE 'LISTEN%' OR query = '-- ping') AND pid <> pg_backend_pid() AND datname = current_database()"); err != nil {
		t.Fatal(err)
	}
	wait("resync after the lost connection", resyncs)
	notify("after reconnecting")
}

// TestLookup: many callers at once each get their own key's value (or
// none), including keys asked by several, and a value committed before a
// Get is what it reads.
func TestLookup(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	for i := range 50 {
		if _, err := db.Pool.Exec(ctx, "INSERT INTO meta (name, value) VALUES ($1, $2)", fmt.Sprint("k", i), []byte(fmt.Sprint("v", i))); err != nil {
			t.Fatal(err)
		}
	}
	l := NewLookup[string](db, "a meta value", "SELECT name, value FROM meta WHERE name = ANY($1)")
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for g := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := g % 60 // k50 to k59 do not exist
			v, found, err := l.Get(ctx, fmt.Sprint("k", i))
			switch {
			case err != nil:
				errs <- err
			case i < 50 && (!found || string(v) != fmt.Sprint("v", i)):
				errs <- fmt.Errorf("k%d: %q, %v", i, v, found)
			case i >= 50 && found:
				errs <- fmt.Errorf("k%d found: %q", i, v)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, err := db.Pool.Exec(ctx, "UPDATE meta SET value = '\\x00' WHERE name = 'k7'"); err != nil {
		t.Fatal(err)
	}
	if v, found, err := l.Get(ctx, "k7"); err != nil || !found || string(v) != "\x00" {
		t.Fatalf("k7 after the update: %q, %v, %v", v, found, err)
	}
}

// TestBatch: concurrent calls share transactions, and what one call's fn
// does wrong stays its own: a refusal before or after its writes went
// out undoes its writes only, a write that fails at the commit fails its
// call only (the others are run again alone), and every other call's
// writes are committed once.
func TestBatch(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, "INSERT INTO meta (name, value) VALUES ('taken', '\\x00')"); err != nil {
		t.Fatal(err)
	}
	refusal := errors.New("refused")
	const calls = 200
	var wg sync.WaitGroup
	errs := make([]error, calls)
	var committed sync.Map
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprint("n", i)
			errs[i] = db.Batch(ctx, func(tx storage.Tx) error {
				var n int
				if err := Of(tx).QueryRow(ctx, "SELECT count(*) FROM meta WHERE name = $1", name).Scan(&n); err != nil {
					return err
				}
				switch i % 5 {
				case 1: // refused before its write went out
					Queue(tx, "INSERT INTO meta (name, value) VALUES ($1, '\\x01')", name)
					return refusal
				case 2: // refused after its write went out
					if _, err := Of(tx).Exec(ctx, "INSERT INTO meta (name, value) VALUES ($1, '\\x01')", name); err != nil {
						return err
					}
					return refusal
				case 3: // a write that fails with the commit
					Queue(tx, "INSERT INTO meta (name, value) VALUES ('taken', '\\x01')")
					return nil
				}
				Queue(tx, "INSERT INTO meta (name, value) VALUES ($1, '\\x01')", name)
				AfterCommit(tx, func() {
					if _, dup := committed.LoadOrStore(name, true); dup {
						t.Errorf("%s: AfterCommit ran twice", name)
					}
				})
				return nil
			})
		}()
	}
	wg.Wait()
	var pe *pgconn.PgError
	for i, err := range errs {
		switch i % 5 {
		case 1, 2:
			if err != refusal {
				t.Errorf("call %d: %v, want the refusal", i, err)
			}
		case 3:
			if !errors.As(err, &pe) || pe.Code != "23505" {
				t.Errorf("call %d: %v, want a unique violation", i, err)
			}
		default:
			if err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM meta WHERE name LIKE 'n%'").Scan(&n); err != nil || n != calls*2/5 {
		t.Fatalf("%d rows stored, %v; want %d", n, err, calls*2/5)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM meta WHERE name LIKE 'n%' AND right(name, 1) NOT IN ('0', '4', '5', '9')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows of refused or failed calls stored, %v", n, err)
	}
	n = 0
	committed.Range(func(any, any) bool { n++; return true })
	if n != calls*2/5 {
		t.Fatalf("AfterCommit ran for %d calls, want %d", n, calls*2/5)
	}
}

// TestConcurrentSchemasCreatePgTrgm opens several schemas of a database
// without pg_trgm at once, as deployments sharing a database may start:
// one creates the extension, every one starts and searches by trigram.
func TestConcurrentSchemasCreatePgTrgm(t *testing.T) {
	srv := pgtest.Shared(t)
	ctx := context.Background()
	name := "kg_trgm_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := srv.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			t.Skipf("needs a role that may create a database: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	dbs := make([]*DB, 4)
	errs := make([]error, len(dbs))
	var wg sync.WaitGroup
	for i := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dbs[i], errs[i] = Open(ctx, Config{DSN: u.String(), Schema: "kg_s" + string(rune('a'+i))})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("schema %d: %v", i, err)
		}
		defer dbs[i].Close()
	}
	for i, db := range dbs {
		var sim float64
		if err := db.Pool.QueryRow(ctx, "SELECT similarity('keygate', 'keygates')").Scan(&sim); err != nil || sim <= 0 {
			t.Errorf("schema %d: pg_trgm not on its search_path: %v, %v", i, sim, err)
		}
	}
}

// TestLast: COMMIT goes with the round trip declared last; the
// transaction is then over, a statement after it is refused, and
// AfterCommit runs.
func TestLast(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	committed := false
	err := db.Update(ctx, func(tx storage.Tx) error {
		Queue(tx, "INSERT INTO meta (name, value) VALUES ('a', '\\x01')")
		AfterCommit(tx, func() { committed = true })
		Last(tx)
		var n int
		if err := Of(tx).QueryRow(ctx, "SELECT count(*) FROM meta").Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("the last read sees %d rows, %v", n, err)
		}
		if status := Of(tx).Conn().PgConn().TxStatus(); status != 'I' {
			return fmt.Errorf("after the last round trip the connection is in state %c, not idle", status)
		}
		if _, err := Of(tx).Exec(ctx, "SELECT 1"); !errors.Is(err, errEnded) {
			return fmt.Errorf("a statement after the last: %v", err)
		}
		return nil
	})
	if err != nil || !committed {
		t.Fatalf("%v, committed %v", err, committed)
	}
	err = db.View(ctx, func(tx storage.Tx) error {
		Last(tx)
		b := &pgx.Batch{}
		b.Queue("SELECT count(*) FROM meta")
		b.Queue("SELECT name FROM meta")
		br := Of(tx).SendBatch(ctx, b)
		defer br.Close()
		var n int
		var name string
		if err := br.QueryRow().Scan(&n); err != nil {
			return err
		}
		if err := br.QueryRow().Scan(&name); err != nil || n != 1 || name != "a" {
			return fmt.Errorf("%d %q %v", n, name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLoginRefused: a server that refuses the login (a role that may not
// log in, as after a password change) is unavailable, and the error names
// neither the user nor the password.
func TestLoginRefused(t *testing.T) {
	srv := pgtest.Shared(t)
	role := fmt.Sprintf("kgnologin%d", time.Now().UnixNano()%1e9)
	if err := srv.Exec(t.Context(), "CREATE ROLE "+role+" NOLOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Exec(context.Background(), "DROP ROLE "+role) })
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, "Pw-S3cr3t")
	_, err = Open(t.Context(), Config{DSN: u.String()})
	if err == nil || !errors.Is(err, storage.ErrUnavailable) || strings.Contains(err.Error(), role) || strings.Contains(err.Error(), "S3cr3t") {
		t.Fatalf("login refused: %v", err)
	}
	t.Log(err)
}
