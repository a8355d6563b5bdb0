// Package storetest runs one store test against every backend: a fresh
// bbolt file and a fresh PostgreSQL schema (internal/pgtest). A domain
// package's tests build their stores on the storage.DB they are handed,
// so one suite, not a copy per backend, proves both. Test binaries that
// use it call pgtest.Main from TestMain, which stops the throwaway server.
package storetest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/pgtest"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// Backend opens a fresh, empty database of one backend for a test.
type Backend struct {
	Name string
	Open func(tb testing.TB) storage.DB
}

// Backends are every backend, bbolt first.
var Backends = []Backend{
	{Name: boltdb.Name, Open: OpenBolt},
	{Name: pgdb.Name, Open: OpenPostgres},
}

// Run runs fn once per backend, as subtests named after the backends.
func Run(t *testing.T, fn func(t *testing.T, db storage.DB)) {
	t.Helper()
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Open(t)) })
	}
}

// OpenBolt opens a bbolt file in a temporary directory, closed when tb
// ends.
func OpenBolt(tb testing.TB) storage.DB {
	tb.Helper()
	db, err := bbolt.Open(filepath.Join(tb.TempDir(), "webapi.db"), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return boltdb.New(db)
}

// OpenPostgres opens a fresh schema of the test binary's PostgreSQL,
// migrated, closed and dropped when tb ends.
func OpenPostgres(tb testing.TB) storage.DB {
	tb.Helper()
	srv := pgtest.Shared(tb)
	schema := srv.Schema(tb)
	db, err := pgdb.Open(context.Background(), pgdb.Config{DSN: srv.DSN, Schema: schema, MaxConns: 8})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}
