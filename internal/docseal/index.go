package docseal

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// Index finds the contract of a sealed document by the SHA-256 of the
// file, as sealed: what /verify answers from.
type Index interface {
	// Record notes, in tx (the completion's), that the document whose
	// SHA-256 is sum belongs to contract id.
	Record(tx storage.Tx, sum [32]byte, contractID string) error
	// Lookup returns the contract of sum; ok is false for an unknown one.
	Lookup(sum [32]byte) (contractID string, ok bool, err error)
}

var bucketSealed = []byte("sealed_documents") // sha256 (32) -> contract id (16)

// BoltIndex keeps the index in a bucket.
type BoltIndex struct{ db *boltdb.DB }

// NewBoltIndex creates the bucket in db.
func NewBoltIndex(db *boltdb.DB) (Index, error) {
	if err := db.CreateBuckets(bucketSealed); err != nil {
		return nil, err
	}
	return &BoltIndex{db: db}, nil
}

// Record implements Index.
func (b *BoltIndex) Record(tx storage.Tx, sum [32]byte, contractID string) error {
	id, err := uuid.Parse(contractID)
	if err != nil {
		return err
	}
	return boltdb.Of(tx).Bucket(bucketSealed).Put(sum[:], id[:])
}

// Lookup implements Index.
func (b *BoltIndex) Lookup(sum [32]byte) (id string, ok bool, err error) {
	err = b.db.View(context.Background(), func(tx storage.Tx) error {
		v := boltdb.Of(tx).Bucket(bucketSealed).Get(sum[:])
		if len(v) == 16 {
			id, ok = uuid.UUID(v).String(), true
		}
		return nil
	})
	return id, ok, err
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

var (
	_ Index = (*BoltIndex)(nil)
	_ Index = (*PostgresIndex)(nil)
)
