package idempotency

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
)

// The buckets of the bbolt backend.
var (
	// bucketRecords: ID (32 bytes) → JSON boltRecord.
	bucketRecords = []byte("idempotency_records")
	// bucketExpiry: Expires in Unix nanoseconds (8 bytes, big-endian) and
	// ID → nothing, so that the purge walks the oldest first.
	bucketExpiry = []byte("idempotency_expiry")
)

// BoltBackend keeps records in the gateway's bbolt file. One process
// holds the file, and its Store's in-memory set tells a key being worked
// on, so Save holds nothing of its own: bbolt runs one write transaction
// at a time, in which the check and the write are one.
type BoltBackend struct{}

// NewBoltBackend creates the buckets in db.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	if err := db.CreateBuckets(bucketRecords, bucketExpiry); err != nil {
		return nil, err
	}
	return &BoltBackend{}, nil
}

// boltRecord is a Record as bbolt stores it.
type boltRecord struct {
	RequestHash []byte    `json:"requestHash"`
	Status      int       `json:"status"`
	Location    string    `json:"location,omitempty"`
	Body        []byte    `json:"body"` // sealed
	Created     time.Time `json:"created"`
	Expires     time.Time `json:"expires"`
}

func decodeBolt(id []byte, v []byte) (*Record, error) {
	var b boltRecord
	if err := json.Unmarshal(v, &b); err != nil || len(id) != len(ID{}) || len(b.RequestHash) != len(ID{}) {
		return nil, fmt.Errorf("idempotency: the stored record %x does not decode", id)
	}
	r := &Record{Status: b.Status, Location: b.Location, SealedBody: b.Body, Created: b.Created, Expires: b.Expires}
	copy(r.ID[:], id)
	copy(r.RequestHash[:], b.RequestHash)
	return r, nil
}

func expiryKey(expires time.Time, id ID) []byte {
	k := make([]byte, 8, 8+len(id))
	binary.BigEndian.PutUint64(k, uint64(expires.UnixNano()))
	return append(k, id[:]...)
}

// Record implements Backend.
func (*BoltBackend) Record(_ context.Context, tx storage.Tx, id ID, now time.Time) (*Record, error) {
	v := boltdb.Of(tx).Bucket(bucketRecords).Get(id[:])
	if v == nil {
		return nil, nil
	}
	r, err := decodeBolt(id[:], v)
	if err != nil || !r.Expires.After(now) {
		return nil, err
	}
	return r, nil
}

// Save implements Backend.
func (*BoltBackend) Save(_ context.Context, t storage.Tx, r *Record, now time.Time) (*Record, error) {
	tx := boltdb.Of(t)
	records, expiry := tx.Bucket(bucketRecords), tx.Bucket(bucketExpiry)
	if v := records.Get(r.ID[:]); v != nil {
		old, err := decodeBolt(r.ID[:], v)
		if err != nil {
			return nil, err
		}
		if old.Expires.After(now) {
			return old, nil
		}
		if err := expiry.Delete(expiryKey(old.Expires, old.ID)); err != nil {
			return nil, err
		}
	}
	v, err := json.Marshal(boltRecord{RequestHash: r.RequestHash[:], Status: r.Status, Location: r.Location,
		Body: r.SealedBody, Created: r.Created, Expires: r.Expires})
	if err != nil {
		return nil, err
	}
	if err := records.Put(r.ID[:], v); err != nil {
		return nil, err
	}
	return nil, expiry.Put(expiryKey(r.Expires, r.ID), nil)
}

// Expired implements Backend.
func (*BoltBackend) Expired(_ context.Context, tx storage.Tx, now time.Time) (bool, error) {
	k, _ := boltdb.Of(tx).Bucket(bucketExpiry).Cursor().First()
	return k != nil && due(k, now), nil
}

// due reports whether the expiry key k has passed at now.
func due(k []byte, now time.Time) bool {
	return len(k) >= 8 && int64(binary.BigEndian.Uint64(k)) <= now.UnixNano()
}

// Purge implements Backend.
func (*BoltBackend) Purge(_ context.Context, t storage.Tx, now time.Time, limit int) (int, error) {
	tx := boltdb.Of(t)
	records, expiry := tx.Bucket(bucketRecords), tx.Bucket(bucketExpiry)
	// Keys are collected first: deleting under a bbolt cursor skips keys.
	var keys [][]byte
	c := expiry.Cursor()
	for k, _ := c.First(); k != nil && due(k, now) && (limit <= 0 || len(keys) < limit); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := expiry.Delete(k); err != nil {
			return 0, err
		}
		if len(k) != 8+len(ID{}) {
			continue
		}
		id := k[8:]
		// The record is this entry's unless a newer one replaced it
		// (whose own entry is later).
		if v := records.Get(id); v != nil {
			if r, err := decodeBolt(id, v); err != nil || !r.Expires.After(now) {
				if err := records.Delete(id); err != nil {
					return 0, err
				}
			}
		}
	}
	return len(keys), nil
}

var _ Backend = (*BoltBackend)(nil)
