package signing

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/upstreams/contracts"
)

// BoltBackend keeps the signing records in three buckets of the bbolt
// file: keyed by the 16 bytes of a signer id, bucketOTPs (JSON OTPRecord)
// and bucketSignatures (a method byte, then the image or the typed name);
// keyed by contract id and sequence, bucketTrail (JSON TrailEvent).
type BoltBackend struct{}

// NewBoltBackend creates the buckets in db.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	if err := db.CreateBuckets(bucketOTPs, bucketSignatures, bucketTrail, bucketSealQueue); err != nil {
		return nil, err
	}
	return &BoltBackend{}, nil
}

func signerKey(id string) ([]byte, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("signing: signer id %q: %w", id, err)
	}
	return u[:], nil
}

// OTP implements Backend.
func (BoltBackend) OTP(tx storage.Tx, signerID string) (*OTPRecord, error) {
	key, err := signerKey(signerID)
	if err != nil {
		return nil, err
	}
	v := boltdb.Of(tx).Bucket(bucketOTPs).Get(key)
	if v == nil {
		return nil, nil
	}
	rec := new(OTPRecord)
	if err := json.Unmarshal(v, rec); err != nil {
		return nil, fmt.Errorf("signing: one-time password record: %w", err)
	}
	return rec, nil
}

// PutOTP implements Backend.
func (BoltBackend) PutOTP(tx storage.Tx, signerID string, rec *OTPRecord) error {
	key, err := signerKey(signerID)
	if err != nil {
		return err
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return boltdb.Of(tx).Bucket(bucketOTPs).Put(key, v)
}

// DeleteOTP implements Backend.
func (BoltBackend) DeleteOTP(tx storage.Tx, signerID string) error {
	key, err := signerKey(signerID)
	if err != nil {
		return err
	}
	return boltdb.Of(tx).Bucket(bucketOTPs).Delete(key)
}

// Signature records: one method byte, then the image or the typed name.
var methodBytes = map[string]byte{contracts.MethodUpload: 'u', contracts.MethodRender: 'r', contracts.MethodDraw: 'd'}

// Signature implements Backend; the data is copied out of tx.
func (BoltBackend) Signature(tx storage.Tx, signerID string) (string, []byte, bool, error) {
	key, err := signerKey(signerID)
	if err != nil {
		return "", nil, false, err
	}
	v := boltdb.Of(tx).Bucket(bucketSignatures).Get(key)
	if len(v) == 0 {
		return "", nil, false, nil
	}
	for m, b := range methodBytes {
		if b == v[0] {
			return m, bytes.Clone(v[1:]), true, nil
		}
	}
	return "", nil, false, fmt.Errorf("signing: the signature of signer %s is corrupt", signerID)
}

// PutSignature implements Backend.
func (BoltBackend) PutSignature(tx storage.Tx, signerID, method string, data []byte) error {
	key, err := signerKey(signerID)
	if err != nil {
		return err
	}
	b, ok := methodBytes[method]
	if !ok {
		return fmt.Errorf("signing: unknown signature method %q", method)
	}
	return boltdb.Of(tx).Bucket(bucketSignatures).Put(key, append([]byte{b}, data...))
}

// Forget implements Backend.
func (BoltBackend) Forget(tx storage.Tx, signerIDs []string) error {
	btx := boltdb.Of(tx)
	for _, id := range signerIDs {
		key, err := signerKey(id)
		if err != nil {
			return err
		}
		for _, b := range [][]byte{bucketOTPs, bucketSignatures} {
			if err := btx.Bucket(b).Delete(key); err != nil {
				return err
			}
		}
	}
	return nil
}

// AppendTrail implements Backend: the bucket's sequence orders the
// events, and bbolt's single writer makes that the order of commits.
func (BoltBackend) AppendTrail(tx storage.Tx, contractID string, e *TrailEvent) error {
	prefix, err := signerKey(contractID)
	if err != nil {
		return err
	}
	b := boltdb.Of(tx).Bucket(bucketTrail)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return b.Put(binary.BigEndian.AppendUint64(prefix, seq), v)
}

// Trail implements Backend; the events are decoded, so nothing of tx
// is kept.
func (BoltBackend) Trail(tx storage.Tx, contractID string) ([]TrailEvent, error) {
	prefix, err := signerKey(contractID)
	if err != nil {
		return nil, err
	}
	var out []TrailEvent
	c := boltdb.Of(tx).Bucket(bucketTrail).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var e TrailEvent
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("signing: trail of contract %s: %w", contractID, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// DeleteTrail implements Backend.
func (BoltBackend) DeleteTrail(tx storage.Tx, contractID string) error {
	prefix, err := signerKey(contractID)
	if err != nil {
		return err
	}
	return boltdb.DeletePrefix(boltdb.Of(tx).Bucket(bucketTrail), prefix)
}

// QueueSeal implements Backend.
func (BoltBackend) QueueSeal(tx storage.Tx, contractID string, queued time.Time) error {
	key, err := signerKey(contractID)
	if err != nil {
		return err
	}
	return boltdb.Of(tx).Bucket(bucketSealQueue).Put(key, binary.BigEndian.AppendUint64(nil, uint64(queued.UnixNano())))
}

// SealQueue implements Backend: the queue is short (completions
// sealed within seconds), so it is read whole and sorted.
func (BoltBackend) SealQueue(tx storage.Tx, before time.Time, n int) ([]QueuedSeal, error) {
	var out []QueuedSeal
	err := boltdb.Of(tx).Bucket(bucketSealQueue).ForEach(func(k, v []byte) error {
		if len(k) != 16 || len(v) != 8 {
			return fmt.Errorf("signing: seal queue entry %x: malformed", k)
		}
		if at := time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC(); at.Before(before) {
			out = append(out, QueuedSeal{ContractID: uuid.UUID(k).String(), Queued: at})
		}
		return nil
	})
	slices.SortFunc(out, func(a, b QueuedSeal) int { return a.Queued.Compare(b.Queued) })
	return out[:min(n, len(out))], err
}

// Sealing implements Backend: bbolt's single writer holds the entry.
func (BoltBackend) Sealing(tx storage.Tx, contractID string) (bool, error) {
	key, err := signerKey(contractID)
	if err != nil {
		return false, err
	}
	return boltdb.Of(tx).Bucket(bucketSealQueue).Get(key) != nil, nil
}

// Sealed implements Backend.
func (BoltBackend) Sealed(tx storage.Tx, contractID string) error {
	key, err := signerKey(contractID)
	if err != nil {
		return err
	}
	return boltdb.Of(tx).Bucket(bucketSealQueue).Delete(key)
}

var _ Backend = BoltBackend{}
