package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// backend is a storage the gateway of an e2e test runs on.
type backend struct {
	name string
	// open makes a fresh database for t and returns the webapi block's
	// lines that choose it ("" for the default bbolt file).
	open func(t *testing.T) *database
}

// database is one test's database beside the data directory.
type database struct {
	// storage are the webapi block's lines; "" for bbolt.
	storage string
	// env is the gateway's environment that storage refers to.
	env []string
	// password is in the DSN the gateway is given (the test server trusts
	// loopback, so any works): it must appear nowhere.
	password string
	// dump is everything the database holds, nil for bbolt (its file is in
	// the data directory).
	dump func(t *testing.T) []byte
}

var backends = []backend{
	{name: "bolt", open: func(*testing.T) *database { return &database{} }},
	{name: "postgres", open: openPostgres},
}

// eachBackend runs fn once per backend, as subtests named after them.
func eachBackend(t *testing.T, fn func(t *testing.T, db *database)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b.open(t)) })
	}
}

// openPostgres makes a fresh schema of the test binary's PostgreSQL,
// dropped when t ends (after the gateway, stopped by a cleanup registered
// later, has closed its pool).
func openPostgres(t *testing.T) *database {
	srv := pgtest.Shared(t)
	schema := srv.Schema(t)
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	password := "pgpass-" + secretRandom()
	u.User = url.UserPassword(u.User.Username(), password)
	return &database{
		// The DSN through the environment, as the README advises: then
		// neither the config (admin API, autosave.json) nor the Caddyfile
		// holds its password.
		storage:  fmt.Sprintf("storage postgres {\n\t\t\tdsn {env.KEYGATE_DATABASE_URL}\n\t\t\tschema %s\n\t\t}", schema),
		env:      []string{"KEYGATE_DATABASE_URL=" + u.String()},
		password: password,
		dump:     func(t *testing.T) []byte { return dumpSchema(t, srv.DSN, schema) },
	}
}

// dumpSchema reads every row of every table of schema, bytea as its
// bytes (its hex text form would hold digit runs by chance).
func dumpSchema(t *testing.T, dsn, schema string) []byte {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, table := range tables {
		rows, err := conn.Query(ctx, "SELECT * FROM "+pgx.Identifier{schema, table}.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "%s:", table)
			for _, v := range vals {
				if b, ok := v.([]byte); ok {
					out.WriteByte(' ')
					out.Write(b)
					continue
				}
				fmt.Fprintf(&out, " %v", v)
			}
			out.WriteByte('\n')
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}
