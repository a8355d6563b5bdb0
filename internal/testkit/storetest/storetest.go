// Package storetest runs one store test against every backend: a fresh
// bbolt file and a fresh PostgreSQL schema (internal/testkit/pgtest). A domain
// package's tests build their stores on the storage.DB they are handed,
// so one suite, not a copy per backend, proves both. Test binaries that
// use it call pgtest.Main from TestMain, which stops the throwaway server.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"hash"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
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

// FuzzBackends are the backends a fuzz function's inputs run on: every
// backend for the seed corpus that go test runs, bbolt alone while
// fuzzing (-test.fuzz, which the fuzz workers get too), where a
// PostgreSQL round trip or two per input would cut the executions a
// second a hundredfold.
func FuzzBackends() []Backend {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return Backends[:1]
	}
	return Backends
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
// migrated, closed and dropped when tb ends. Its transactions may take
// 30 s, not the gateway's 4: under -race on two busy cores, a signature
// that completes a contract renders both PDFs inside its transaction and
// can take longer than 4 s; the gateway's bound is what the e2e outage
// tests hold it to.
func OpenPostgres(tb testing.TB) storage.DB {
	tb.Helper()
	srv := pgtest.Shared(tb)
	schema := srv.Schema(tb)
	db, err := pgdb.Open(context.Background(), pgdb.Config{DSN: srv.DSN, Schema: schema, MaxConns: 8, Timeout: 30 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// Digest hashes everything db holds: every bucket's keys and values on
// bbolt, every row of every table of the schema on PostgreSQL. Equal
// digests before and after a request mean it stored nothing.
func Digest(tb testing.TB, db storage.DB) [32]byte {
	tb.Helper()
	h := sha256.New()
	ctx := context.Background()
	err := db.View(ctx, func(tx storage.Tx) error {
		switch db.Backend() {
		case boltdb.Name:
			return boltdb.Of(tx).ForEach(func(name []byte, b *bbolt.Bucket) error {
				h.Write(name)
				digestBucket(h, b)
				return nil
			})
		case pgdb.Name:
			return digestTables(ctx, h, pgdb.Of(tx))
		}
		return fmt.Errorf("storetest: no digest for backend %s", db.Backend())
	})
	if err != nil {
		tb.Fatal(err)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func digestBucket(h hash.Hash, b *bbolt.Bucket) {
	_ = b.ForEach(func(k, v []byte) error {
		binary.Write(h, binary.BigEndian, uint32(len(k)))
		h.Write(k)
		if v == nil {
			h.Write([]byte{1})
			digestBucket(h, b.Bucket(k))
			return nil
		}
		binary.Write(h, binary.BigEndian, uint32(len(v)))
		h.Write(v)
		return nil
	})
}

func digestTables(ctx context.Context, h hash.Hash, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1`)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		h.Write([]byte(t))
		rows, err := tx.Query(ctx, "SELECT r::text FROM "+pgx.Identifier{t}.Sanitize()+" r ORDER BY 1")
		if err != nil {
			return err
		}
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, s := range texts {
			binary.Write(h, binary.BigEndian, uint32(len(s)))
			h.Write([]byte(s))
		}
	}
	return nil
}

// Pick builds a domain package's store for db's backend: onBolt on
// bbolt, onPostgres on PostgreSQL.
func Pick[S any](tb testing.TB, db storage.DB, onBolt func(*boltdb.DB) (S, error), onPostgres func(*pgdb.DB) S) S {
	tb.Helper()
	switch d := db.(type) {
	case *boltdb.DB:
		s, err := onBolt(d)
		if err != nil {
			tb.Fatal(err)
		}
		return s
	case *pgdb.DB:
		return onPostgres(d)
	}
	tb.Fatalf("storetest: no store for backend %s", db.Backend())
	var zero S
	return zero
}
