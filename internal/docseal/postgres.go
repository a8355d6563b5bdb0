package docseal

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// PostgresBackend keeps the certificate in the meta table.
type PostgresBackend struct{ db *pgdb.DB }

// NewPostgresBackend uses db, already migrated.
func NewPostgresBackend(db *pgdb.DB) Backend { return &PostgresBackend{db: db} }

// SelfMade implements Backend: the first instance's insert wins, and
// every instance reads what is stored.
func (b *PostgresBackend) SelfMade(make func() ([]byte, error)) ([]byte, error) {
	ctx := context.Background()
	var out []byte
	read := func(tx storage.Tx) error {
		err := pgdb.Of(tx).QueryRow(ctx, "SELECT value FROM meta WHERE name = $1", selfMadeName).Scan(&out)
		if errors.Is(err, pgx.ErrNoRows) {
			out = nil
			return nil
		}
		return err
	}
	if err := b.db.View(ctx, read); err != nil || out != nil {
		return out, err
	}
	v, err := make()
	if err != nil {
		return nil, err
	}
	err = b.db.Update(ctx, func(tx storage.Tx) error {
		if _, err := pgdb.Of(tx).Exec(ctx, "INSERT INTO meta (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", selfMadeName, v); err != nil {
			return err
		}
		return read(tx)
	})
	return out, err
}

// PostgresIndex keeps the index in the sealed_documents table.
type PostgresIndex struct{ db *pgdb.DB }

// NewPostgresIndex uses db, already migrated.
func NewPostgresIndex(db *pgdb.DB) Index { return &PostgresIndex{db: db} }

// Record implements Index.
func (p *PostgresIndex) Record(tx storage.Tx, sum [32]byte, contractID string) error {
	id, err := uuid.Parse(contractID)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), "INSERT INTO sealed_documents (sha256, contract_id) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING", sum[:], id[:])
	return err
}

// Lookup implements Index: one statement.
func (p *PostgresIndex) Lookup(sum [32]byte) (id string, ok bool, err error) {
	ctx := context.Background()
	err = p.db.View(ctx, func(tx storage.Tx) error {
		var raw [16]byte
		err := pgdb.Of(tx).QueryRow(ctx, "SELECT contract_id FROM sealed_documents WHERE sha256 = $1", sum[:]).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		id, ok = uuid.UUID(raw).String(), true
		return nil
	})
	return id, ok, err
}
