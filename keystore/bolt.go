package keystore

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage/boltdb"
)

// Buckets of the key store, named once.
var (
	bucketKeys     = []byte("keys")      // key id (16 bytes) -> record JSON
	bucketKeyUsage = []byte("key_usage") // key id (16 bytes) -> count (8) | last usage unix ns (8), big-endian
)

// Backend is where keys persist. Keys keeps every key in memory and only
// writes through a Backend, so another one (etcd, for several gateway
// instances) can replace bbolt without touching the key check.
type Backend interface {
	// Load calls fn for every stored key with its last flushed usage.
	Load(fn func(rec *record, u Usage) error) error
	Put(rec *record) error
	Delete(id string) error
	PutUsage(batch []Usage) error
}

// BoltBackend keeps keys in a bbolt database shared with the APIs.
type BoltBackend struct{ db *bbolt.DB }

// NewBoltBackend creates the key buckets in db.
func NewBoltBackend(db *bbolt.DB) (*BoltBackend, error) {
	if err := boltdb.New(db).CreateBuckets(bucketKeys, bucketKeyUsage); err != nil {
		return nil, err
	}
	return &BoltBackend{db: db}, nil
}

func idBytes(id string) ([]byte, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return nil, err
	}
	return u[:], nil
}

// Load implements Backend.
func (b *BoltBackend) Load(fn func(rec *record, u Usage) error) error {
	return b.db.View(func(tx *bbolt.Tx) error {
		usage := tx.Bucket(bucketKeyUsage)
		return tx.Bucket(bucketKeys).ForEach(func(k, v []byte) error {
			rec := new(record)
			if err := json.Unmarshal(v, rec); err != nil {
				return fmt.Errorf("key %x: %w", k, err)
			}
			u := Usage{KeyID: rec.ID}
			if uv := usage.Get(k); len(uv) == 16 {
				u.Count = binary.BigEndian.Uint64(uv[:8])
				if ns := int64(binary.BigEndian.Uint64(uv[8:])); ns != 0 {
					u.LastUsage = time.Unix(0, ns).UTC()
				}
			}
			return fn(rec, u)
		})
	})
}

// Put implements Backend. Creates from many clients share commits.
func (b *BoltBackend) Put(rec *record) error {
	k, err := idBytes(rec.ID)
	if err != nil {
		return err
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return b.db.Batch(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketKeys).Put(k, v)
	})
}

// Delete implements Backend: the key and its usage go together.
func (b *BoltBackend) Delete(id string) error {
	k, err := idBytes(id)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketKeys).Delete(k); err != nil {
			return err
		}
		return tx.Bucket(bucketKeyUsage).Delete(k)
	})
}

// PutUsage implements Backend: one transaction for the whole batch. Usage
// of a key deleted meanwhile is not written back.
func (b *BoltBackend) PutUsage(batch []Usage) error {
	return b.db.Update(func(tx *bbolt.Tx) error {
		keys, usage := tx.Bucket(bucketKeys), tx.Bucket(bucketKeyUsage)
		for _, u := range batch {
			k, err := idBytes(u.KeyID)
			if err != nil || keys.Get(k) == nil {
				continue
			}
			var v [16]byte
			binary.BigEndian.PutUint64(v[:8], u.Count)
			if !u.LastUsage.IsZero() {
				binary.BigEndian.PutUint64(v[8:], uint64(u.LastUsage.UnixNano()))
			}
			if err := usage.Put(k, v[:]); err != nil {
				return err
			}
		}
		return nil
	})
}
