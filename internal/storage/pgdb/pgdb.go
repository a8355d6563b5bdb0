// Package pgdb is the PostgreSQL backend of package storage
// (docs/operators.md): a pgx pool whose connections see one schema, the
// schema's versioned migrations applied at open under an advisory lock,
// and the master key's check value.
package pgdb

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/keygate/keygate/internal/storage"
)

// Name is the backend's name, as Tx.Backend and DB.Backend give it.
const Name = "postgres"

// DefaultSchema holds keygate's tables unless Config.Schema says otherwise.
const DefaultSchema = "keygate"

// DefaultTimeout bounds a transaction of a request: a database that does
// not answer makes a 503 instead of a hanging request, within the 5 s the
// spec promises (docs/operators.md) with a second to spare for the rest of the
// request.
const DefaultTimeout = 4 * time.Second

// Config says which database to use and how.
type Config struct {
	// DSN is a libpq URL or key/value string. It never appears in a log or
	// an error.
	DSN string
	// Schema holds every table; DefaultSchema if empty. Created if missing.
	Schema string
	// MaxConns bounds the pool; 20 if 0.
	MaxConns int32
	// Timeout bounds each transaction; DefaultTimeout if 0, none if < 0
	// (the migrate command's long copies).
	Timeout time.Duration
	// OnUnavailable, when set, is called for each operation that fails
	// because the database cannot be reached (a metric of the outage).
	OnUnavailable func()
}

// DB is a PostgreSQL database as a storage.DB.
type DB struct {
	// Pool is the connection pool; each connection's search_path is the
	// schema. Stores of this backend use it for work outside a transaction
	// (LISTEN, COPY).
	Pool    *pgxpool.Pool
	schema  string
	timeout time.Duration
	dsn     string // cut from any error with its secrets (Scrub)

	onUnavailable func()
	// batches gathers the calls of Batch (batch.go).
	batches batcher
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Open connects, creates the schema if needed and applies the migrations
// it lacks. Several instances opening at once apply each migration once.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if !identifier.MatchString(cfg.Schema) {
		return nil, fmt.Errorf("postgres storage: schema %q must be a lower-case identifier", cfg.Schema)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 20
	}
	if cfg.MaxConns < 2 {
		return nil, errors.New("postgres storage: max_conns must be at least 2")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if _, err := CheckDSN(cfg.DSN); err != nil {
		return nil, fmt.Errorf("postgres storage: %w", err)
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, errors.New("postgres storage: the dsn does not parse as a libpq URL or key/value string")
	}
	d := &DB{schema: cfg.Schema, timeout: cfg.Timeout, dsn: cfg.DSN, onUnavailable: cfg.OnUnavailable}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.ConnectTimeout = DefaultTimeout
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "keygate"
	pc.ConnConfig.RuntimeParams["timezone"] = "UTC"
	// keygate's statements are short and many run at once: a parallel
	// plan's workers take the cores the other requests need, and start
	// slower than they help (a substring count that took 30 ms alone
	// took 125 ms with two workers on a loaded two-core box). A DSN that
	// sets it decides.
	if _, set := pc.ConnConfig.RuntimeParams["max_parallel_workers_per_gather"]; !set {
		pc.ConnConfig.RuntimeParams["max_parallel_workers_per_gather"] = "0"
	}

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Schema, pg_trgm and migrations on a connection of their own, under
	// a session advisory lock: instances starting at once wait for the
	// first, then find nothing left to do.
	conn, err := pgx.ConnectConfig(ctx, pc.ConnConfig)
	if err != nil {
		return nil, d.wrap("connecting", err)
	}
	path, err := d.prepare(ctx, conn)
	conn.Close(context.Background())
	if err != nil {
		return nil, err
	}
	pc.ConnConfig.RuntimeParams["search_path"] = path
	if d.Pool, err = pgxpool.NewWithConfig(context.Background(), pc); err != nil {
		return nil, d.wrap("connecting", err)
	}
	return d, nil
}

// prepare creates the schema and the pg_trgm extension when missing,
// applies the migrations the schema lacks and returns the search_path
// that puts both first.
func (d *DB) prepare(ctx context.Context, conn *pgx.Conn) (string, error) {
	lock := "SELECT pg_advisory_lock(hashtext('keygate migrate ' || $1))"
	if _, err := conn.Exec(ctx, lock, d.schema); err != nil {
		return "", d.wrap("locking for migrations", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext('keygate migrate ' || $1))", d.schema)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
		return "", d.wrap("creating schema "+d.schema, err)
	}
	trgm, err := d.trgmSchema(ctx, conn)
	if err != nil {
		return "", err
	}
	path := pgx.Identifier{d.schema}.Sanitize()
	if trgm != d.schema {
		path += ", " + pgx.Identifier{trgm}.Sanitize()
	}
	if _, err := conn.Exec(ctx, "SET search_path = "+path); err != nil {
		return "", d.wrap("setting search_path", err)
	}
	return path, d.migrate(ctx, conn)
}

// trgmSchema returns the schema that holds pg_trgm, creating the
// extension in d's schema when the database lacks it. The extension is
// the database's, not the schema's: deployments whose schemas share a
// database and start at once must not both create it (the second would
// fail on pg_extension's unique name), so this runs under a lock of its
// own, in the two-key space that no schema's migration lock shares.
func (d *DB) trgmSchema(ctx context.Context, conn *pgx.Conn) (string, error) {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('keygate'), hashtext('pg_trgm'))"); err != nil {
		return "", d.wrap("locking for pg_trgm", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext('keygate'), hashtext('pg_trgm'))")
	var trgm string
	err := conn.QueryRow(ctx, "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_trgm'").Scan(&trgm)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA "+pgx.Identifier{d.schema}.Sanitize()); err != nil {
			return "", d.wrap("creating extension pg_trgm (needs a superuser, or PostgreSQL 13+ where it is trusted, with CREATE on the database)", err)
		}
		return d.schema, nil
	}
	if err != nil {
		return "", d.wrap("looking up pg_trgm", err)
	}
	return strings.Trim(trgm, `"`), nil
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one file of migrations/, NNNN_name.sql, applied once.
type migration struct {
	version int
	name    string
	sql     string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("postgres storage: migration file %s: name must be NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	// Numbers are unique and start at 1; a gap is allowed, so that
	// packages developed apart can each own a number (a later number
	// never depends on an earlier one being absent).
	for i := range out {
		if out[i].version < 1 || (i > 0 && out[i].version == out[i-1].version) {
			return nil, fmt.Errorf("postgres storage: migration %s: numbers must be positive and unique", out[i].name)
		}
	}
	return out, nil
}

// migrate applies the migrations the schema lacks, each in a
// transaction of its own, on conn, which holds the migration lock.
func (d *DB) migrate(ctx context.Context, conn *pgx.Conn) error {
	all, err := migrations()
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return d.wrap("creating schema_migrations", err)
	}
	for _, m := range all {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name)
			return err
		})
		if err != nil {
			return d.wrap("applying migration "+m.name, err)
		}
	}
	return nil
}

// Version is the newest migration applied.
func (d *DB) Version(ctx context.Context) (int, error) {
	var v int
	err := d.Pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v)
	return v, d.wrap("reading schema_migrations", err)
}

// CheckMasterKey records a check value of the master key on the first
// start and, on every later one, refuses a key whose check value differs:
// instances of one deployment must share their master key.
func (d *DB) CheckMasterKey(ctx context.Context, masterKey []byte) error {
	return d.checkMasterKey(ctx, d.Pool, masterKey)
}

// CheckMasterKeyIn is CheckMasterKey inside tx, so that a copy into the
// schema (caddy webapi migrate) records the check value in the
// transaction that writes the data, and a failed copy leaves nothing.
func (d *DB) CheckMasterKeyIn(ctx context.Context, tx storage.Tx, masterKey []byte) error {
	return d.checkMasterKey(ctx, Of(tx), masterKey)
}

// querier is what the master key check needs: a pool or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (d *DB) checkMasterKey(ctx context.Context, q querier, masterKey []byte) error {
	mac := hmac.New(sha256.New, masterKey)
	mac.Write([]byte("keygate master key check v1"))
	check := mac.Sum(nil)
	if _, err := q.Exec(ctx, "INSERT INTO meta (name, value) VALUES ('master_key_check', $1) ON CONFLICT (name) DO NOTHING", check); err != nil {
		return d.wrap("recording the master key check", err)
	}
	var stored []byte
	if err := q.QueryRow(ctx, "SELECT value FROM meta WHERE name = 'master_key_check'").Scan(&stored); err != nil {
		return d.wrap("reading the master key check", err)
	}
	if subtle.ConstantTimeCompare(stored, check) != 1 {
		return fmt.Errorf("postgres storage: the master key does not match the one schema %s was first started with: every instance must use the same master_key_file", d.schema)
	}
	return nil
}

// Schema is the schema holding the tables.
func (d *DB) Schema() string { return d.schema }

// Backend implements storage.DB.
func (d *DB) Backend() string { return Name }

// View implements storage.DB: a read-only, repeatable-read transaction,
// so that a page and its total count come from one snapshot.
func (d *DB) View(ctx context.Context, fn func(storage.Tx) error) error {
	return d.run(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// Update implements storage.DB: a read-committed transaction. Stores lock
// what they read to change (SELECT ... FOR UPDATE) or change it in one
// statement. A serialization failure or deadlock runs fn again.
func (d *DB) Update(ctx context.Context, fn func(storage.Tx) error) error {
	return d.run(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}, fn)
}

func (d *DB) run(ctx context.Context, opts pgx.TxOptions, fn func(storage.Tx) error) error {
	if d.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.timeout)
		defer cancel()
	}
	begin := beginSQL(opts)
	for attempt := 0; ; attempt++ {
		err := d.runOnce(ctx, begin, attempt > 0, fn)
		switch {
		case err == nil:
			return nil
		case retryable(err) && attempt < 10:
			continue
		case isDBError(err):
			return d.wrap("transaction", err)
		default:
			return err // the store's own answer (a 404, a conflict), or the caller's context
		}
	}
}

// runOnce runs fn in one transaction on a connection of the pool.
func (d *DB) runOnce(ctx context.Context, begin string, retry bool, fn func(storage.Tx) error) (err error) {
	conn, err := d.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	t := &tx{conn: conn.Conn(), begin: begin, retry: retry}
	defer func() {
		if p := recover(); p != nil {
			t.Rollback(ctx)
			panic(p)
		}
	}()
	if err := fn(t); err != nil {
		t.Rollback(ctx)
		return err
	}
	return t.Commit(ctx)
}

func beginSQL(opts pgx.TxOptions) string {
	return "BEGIN ISOLATION LEVEL " + strings.ToUpper(string(opts.IsoLevel)) + " " + strings.ToUpper(string(opts.AccessMode))
}

func isDBError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) || unreachable(err)
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Ping implements storage.DB: SELECT 1 on a connection of the pool,
// outside any transaction, within ctx's deadline.
func (d *DB) Ping(ctx context.Context) error {
	_, err := d.Pool.Exec(ctx, "SELECT 1")
	return d.wrap("ping", err)
}

// Close implements storage.DB.
func (d *DB) Close() error {
	d.Pool.Close()
	return nil
}

// Wrap is wrap for stores that run a statement on Pool outside a
// transaction (a read that is one round trip).
func (d *DB) Wrap(what string, err error) error { return d.wrap(what, err) }

// wrap names what failed, marks an unreachable database as
// storage.ErrUnavailable and cuts the DSN's secrets from the message.
func (d *DB) wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	if unreachable(err) {
		if d.onUnavailable != nil {
			d.onUnavailable()
		}
		return &dbError{what: what, err: err, dsn: d.dsn, unavailable: true}
	}
	return &dbError{what: what, err: err, dsn: d.dsn}
}

// unreachable is the one classification of the backend's errors as
// storage.ErrUnavailable: a database that is down, restarting, out of
// connections or not answering, or a connection lost at any point of a
// statement (refused, reset, or its answer cut short), rather than a
// request's own error. Checked down the whole chain, however pgx or a
// store wrapped it. A context the caller cancelled is the caller's.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return unavailableState(pe.Code)
	}
	// A *net.OpError of a dial, read or write is a net.Error, and so is
	// a bare syscall.Errno (ECONNRESET, ECONNREFUSED, EPIPE, ...).
	var ne net.Error
	var ce *pgconn.ConnectError
	switch {
	case errors.As(err, &ne), errors.As(err, &ce),
		// The pool's acquire or a statement ran out of time.
		errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err),
		// The stream ended mid-answer: pgproto3 turns the io.EOF of a
		// closed socket into io.ErrUnexpectedEOF.
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		// A connection pgx or the runtime already knows to be closed.
		errors.Is(err, pgconn.ErrConnClosed), errors.Is(err, net.ErrClosed), errors.Is(err, pgx.ErrTxClosed),
		// Failed before anything was sent (the connection was closed).
		pgconn.SafeToRetry(err):
		return true
	}
	return false
}

// unavailableState tells the SQLSTATEs of a server that cannot serve the
// gateway now, whatever the statement: class 08 (connection exception),
// 57P (admin_shutdown, crash_shutdown, cannot_connect_now, and the
// session ended by the server), 53300 (too_many_connections), and class
// 28, a refused login (a password changed under the gateway), as
// unusable as a server that is down.
func unavailableState(code string) bool {
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P") || code == "53300" ||
		strings.HasPrefix(code, "28")
}

type dbError struct {
	what        string
	err         error
	dsn         string
	unavailable bool
}

// Error is the message with the DSN's secrets cut out. pgx's connect
// error renders the DSN's user itself; only what it wraps is shown.
func (e *dbError) Error() string {
	inner := e.err
	var ce *pgconn.ConnectError
	if errors.As(inner, &ce) && ce.Unwrap() != nil {
		inner = ce.Unwrap()
	}
	return Scrub("postgres storage: "+e.what+": "+inner.Error(), e.dsn)
}

func (e *dbError) Unwrap() []error {
	if e.unavailable {
		return []error{e.err, storage.ErrUnavailable}
	}
	return []error{e.err}
}

var _ storage.DB = (*DB)(nil)
