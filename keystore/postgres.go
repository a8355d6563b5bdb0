package keystore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// PostgresBackend keeps keys in the `keys` table of a PostgreSQL schema
// (migration 0002_keys.sql).
type PostgresBackend struct{ db *pgdb.DB }

// NewPostgresBackend uses db, already migrated.
func NewPostgresBackend(db *pgdb.DB) *PostgresBackend { return &PostgresBackend{db: db} }

// Load implements Backend.
func (b *PostgresBackend) Load(fn func(rec *record, u Usage) error) error {
	ctx := context.Background()
	return b.db.View(ctx, func(tx storage.Tx) error {
		rows, err := pgdb.Of(tx).Query(ctx, "SELECT id, record, usage_count, last_usage FROM keys ORDER BY id")
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				id    [16]byte
				raw   []byte
				count int64
				last  *time.Time
			)
			if err := rows.Scan(&id, &raw, &count, &last); err != nil {
				return err
			}
			rec := new(record)
			if err := json.Unmarshal(raw, rec); err != nil {
				return fmt.Errorf("key %x: %w", id, err)
			}
			u := Usage{KeyID: rec.ID, Count: uint64(count)}
			if last != nil {
				u.LastUsage = last.UTC()
			}
			if err := fn(rec, u); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// Put implements Backend.
func (b *PostgresBackend) Put(rec *record) error {
	id, err := idBytes(rec.ID)
	if err != nil {
		return err
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ctx := context.Background()
	return b.db.Batch(ctx, func(tx storage.Tx) error {
		_, err := pgdb.Of(tx).Exec(ctx, `INSERT INTO keys (id, service, token_hash, record) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET service = excluded.service, token_hash = excluded.token_hash,
				record = excluded.record, updated_at = now()`,
			id, string(rec.Service), rec.TokenHash, v)
		return err
	})
}

// Delete implements Backend: the key and its usage go together.
func (b *PostgresBackend) Delete(id string) error {
	k, err := idBytes(id)
	if err != nil {
		return err
	}
	ctx := context.Background()
	return b.db.Update(ctx, func(tx storage.Tx) error {
		_, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM keys WHERE id = $1", k)
		return err
	})
}

// PutUsage implements Backend: one statement batch in one transaction.
// Usage of a key deleted meanwhile updates no row.
func (b *PostgresBackend) PutUsage(batch []Usage) error {
	ctx := context.Background()
	return b.db.Update(ctx, func(tx storage.Tx) error {
		var q pgx.Batch
		for _, u := range batch {
			k, err := idBytes(u.KeyID)
			if err != nil {
				continue
			}
			var last *time.Time
			if !u.LastUsage.IsZero() {
				t := u.LastUsage.UTC()
				last = &t
			}
			q.Queue("UPDATE keys SET usage_count = $2, last_usage = $3 WHERE id = $1", k, int64(u.Count), last)
		}
		return pgdb.Of(tx).SendBatch(ctx, &q).Close()
	})
}

var _ Backend = (*PostgresBackend)(nil)
