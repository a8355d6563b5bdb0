package pgdb

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/keygate/keygate/internal/storage"
)

// tx is a transaction of a DB: a storage.Tx above the stores and, through
// Of, a pgx.Tx below them. It spends round trips only where a statement's
// answer is needed: BEGIN goes out with the first statement, not on its
// own; statements given to Queue go out with the next statement or with
// COMMIT; a transaction that sent nothing commits without a word to the
// server. A contract create thus costs two round trips (its reads, then
// its writes with COMMIT) instead of one per statement, which on a
// database on the same small box is most of what a create costs.
//
// A statement in the same round trip as others still runs on its own
// snapshot under READ COMMITTED, and the first one takes the snapshot of
// a REPEATABLE READ transaction, exactly as if each had been sent alone.
type tx struct {
	conn *pgx.Conn
	// begin is the BEGIN statement while it has not been sent.
	begin  string
	queued []*pgx.QueuedQuery
	done   bool
	// sent counts the round trips, so that Batch can tell whether a call
	// sent anything.
	sent int
	// savepoints counts the savepoints made, for their names.
	savepoints int
	// after run once the transaction has committed.
	after []func()
	// retry: an earlier attempt of the same transaction failed.
	retry bool
	// last: COMMIT goes with the next round trip (Last); committed: it
	// went.
	last, committed bool
}

func (*tx) Backend() string { return Name }

// Of unwraps a Tx that a DB of this package handed out. Any other Tx is a
// programming error (stores of two backends mixed) and panics.
func Of(t storage.Tx) pgx.Tx { return t.(*tx) }

// Queue adds a statement to t that is sent with t's next round trip: with
// the next statement whose answer is read, or with COMMIT. Its failure is
// the failure of that statement or of the commit, and so of the
// transaction. It is for writes whose result nothing reads (an INSERT of
// rows the transaction made up), so that they cost no round trip of their
// own.
func Queue(t storage.Tx, sql string, args ...any) { t.(*tx).queue(sql, args...) }

func (t *tx) queue(sql string, args ...any) {
	t.queued = append(t.queued, &pgx.QueuedQuery{SQL: sql, Arguments: args})
}

// Last declares that t's next round trip is its last, so that COMMIT
// goes with it rather than on its own: for a store's method that is the
// whole of its transaction and ends with one round trip (a search's count
// and page, read from one snapshot). A statement after it fails, as the
// transaction has ended.
func Last(t storage.Tx) { t.(*tx).last = true }

// Retried reports whether t runs again after an attempt that failed (a
// serialization failure or deadlock), so that a store that took a short
// cut on an assumption the failure may have proved wrong does not take it
// again.
func Retried(t storage.Tx) bool { return t.(*tx).retry }

// AfterCommit arranges for fn to run once t has committed, never if it
// rolls back; for effects outside the database that must not announce a
// change before others can see it.
func AfterCommit(t storage.Tx, fn func()) {
	p := t.(*tx)
	p.after = append(p.after, fn)
}

// pending reports whether anything waits to be sent with the next
// statement.
func (t *tx) pending() bool { return t.begin != "" || len(t.queued) > 0 || t.last }

// send sends what is pending followed by extra in one round trip, reads
// the answers to what was pending and returns the results positioned at
// extra's first answer.
func (t *tx) send(ctx context.Context, extra ...*pgx.QueuedQuery) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if t.begin != "" {
		b.Queue(t.begin)
		t.begin = ""
	}
	b.QueuedQueries = append(b.QueuedQueries, t.queued...)
	n := len(b.QueuedQueries)
	t.queued = nil
	b.QueuedQueries = append(b.QueuedQueries, extra...)
	if t.last {
		// Read by the caller's Close of the results.
		b.Queue("COMMIT")
		t.last, t.committed = false, true
	}
	br := t.conn.SendBatch(ctx, b)
	for range n {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	return br, nil
}

// flush sends what is pending, if anything.
func (t *tx) flush(ctx context.Context) error {
	if !t.pending() {
		return nil
	}
	br, err := t.send(ctx)
	if err != nil {
		return err
	}
	return br.Close()
}

// errEnded answers a statement after the last round trip (Last).
var errEnded = errors.New("postgres storage: a statement after the transaction's last round trip")

func (t *tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	t.sent++
	if t.committed {
		return pgconn.CommandTag{}, errEnded
	}
	if !t.pending() {
		return t.conn.Exec(ctx, sql, args...)
	}
	br, err := t.send(ctx, &pgx.QueuedQuery{SQL: sql, Arguments: args})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	t.sent++
	if t.committed {
		return errRows{errEnded}, errEnded
	}
	if !t.pending() {
		return t.conn.Query(ctx, sql, args...)
	}
	br, err := t.send(ctx, &pgx.QueuedQuery{SQL: sql, Arguments: args})
	if err != nil {
		return errRows{err}, err
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return errRows{err}, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

func (t *tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.committed {
		return row{err: errEnded}
	}
	if !t.pending() {
		t.sent++
		return t.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return row{rows: rows, err: err}
}

func (t *tx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	t.sent++
	if t.committed {
		return errBatch{errEnded}
	}
	if !t.pending() {
		return t.conn.SendBatch(ctx, b)
	}
	br, err := t.send(ctx, b.QueuedQueries...)
	if err != nil {
		return errBatch{err}
	}
	return br
}

func (t *tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	t.sent++
	if t.committed {
		return 0, errEnded
	}
	if err := t.flush(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

func (t *tx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	t.sent++
	if err := t.flush(ctx); err != nil {
		return nil, err
	}
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects is not supported: keygate keeps no large objects.
func (t *tx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Conn is the connection; statements run on it directly skip what is
// pending.
func (t *tx) Conn() *pgx.Conn { return t.conn }

// Begin starts a savepoint.
func (t *tx) Begin(ctx context.Context) (pgx.Tx, error) {
	t.savepoints++
	sp := &savepoint{tx: t, name: "sp_" + strconv.Itoa(t.savepoints)}
	if _, err := t.Exec(ctx, "SAVEPOINT "+sp.name); err != nil {
		return nil, err
	}
	return sp, nil
}

func (t *tx) Commit(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	if t.committed {
		// COMMIT went with the last round trip.
		if len(t.queued) > 0 {
			return errEnded
		}
		if t.conn.IsClosed() {
			// The connection went with the last round trip (whether
			// COMMIT ran is unknown): the database's failure, which
			// the store may not have seen.
			return fmt.Errorf("postgres storage: the connection was lost with the transaction's last round trip: %w", pgconn.ErrConnClosed)
		}
		if t.conn.PgConn().TxStatus() != 'I' {
			t.abandon(ctx)
			return errors.New("postgres storage: the transaction's last round trip did not commit")
		}
		t.runAfter()
		return nil
	}
	if t.begin != "" && len(t.queued) == 0 && !t.last {
		// Nothing was sent: there is no transaction to end.
		t.runAfter()
		return nil
	}
	tag, err := t.Exec(ctx, "COMMIT")
	if err != nil {
		// A queued statement failed and COMMIT was skipped, or the
		// connection failed: end what may be left of the transaction.
		t.abandon(ctx)
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	t.runAfter()
	return nil
}

func (t *tx) runAfter() {
	for _, fn := range t.after {
		fn()
	}
	t.after = nil
}

func (t *tx) Rollback(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	t.done = true
	t.queued = nil
	if t.begin != "" || (t.committed && t.conn.PgConn().TxStatus() == 'I') {
		return nil // never begun, or over
	}
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	if err != nil {
		t.conn.Close(ctx) // in an unknown state: the pool drops it
	}
	return err
}

// abandon rolls back a transaction whose commit failed, if the server
// still holds it open.
func (t *tx) abandon(ctx context.Context) {
	if t.conn.IsClosed() || t.conn.PgConn().TxStatus() == 'I' {
		return
	}
	if _, err := t.conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.conn.Close(ctx)
	}
}

// savepoint is a pgx.Tx nested in a tx.
type savepoint struct {
	*tx
	name string
	done bool
}

func (sp *savepoint) Commit(ctx context.Context) error {
	if sp.done {
		return pgx.ErrTxClosed
	}
	sp.done = true
	_, err := sp.tx.Exec(ctx, "RELEASE SAVEPOINT "+sp.name)
	return err
}

func (sp *savepoint) Rollback(ctx context.Context) error {
	if sp.done {
		return pgx.ErrTxClosed
	}
	sp.done = true
	_, err := sp.tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+sp.name)
	return err
}

// batchRows are the rows of a statement sent after others: closing them
// closes the batch, which reads the rest of the round trip.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// row is pgx.Row over rows, as pgx's own QueryRow is.
type row struct {
	rows pgx.Rows
	err  error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errRows are the rows of a statement that could not be sent.
type errRows struct{ err error }

func (errRows) Close()                                       {}
func (r errRows) Err() error                                 { return r.err }
func (errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                          { return r.err }
func (r errRows) Values() ([]any, error)                     { return nil, r.err }
func (errRows) RawValues() [][]byte                          { return nil }
func (errRows) Conn() *pgx.Conn                              { return nil }
func (errRows) TypeMap() *pgtype.Map                         { return nil }

// errBatch is the result of a batch that could not be sent.
type errBatch struct{ err error }

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return errRows{b.err}, b.err }
func (b errBatch) QueryRow() pgx.Row                { return row{err: b.err} }
func (b errBatch) Close() error                     { return b.err }

var (
	_ pgx.Tx     = (*tx)(nil)
	_ pgx.Tx     = (*savepoint)(nil)
	_ storage.Tx = (*tx)(nil)
	_ pgx.Rows   = (*batchRows)(nil)
	_ pgx.Row    = row{}
)
