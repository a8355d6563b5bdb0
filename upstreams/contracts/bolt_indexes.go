package contracts

import (
	"bytes"
	"encoding/binary"

	"go.etcd.io/bbolt"
)

// indexEntry is one key a contract has in one index, with the counter of
// the index prefix it belongs to (empty for indexes the planner does not
// count).
type indexEntry struct {
	bucket []byte
	key    []byte
	count  []byte
}

// Counter keys of bucketCounts. The planner reads them to pick the index
// that yields the fewest candidates.
const (
	countAll             = "all"
	countTemplate        = "t\x00"
	countCreator         = "c\x00"
	countTemplateCreator = "x\x00"
	countPlacement       = "p\x00"
	countStatus          = "s\x00"
)

// indexEntries lists every index key of c. c.Status is the stored status.
func indexEntries(c *Contract, k rowKey) []indexEntry {
	pb := placementByte(c.Placement())
	sb := statusByte(c.Status)
	e := make([]indexEntry, 0, 6)
	e = append(e,
		indexEntry{bucketByTemplate, compose(k, c.TemplateID), []byte(countTemplate + c.TemplateID)},
		indexEntry{bucketByCreator, compose(k, c.CreatedByID), []byte(countCreator + c.CreatedByID)},
		indexEntry{bucketByTemplateCreator, compose(k, c.TemplateID, c.CreatedByID),
			[]byte(countTemplateCreator + c.TemplateID + "\x00" + c.CreatedByID)},
		indexEntry{bucketByPlacement, append([]byte{pb}, k[:]...), []byte{countPlacement[0], 0, pb}},
		indexEntry{bucketByStatus, append([]byte{sb}, k[:]...), []byte{countStatus[0], 0, sb}},
	)
	if c.Status.live() {
		exp := millisKey(c.ExpirationTimestamp)
		e = append(e, indexEntry{bucketByExpiry, append(exp[:], k[:]...), nil})
	}
	return e
}

// writeIndexes moves c's index entries from those of old to those of new
// (either may be nil, for create and delete) and keeps the counters in
// step, touching only keys that change.
func writeIndexes(tx *bbolt.Tx, old, new []indexEntry) error {
	for _, o := range old {
		if containsEntry(new, o) {
			continue
		}
		if err := tx.Bucket(o.bucket).Delete(o.key); err != nil {
			return err
		}
		if err := addCount(tx, o.count, -1); err != nil {
			return err
		}
	}
	for _, n := range new {
		if containsEntry(old, n) {
			continue
		}
		if err := tx.Bucket(n.bucket).Put(n.key, nil); err != nil {
			return err
		}
		if err := addCount(tx, n.count, 1); err != nil {
			return err
		}
	}
	return nil
}

func containsEntry(list []indexEntry, e indexEntry) bool {
	for _, x := range list {
		if bytes.Equal(x.bucket, e.bucket) && bytes.Equal(x.key, e.key) {
			return true
		}
	}
	return false
}

// addCount adds delta to planner counter key (none if key is nil).
func addCount(tx *bbolt.Tx, key []byte, delta int64) error {
	if key == nil {
		return nil
	}
	return bump(tx.Bucket(bucketCounts), key, delta)
}

// bump adds delta to the uint64 counter at key in b, removing it at zero
// so that counters of vanished templates, creators and documents do not
// pile up.
func bump(b *bbolt.Bucket, key []byte, delta int64) error {
	n := int64(readCount(b, key)) + delta
	if n <= 0 {
		return b.Delete(key)
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(n))
	return b.Put(key, v[:])
}

func readCount(b *bbolt.Bucket, key []byte) uint64 {
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}
