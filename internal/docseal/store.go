package docseal

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// Backend keeps the self-made seal certificate, sealed under the master
// key by the caller, so that every instance of one database seals with
// the same one and a restart keeps it.
type Backend interface {
	// SelfMade returns the stored certificate, storing make's first when
	// there is none. Of instances racing, one value is stored and every
	// one gets it.
	SelfMade(make func() ([]byte, error)) ([]byte, error)
}

// selfMadeName names the value in bbolt's bucket and PostgreSQL's meta
// table.
const selfMadeName = "document_seal_self_made"

var bucketSeal = []byte("document_seal")

// BoltBackend keeps the certificate in a bucket of its own.
type BoltBackend struct{ db *boltdb.DB }

// NewBoltBackend creates the bucket in db.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	if err := db.CreateBuckets(bucketSeal); err != nil {
		return nil, err
	}
	return &BoltBackend{db: db}, nil
}

// SelfMade implements Backend.
func (b *BoltBackend) SelfMade(make func() ([]byte, error)) ([]byte, error) {
	var out []byte
	err := b.db.Update(context.Background(), func(tx storage.Tx) error {
		bk := boltdb.Of(tx).Bucket(bucketSeal)
		if v := bk.Get([]byte(selfMadeName)); v != nil {
			out = append([]byte(nil), v...)
			return nil
		}
		v, err := make()
		if err != nil {
			return err
		}
		out = v
		return bk.Put([]byte(selfMadeName), v)
	})
	return out, err
}

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

var (
	_ Backend = (*BoltBackend)(nil)
	_ Backend = (*PostgresBackend)(nil)
)

// CopyToPostgres copies the self-made certificate from from, a
// transaction of the bbolt backend, into to, one of the PostgreSQL
// backend (caddy webapi migrate): as stored, sealed under the master key
// the copy is made with, so that the gateway on PostgreSQL seals with
// the certificate its documents were sealed with.
func CopyToPostgres(ctx context.Context, from, to storage.Tx) ([]storage.Copied, error) {
	n := 0
	note := "none made yet"
	if b := boltdb.Of(from).Bucket(bucketSeal); b != nil {
		if v := b.Get([]byte(selfMadeName)); v != nil {
			if _, err := pgdb.Of(to).Exec(ctx, "INSERT INTO meta (name, value) VALUES ($1, $2)", selfMadeName, v); err != nil {
				return nil, err
			}
			n, note = 1, "the self-made certificate"
		}
	}
	report := []storage.Copied{{Kind: "document seal", N: int64(n), Note: note}}

	// The index of sealed documents, so that /verify knows the documents
	// sealed before the move.
	sealed := pgdb.NewCopier(ctx, to, "sealed_documents", "sha256", "contract_id")
	if b := boltdb.Of(from).Bucket(bucketSealed); b != nil {
		err := b.ForEach(func(k, v []byte) error {
			if len(k) != sha256.Size || len(v) != 16 {
				return fmt.Errorf("sealed document %x: want a %d-byte hash and a 16-byte contract id", k, sha256.Size)
			}
			return sealed.Add(k, uuid.UUID(v))
		})
		if err != nil {
			return nil, err
		}
	}
	m, err := sealed.Close()
	if err != nil {
		return nil, err
	}
	return append(report, storage.Copied{Kind: "sealed documents", N: m}), nil
}
