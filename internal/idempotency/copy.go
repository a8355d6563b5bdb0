package idempotency

import (
	"context"
	"fmt"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// CopyToPostgres copies the records of from, a transaction of the bbolt
// backend, that are live at now into to, one of the PostgreSQL backend
// whose table is empty (caddy webapi migrate): a client that retries a
// create after the move still gets its first reply, not a second
// contract. Bodies stay sealed as they are (bound to the record's ID);
// records whose 24 h have passed are left out, as a lookup would ignore
// them.
func CopyToPostgres(ctx context.Context, from, to storage.Tx, now time.Time) ([]storage.Copied, error) {
	records := boltdb.Of(from).Bucket(bucketRecords)
	if records == nil {
		return []storage.Copied{{Kind: "idempotent replies"}}, nil
	}
	out := pgdb.NewCopier(ctx, to, "idempotency_records", "scope", "request_hash", "status", "location", "reply", "created_at", "expires_at")
	expired := 0
	err := records.ForEach(func(k, v []byte) error {
		r, err := decodeBolt(k, v)
		if err != nil {
			return err
		}
		if !r.Expires.After(now) {
			expired++
			return nil
		}
		return out.Add(r.ID[:], r.RequestHash[:], int16(r.Status), r.Location, r.SealedBody, r.Created, r.Expires)
	})
	if err != nil {
		return nil, err
	}
	n, err := out.Close()
	if err != nil {
		return nil, err
	}
	note := "replies of creates made with an Idempotency-Key, kept until their 24 h pass"
	if expired > 0 {
		note += fmt.Sprintf("; %d expired left out", expired)
	}
	return []storage.Copied{{Kind: "idempotent replies", N: n, Note: note}}, nil
}
