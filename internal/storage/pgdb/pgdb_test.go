package pgdb

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keygate/keygate/internal/pgtest"
	"github.com/keygate/keygate/internal/storage"
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
