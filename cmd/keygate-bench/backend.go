package main

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// backend is the storage backend the bench measures: bbolt files, or a
// throwaway PostgreSQL on this machine, durable as a production server
// (fsync and synchronous_commit on), started from the system's binaries
// as the tests start theirs.
type backend struct {
	name string
	pg   *pgtest.Server
	// goals are the goals on this backend.
	goals goals
}

// goals are the figures each line of the report is held to.
type goals struct {
	overhead, contractGet, shareGet, keyLookup float64
	creates                                    float64
	// limitedAuth is (webapi_auth with a key of two rate-limit policies
	// and a quota) / (with a key of none); neighbour is a reader's
	// throughput beside a rate-limited flood / beside a flood of an
	// unknown key; scopes is (webapi_auth with a key of a policy of its
	// own, a plan's and a consumer's with the consumer's quota) / (with
	// a key of none).
	limitedAuth, neighbour, scopes float64
	search, substring, shareList   time.Duration
}

// atLeast describes a ratio's goal; 0 is none.
func (goals) atLeast(g float64) string {
	if g == 0 {
		return "no goal on this backend"
	}
	return fmt.Sprintf("goal >= %.2f", g)
}

var goalsOf = map[string]goals{
	"bolt": {overhead: 0.92, contractGet: 0.60, shareGet: 0.60, keyLookup: 0.97, creates: 2000, limitedAuth: 0.97, neighbour: 0.95, scopes: 0.95,
		search: 5 * time.Millisecond, substring: 50 * time.Millisecond, shareList: 10 * time.Millisecond},
	// The database is a network round trip away, on the same two cores;
	// a single-record read is one statement (issue 22).
	"postgres": {overhead: 0.92, contractGet: 0.55, shareGet: 0.45, keyLookup: 0.97, creates: 1500, limitedAuth: 0.97, neighbour: 0.95, scopes: 0.95,
		search: 10 * time.Millisecond, substring: 50 * time.Millisecond, shareList: 10 * time.Millisecond},
}

func newBackend(name string) (*backend, error) {
	g, ok := goalsOf[name]
	if !ok {
		return nil, fmt.Errorf("-backend %q: bolt or postgres", name)
	}
	b := &backend{name: name, goals: g}
	if name == "postgres" {
		var err error
		if b.pg, err = pgtest.Start(pgtest.Options{Durable: true}); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// describe names the backend for the report's header.
func (b *backend) describe() string {
	if b.pg != nil {
		return "postgres (a throwaway PostgreSQL on this machine, fsync and synchronous_commit on)"
	}
	return "bolt (webapi.db on this machine's disk)"
}

func (b *backend) close() {
	if b.pg != nil {
		b.pg.Stop()
	}
}

// store is one prepared data set: its directory (master key, logs, and
// on bbolt the database), the storage module prepare opens it with (the
// gateway's own code), and the lines of the webapi block that make the
// gateway open the same.
type store struct {
	dir     string
	storage caddymodule.Storage
	webapi  string
}

// store gives the data set name its own bbolt file in dir, or its own
// schema of the PostgreSQL.
func (b *backend) store(dir, name string) (store, error) {
	if b.pg == nil {
		return store{dir: dir, storage: caddymodule.BoltStorage{}}, nil
	}
	schema := "bench_" + name
	// Filling the data set need not wait for the disk at each commit:
	// it is not what is measured. The gateway's connections commit
	// durably.
	prep := &caddymodule.PostgresStorage{DSN: b.pg.DSN + "&synchronous_commit=off", Schema: schema}
	if err := prep.Provision(caddy.Context{}); err != nil {
		return store{}, err
	}
	webapi := fmt.Sprintf("storage postgres {\n\t\t\tdsn %q\n\t\t\tschema %s\n\t\t}", b.pg.DSN, schema)
	return store{dir: dir, storage: prep, webapi: webapi}, nil
}
