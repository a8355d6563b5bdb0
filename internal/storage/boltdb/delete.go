package boltdb

import (
	"bytes"

	"go.etcd.io/bbolt"
)

// DeletePrefix deletes the keys of bkt that start with prefix.
func DeletePrefix(bkt *bbolt.Bucket, prefix []byte) error {
	var keys [][]byte
	c := bkt.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	return deleteKeys(bkt, keys)
}

// DeleteWhere deletes the keys of bkt that match, scanning the whole
// bucket.
func DeleteWhere(bkt *bbolt.Bucket, match func(k []byte) bool) error {
	var keys [][]byte
	if err := bkt.ForEach(func(k, _ []byte) error {
		if match(k) {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	return deleteKeys(bkt, keys)
}

func deleteKeys(bkt *bbolt.Bucket, keys [][]byte) error {
	for _, k := range keys {
		if err := bkt.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
