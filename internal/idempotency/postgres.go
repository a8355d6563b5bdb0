package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// PostgresBackend keeps records in PostgreSQL (migration
// 0008_idempotency.sql), which several instances share: Save holds the
// record's scope with a transaction-level advisory lock, tried, not
// waited for, so that a repeat on another instance while the first runs
// gets ErrRunning at once and exactly one of them creates.
type PostgresBackend struct{ db *pgdb.DB }

// NewPostgresBackend uses db, whose migrations made the table.
func NewPostgresBackend(db *pgdb.DB) Backend { return &PostgresBackend{db: db} }

var _ Backend = (*PostgresBackend)(nil)

const recordColumns = "request_hash, status, location, reply, created_at, expires_at"

// lockKey is the advisory lock of id: advisory locks are the database's,
// not the schema's, so the schema is part of it.
func (b *PostgresBackend) lockKey(id ID) int64 {
	h := sha256.New()
	h.Write([]byte("keygate idempotency\x00" + b.db.Schema() + "\x00"))
	h.Write(id[:])
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

func scanRecord(row pgx.Row, id ID) (*Record, error) {
	r := &Record{ID: id}
	var hash []byte
	var status int16
	if err := row.Scan(&hash, &status, &r.Location, &r.SealedBody, &r.Created, &r.Expires); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	if len(hash) != len(r.RequestHash) {
		return nil, errors.New("idempotency: a stored record has a request hash of the wrong size")
	}
	copy(r.RequestHash[:], hash)
	r.Status = int(status)
	r.Created, r.Expires = r.Created.UTC(), r.Expires.UTC()
	return r, nil
}

// Record implements Backend: one round trip, the COMMIT with the read.
func (*PostgresBackend) Record(ctx context.Context, tx storage.Tx, id ID, now time.Time) (*Record, error) {
	pgdb.Last(tx)
	return scanRecord(pgdb.Of(tx).QueryRow(ctx,
		"SELECT "+recordColumns+" FROM idempotency_records WHERE scope = $1 AND expires_at > $2", id[:], now), id)
}

// Save implements Backend: the lock and the read of a live record go in
// one round trip (with whatever the create queued before), the write is
// queued for the create's commit. The read is a statement of its own
// after the lock: under READ COMMITTED it then sees every transaction
// that held the lock before and has committed.
func (b *PostgresBackend) Save(ctx context.Context, tx storage.Tx, r *Record, now time.Time) (*Record, error) {
	t := pgdb.Of(tx)
	batch := &pgx.Batch{}
	batch.Queue("SELECT pg_try_advisory_xact_lock($1)", b.lockKey(r.ID))
	batch.Queue("SELECT "+recordColumns+" FROM idempotency_records WHERE scope = $1 AND expires_at > $2", r.ID[:], now)
	br := t.SendBatch(ctx, batch)
	var held bool
	if err := br.QueryRow().Scan(&held); err != nil {
		br.Close()
		return nil, err
	}
	live, err := scanRecord(br.QueryRow(), r.ID)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, err
	case !held:
		return nil, ErrRunning
	case live != nil:
		return live, nil
	}
	// An expired record of the scope, not purged yet, is replaced.
	pgdb.Queue(tx, `INSERT INTO idempotency_records (scope, `+recordColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (scope) DO UPDATE SET request_hash = EXCLUDED.request_hash, status = EXCLUDED.status,
		location = EXCLUDED.location, reply = EXCLUDED.reply, created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at`,
		r.ID[:], r.RequestHash[:], int16(r.Status), r.Location, r.SealedBody, r.Created, r.Expires)
	return nil, nil
}

// Expired implements Backend.
func (*PostgresBackend) Expired(ctx context.Context, tx storage.Tx, now time.Time) (bool, error) {
	var due bool
	err := pgdb.Of(tx).QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM idempotency_records WHERE expires_at <= $1)", now).Scan(&due)
	return due, err
}

// Purge implements Backend. Rows another instance's purge is deleting
// are skipped, not waited for.
func (*PostgresBackend) Purge(ctx context.Context, tx storage.Tx, now time.Time, limit int) (int, error) {
	var n any // NULL: no limit
	if limit > 0 {
		n = int64(limit)
	}
	tag, err := pgdb.Of(tx).Exec(ctx, `DELETE FROM idempotency_records WHERE scope IN (
		SELECT scope FROM idempotency_records WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, now, n)
	return int(tag.RowsAffected()), err
}
