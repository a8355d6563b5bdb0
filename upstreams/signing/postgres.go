package signing

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// PostgresBackend keeps the signing records in the tables signing_otps and
// signing_signatures (migration 0004_signing.sql) and signing_trail
// (0011_signing_trail.sql), and signing_seal_queue
// (0013_signing_seal_queue.sql).
//
// OTP serialises the transactions that read one signer's password, as
// bbolt's single writer does: it takes a transaction-level advisory lock
// on the signer before it reads, then reads the row FOR UPDATE. A row
// lock alone holds nothing while no password exists, so parallel first
// requests would each find none, each store one and each send one.
type PostgresBackend struct{}

// NewPostgresBackend uses db, already migrated.
func NewPostgresBackend(*pgdb.DB) Backend { return &PostgresBackend{} }

func signerUUID(id string) (uuid.UUID, error) {
	u, err := signerKey(id)
	if err != nil {
		return uuid.UUID{}, err
	}
	return uuid.UUID(u), nil
}

// otpLockKey is the advisory lock key of signer id: the first 8 bytes of
// the random id, so two signers share a key by chance too rarely to
// matter (and sharing one only makes them wait for each other).
func otpLockKey(id uuid.UUID) int64 { return int64(binary.BigEndian.Uint64(id[:8])) }

// OTP implements Backend in one round trip: the lock, then the read, each
// statement with its own snapshot, so the read sees what the previous
// holder of the lock committed.
func (PostgresBackend) OTP(tx storage.Tx, signerID string) (*OTPRecord, error) {
	id, err := signerUUID(signerID)
	if err != nil {
		return nil, err
	}
	batch := &pgx.Batch{}
	batch.Queue("SELECT pg_advisory_xact_lock($1)", otpLockKey(id))
	batch.Queue("SELECT hash, salt, sent, expires, failures FROM signing_otps WHERE signer_id = $1 FOR UPDATE", id)
	br := pgdb.Of(tx).SendBatch(context.Background(), batch)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rec := new(OTPRecord)
	err = br.QueryRow().Scan(&rec.Hash, &rec.Salt, &rec.Sent, &rec.Expires, &rec.Failures)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, br.Close()
	}
	if err != nil {
		return nil, err
	}
	rec.Sent, rec.Expires = rec.Sent.UTC(), rec.Expires.UTC()
	return rec, br.Close()
}

// PutOTP implements Backend.
func (PostgresBackend) PutOTP(tx storage.Tx, signerID string, rec *OTPRecord) error {
	id, err := signerUUID(signerID)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), `INSERT INTO signing_otps (signer_id, hash, salt, sent, expires, failures)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (signer_id) DO UPDATE SET hash = excluded.hash, salt = excluded.salt,
			sent = excluded.sent, expires = excluded.expires, failures = excluded.failures`,
		id, rec.Hash, rec.Salt, rec.Sent.UTC().Truncate(time.Microsecond), rec.Expires.UTC().Truncate(time.Microsecond), rec.Failures)
	return err
}

// DeleteOTP implements Backend.
func (PostgresBackend) DeleteOTP(tx storage.Tx, signerID string) error {
	id, err := signerUUID(signerID)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), "DELETE FROM signing_otps WHERE signer_id = $1", id)
	return err
}

// Signature implements Backend.
func (PostgresBackend) Signature(tx storage.Tx, signerID string) (string, []byte, bool, error) {
	id, err := signerUUID(signerID)
	if err != nil {
		return "", nil, false, err
	}
	var method string
	var data []byte
	err = pgdb.Of(tx).QueryRow(context.Background(),
		"SELECT method, data FROM signing_signatures WHERE signer_id = $1", id).Scan(&method, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, false, nil
	}
	if err != nil {
		return "", nil, false, err
	}
	return method, data, true, nil
}

// PutSignature implements Backend.
func (PostgresBackend) PutSignature(tx storage.Tx, signerID, method string, data []byte) error {
	id, err := signerUUID(signerID)
	if err != nil {
		return err
	}
	if _, ok := methodBytes[method]; !ok {
		return errors.New("signing: unknown signature method " + method)
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), `INSERT INTO signing_signatures (signer_id, method, data) VALUES ($1, $2, $3)
		ON CONFLICT (signer_id) DO UPDATE SET method = excluded.method, data = excluded.data`, id, method, data)
	return err
}

// Forget implements Backend.
func (PostgresBackend) Forget(tx storage.Tx, signerIDs []string) error {
	ids := make([]uuid.UUID, len(signerIDs))
	for i, s := range signerIDs {
		var err error
		if ids[i], err = signerUUID(s); err != nil {
			return err
		}
	}
	ctx := context.Background()
	if _, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM signing_otps WHERE signer_id = ANY($1)", ids); err != nil {
		return err
	}
	_, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM signing_signatures WHERE signer_id = ANY($1)", ids)
	return err
}

// AppendTrail implements Backend: the row's id, from a sequence, orders
// the events.
func (PostgresBackend) AppendTrail(tx storage.Tx, contractID string, e *TrailEvent) error {
	id, err := signerUUID(contractID)
	if err != nil {
		return err
	}
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), "INSERT INTO signing_trail (contract_id, record) VALUES ($1, $2)", id, v)
	return err
}

// Trail implements Backend.
func (PostgresBackend) Trail(tx storage.Tx, contractID string) ([]TrailEvent, error) {
	id, err := signerUUID(contractID)
	if err != nil {
		return nil, err
	}
	rows, err := pgdb.Of(tx).Query(context.Background(), "SELECT record FROM signing_trail WHERE contract_id = $1 ORDER BY id", id)
	if err != nil {
		return nil, err
	}
	var out []TrailEvent
	var v []byte
	_, err = pgx.ForEachRow(rows, []any{&v}, func() error {
		var e TrailEvent
		if err := json.Unmarshal(v, &e); err != nil {
			return fmt.Errorf("signing: trail of contract %s: %w", contractID, err)
		}
		out = append(out, e)
		return nil
	})
	return out, err
}

// DeleteTrail implements Backend.
func (PostgresBackend) DeleteTrail(tx storage.Tx, contractID string) error {
	id, err := signerUUID(contractID)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), "DELETE FROM signing_trail WHERE contract_id = $1", id)
	return err
}

// QueueSeal implements Backend.
func (PostgresBackend) QueueSeal(tx storage.Tx, contractID string, queued time.Time) error {
	id, err := signerUUID(contractID)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), `INSERT INTO signing_seal_queue (contract_id, queued) VALUES ($1, $2)
		ON CONFLICT (contract_id) DO NOTHING`, id, queued)
	return err
}

// SealQueue implements Backend.
func (PostgresBackend) SealQueue(tx storage.Tx, before time.Time, n int) ([]QueuedSeal, error) {
	rows, err := pgdb.Of(tx).Query(context.Background(),
		"SELECT contract_id, queued FROM signing_seal_queue WHERE queued < $1 ORDER BY queued LIMIT $2", before, n)
	if err != nil {
		return nil, err
	}
	var out []QueuedSeal
	var id uuid.UUID
	var at time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		out = append(out, QueuedSeal{ContractID: id.String(), Queued: at.UTC()})
		return nil
	})
	return out, err
}

// Sealing implements Backend: the row, read FOR UPDATE, is held until
// tx ends, and a second reader sees it gone once the first removed it.
func (PostgresBackend) Sealing(tx storage.Tx, contractID string) (bool, error) {
	id, err := signerUUID(contractID)
	if err != nil {
		return false, err
	}
	var one int
	err = pgdb.Of(tx).QueryRow(context.Background(), "SELECT 1 FROM signing_seal_queue WHERE contract_id = $1 FOR UPDATE", id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Sealed implements Backend.
func (PostgresBackend) Sealed(tx storage.Tx, contractID string) error {
	id, err := signerUUID(contractID)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(context.Background(), "DELETE FROM signing_seal_queue WHERE contract_id = $1", id)
	return err
}

var _ Backend = PostgresBackend{}
