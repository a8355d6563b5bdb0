package signing

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// CopyToPostgres copies the signing records of from, a transaction of the
// bbolt backend, into to, one of the PostgreSQL backend whose tables are
// empty (caddy webapi migrate): every signer's current one-time password
// (hash, salt, times and failed tries, so that a password sent before the
// move is accepted after it, under the same master key, and the resend
// and try limits go on), every stored signature and every contract's
// trail of events, and the completions whose documents wait to be
// sealed.
func CopyToPostgres(ctx context.Context, from, to storage.Tx) ([]storage.Copied, error) {
	btx := boltdb.Of(from)
	otps := pgdb.NewCopier(ctx, to, "signing_otps", "signer_id", "hash", "salt", "sent", "expires", "failures")
	n, err := copyEach(btx.Bucket(bucketOTPs), otps, func(k, v []byte) error {
		if len(k) != 16 {
			return fmt.Errorf("one-time password key %x: %d bytes, want 16", k, len(k))
		}
		rec := new(OTPRecord)
		if err := json.Unmarshal(v, rec); err != nil {
			return fmt.Errorf("one-time password of signer %s: the stored record does not decode: %w", uuid.UUID(k), err)
		}
		// PostgreSQL keeps microseconds, as PostgresBackend.PutOTP writes.
		return otps.Add(uuid.UUID(k), rec.Hash, rec.Salt, rec.Sent.UTC().Truncate(time.Microsecond),
			rec.Expires.UTC().Truncate(time.Microsecond), int32(rec.Failures))
	})
	if err != nil {
		return nil, err
	}
	report := []storage.Copied{{Kind: "one-time passwords", N: n}}

	sigs := pgdb.NewCopier(ctx, to, "signing_signatures", "signer_id", "method", "data")
	n, err = copyEach(btx.Bucket(bucketSignatures), sigs, func(k, v []byte) error {
		if len(k) != 16 || len(v) == 0 {
			return fmt.Errorf("signature key %x: a 16-byte key and a method byte are needed", k)
		}
		for m, b := range methodBytes {
			if b == v[0] {
				return sigs.Add(uuid.UUID(k), m, v[1:])
			}
		}
		return fmt.Errorf("signature of signer %s: unknown method byte %q", uuid.UUID(k), v[0])
	})
	if err != nil {
		return nil, err
	}
	report = append(report, storage.Copied{Kind: "signatures", N: n})

	// Each contract's trail, ids as bbolt's sequence gave them so that
	// the order of its events holds, the record bytes as they are.
	trail := pgdb.NewCopier(ctx, to, "signing_trail", "id", "contract_id", "record")
	var last uint64
	n, err = copyEach(btx.Bucket(bucketTrail), trail, func(k, v []byte) error {
		if len(k) != 24 {
			return fmt.Errorf("trail key %x: %d bytes, want 24", k, len(k))
		}
		if !json.Valid(v) {
			return fmt.Errorf("trail event of contract %s: the stored record is not JSON", uuid.UUID(k[:16]))
		}
		seq := binary.BigEndian.Uint64(k[16:])
		if seq > 1<<63-1 {
			return fmt.Errorf("trail key %x: sequence out of range", k)
		}
		last = max(last, seq)
		return trail.Add(int64(seq), uuid.UUID(k[:16]), v)
	})
	if err != nil {
		return nil, err
	}
	if err := pgdb.AdvanceSequence(ctx, to, "pg_get_serial_sequence('signing_trail', 'id')", last); err != nil {
		return nil, err
	}
	report = append(report, storage.Copied{Kind: "trail events", N: n})

	// Completions whose documents still wait: the gateway on PostgreSQL
	// seals them.
	queue := pgdb.NewCopier(ctx, to, "signing_seal_queue", "contract_id", "queued")
	n, err = copyEach(btx.Bucket(bucketSealQueue), queue, func(k, v []byte) error {
		if len(k) != 16 || len(v) != 8 {
			return fmt.Errorf("seal queue entry %x: malformed", k)
		}
		return queue.Add(uuid.UUID(k), time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC())
	})
	if err != nil {
		return nil, err
	}
	return append(report, storage.Copied{Kind: "queued seals", N: n}), nil
}

// copyEach calls row for every entry of b (none if b is missing) and
// closes out.
func copyEach(b *bbolt.Bucket, out *pgdb.Copier, row func(k, v []byte) error) (int64, error) {
	if b != nil {
		if err := b.ForEach(row); err != nil {
			return 0, err
		}
	}
	return out.Close()
}
