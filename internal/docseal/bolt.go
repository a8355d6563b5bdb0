package docseal

import (
	"context"

	"github.com/google/uuid"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
)

// The buckets, named once.
var (
	bucketSeal   = []byte("document_seal")    // selfMadeName -> the sealed certificate
	bucketSealed = []byte("sealed_documents") // sha256 (32) -> contract id (16)
)

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
