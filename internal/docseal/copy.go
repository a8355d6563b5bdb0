package docseal

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/google/uuid"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
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
