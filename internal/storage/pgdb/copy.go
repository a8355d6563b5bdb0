package pgdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
)

// This file is the PostgreSQL side of a copy from another backend into an
// empty schema (caddy webapi migrate): each store writes its own tables
// with a Copier, in one transaction that ClaimEmpty opened.

// ErrNotEmpty marks a schema that holds data already: a copy goes into an
// empty schema only, so that it never mixes with, or overwrites, what a
// deployment on PostgreSQL has stored. ClaimEmpty's error, a
// *NotEmptyError, names what is there.
var ErrNotEmpty = errors.New("the schema is not empty")

// NotEmptyError is a schema that holds data, with the tables that hold
// rows and how many ("keys (5 rows)").
type NotEmptyError struct {
	Schema string
	Tables []string
}

func (e *NotEmptyError) Error() string {
	return "schema " + e.Schema + " is not empty: it holds " + strings.Join(e.Tables, ", ")
}

// Is makes errors.Is(err, ErrNotEmpty) hold.
func (e *NotEmptyError) Is(target error) bool { return target == ErrNotEmpty }

// ClaimEmpty makes tx the one copy into the schema: it holds a lock that
// another copy into the same schema waits for until tx ends, and answers
// an error wrapping ErrNotEmpty, naming every table that holds rows, when
// the schema holds data. The migrations' bookkeeping (schema_migrations)
// and meta (the master key's check value, which the copy checks rather
// than replaces) are no data.
func (d *DB) ClaimEmpty(ctx context.Context, tx storage.Tx) error {
	t := Of(tx)
	if _, err := t.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('keygate copy ' || $1))", d.schema); err != nil {
		return d.wrap("locking the schema for the copy", err)
	}
	rows, err := t.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name NOT IN ('schema_migrations', 'meta')
		ORDER BY table_name`, d.schema)
	if err != nil {
		return d.wrap("listing the schema's tables", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return d.wrap("listing the schema's tables", err)
	}
	// Counted up to a bound: the message names what is there, and a
	// large table need not be read to say so.
	const bound = 1000
	var held []string
	for _, name := range tables {
		var n int
		q := "SELECT count(*) FROM (SELECT 1 FROM " + pgx.Identifier{d.schema, name}.Sanitize() + fmt.Sprintf(" LIMIT %d) x", bound+1)
		if err := t.QueryRow(ctx, q).Scan(&n); err != nil {
			return d.wrap("counting the rows of "+name, err)
		}
		switch {
		case n > bound:
			held = append(held, fmt.Sprintf("%s (more than %d rows)", name, bound))
		case n == 1:
			held = append(held, name+" (1 row)")
		case n > 0:
			held = append(held, fmt.Sprintf("%s (%d rows)", name, n))
		}
	}
	if len(held) > 0 {
		return &NotEmptyError{Schema: d.schema, Tables: held}
	}
	return nil
}

// Copier writes rows into one table with COPY, in batches: rows are
// buffered and sent every copyBatchRows rows or copyBatchBytes bytes, so a
// copy of any size takes bounded memory. Byte values are copied when they
// are added, so the caller may pass slices that are valid only until its
// next read (a bbolt cursor's), and the values are read from the source
// in the caller's goroutine alone (pgx encodes a COPY in one of its own).
type Copier struct {
	ctx     context.Context
	tx      pgx.Tx
	table   string
	columns []string
	rows    [][]any
	size    int
	n       int64
}

const (
	copyBatchRows  = 2000
	copyBatchBytes = 8 << 20
)

// NewCopier writes into table's columns in tx.
func NewCopier(ctx context.Context, tx storage.Tx, table string, columns ...string) *Copier {
	return &Copier{ctx: ctx, tx: Of(tx), table: table, columns: columns}
}

// Add buffers one row: a value for each column, in order. []byte values
// are copied.
func (c *Copier) Add(values ...any) error {
	if len(values) != len(c.columns) {
		return fmt.Errorf("postgres storage: a row of %s has %d values for %d columns", c.table, len(values), len(c.columns))
	}
	row := make([]any, len(values))
	for i, v := range values {
		if b, ok := v.([]byte); ok && b != nil {
			v = bytes.Clone(b)
			c.size += len(b)
		}
		row[i] = v
	}
	c.rows = append(c.rows, row)
	if len(c.rows) >= copyBatchRows || c.size >= copyBatchBytes {
		return c.flush()
	}
	return nil
}

func (c *Copier) flush() error {
	if len(c.rows) == 0 {
		return nil
	}
	n, err := c.tx.CopyFrom(c.ctx, pgx.Identifier{c.table}, c.columns, pgx.CopyFromRows(c.rows))
	if err != nil {
		return fmt.Errorf("copying into %s: %w", c.table, err)
	}
	c.n += n
	c.rows, c.size = c.rows[:0], 0
	return nil
}

// Close sends the rows still buffered and returns how many rows the
// Copier wrote.
func (c *Copier) Close() (int64, error) {
	err := c.flush()
	return c.n, err
}

// AdvanceSequence makes a sequence that rows were copied past (their ids
// kept) hand out ids above last, the last id the source gave: seq is an
// SQL expression naming it ('share_id_seq', or pg_get_serial_sequence(...)
// for an identity column). A sequence already past last stays where it
// is; last 0 (the source gave none) changes nothing.
func AdvanceSequence(ctx context.Context, tx storage.Tx, seq string, last uint64) error {
	if last == 0 {
		return nil
	}
	if last > 1<<63-1 {
		return fmt.Errorf("postgres storage: sequence value %d out of range", last)
	}
	_, err := Of(tx).Exec(ctx, `SELECT setval(s, $1) FROM (SELECT (`+seq+`)::regclass AS s) x
		WHERE coalesce(pg_sequence_last_value(s), 0) < $1`, int64(last))
	if err != nil {
		return fmt.Errorf("advancing sequence %s: %w", seq, err)
	}
	return nil
}
