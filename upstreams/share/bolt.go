package share

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"
)

// Buckets of the share store, named once. Keys are big-endian so that
// bbolt's byte order is numeric order.
var (
	// bucketShares: id (uint64 BE) → record JSON.
	bucketShares = []byte("share")
	// bucketShareUUIDs: uuid (16 raw bytes) → id.
	bucketShareUUIDs = []byte("share_uuid")
	// bucketShareCounts: counter key (see countKey) → uint64 BE, so that
	// X-Total-Count of a common list is one read, not a walk.
	bucketShareCounts = []byte("share_count")
	// bucketShareActivity: id | timestamp | sequence → Activity JSON.
	bucketShareActivity = []byte("share_activity")
)

// dim is a dimension a list can be filtered on. Each has one index per
// order; dimAll covers every share.
type dim uint8

const (
	dimAll dim = iota
	dimProject
	dimCreator
	dimIssue
	numDims
)

// order is a sort an index keeps its entries in. Other sorts are done in
// memory over the entries of one dimension value (list.go).
type order uint8

const (
	orderID order = iota
	orderCreated
	orderUpdated
	numOrders
)

// indexBuckets[d][o] holds, for every share with a value in dimension d:
// value \x00 [sortKey BE] id BE → meta (see encodeMeta). dimAll has no
// value part. The value is what a list needs to filter and sort without
// reading the record itself.
var indexBuckets = [numDims][numOrders][]byte{
	dimAll:     {orderID: []byte("share_idx_all_id"), orderCreated: []byte("share_idx_all_created"), orderUpdated: []byte("share_idx_all_updated")},
	dimProject: {orderID: []byte("share_idx_project_id"), orderCreated: []byte("share_idx_project_created"), orderUpdated: []byte("share_idx_project_updated")},
	dimCreator: {orderID: []byte("share_idx_creator_id"), orderCreated: []byte("share_idx_creator_created"), orderUpdated: []byte("share_idx_creator_updated")},
	dimIssue:   {orderID: []byte("share_idx_issue_id"), orderCreated: []byte("share_idx_issue_created"), orderUpdated: []byte("share_idx_issue_updated")},
}

// allBuckets lists every bucket NewStore creates.
func allBuckets() [][]byte {
	out := [][]byte{bucketShares, bucketShareUUIDs, bucketShareCounts, bucketShareActivity}
	for d := range numDims {
		for o := range numOrders {
			out = append(out, indexBuckets[d][o])
		}
	}
	return out
}

// dimValue is the value of r in dimension d; ok is false when r has none
// (an issue share without project, any share but ISSUE for dimIssue).
func dimValue(r *record, d dim) (v string, ok bool) {
	switch d {
	case dimProject:
		return r.ProjectID, r.ProjectID != ""
	case dimCreator:
		return r.CreatedBy, true
	case dimIssue:
		return r.IssueID, r.IssueID != ""
	}
	return "", true
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

// sortableInt maps an int64 to 8 bytes whose byte order is numeric order.
func sortableInt(v int64) []byte { return u64(uint64(v) ^ 1<<63) }

// dimPrefix is the key prefix of value v in an index of dimension d.
func dimPrefix(d dim, v string) []byte {
	if d == dimAll {
		return nil
	}
	b := make([]byte, 0, len(v)+1+16)
	b = append(b, v...)
	return append(b, 0)
}

// indexKey is r's key in index (d, o).
func indexKey(d dim, o order, v string, r *record) []byte {
	k := dimPrefix(d, v)
	switch o {
	case orderCreated:
		k = append(k, sortableInt(r.CreatedAt)...)
	case orderUpdated:
		k = append(k, sortableInt(r.UpdatedAt)...)
	}
	return append(k, u64(r.ID)...)
}

// putIndexes writes r's entries in every index. Keys of an unchanged
// record are overwritten in place (a flush of opening counts rewrites only
// the meta).
func putIndexes(tx *bbolt.Tx, r *record) error {
	m := encodeMeta(r)
	for d := range numDims {
		v, ok := dimValue(r, d)
		if !ok {
			continue
		}
		for o := range numOrders {
			if err := tx.Bucket(indexBuckets[d][o]).Put(indexKey(d, o, v, r), m); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteIndexes removes r's entries from every index.
func deleteIndexes(tx *bbolt.Tx, r *record) error {
	for d := range numDims {
		v, ok := dimValue(r, d)
		if !ok {
			continue
		}
		for o := range numOrders {
			if err := tx.Bucket(indexBuckets[d][o]).Delete(indexKey(d, o, v, r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Counter kinds of bucketShareCounts.
const (
	countAll            = 'a'
	countProject        = 'p'
	countCreator        = 'c'
	countIssue          = 'i'
	countProjectCreator = 'x'
)

func countKey(kind byte, values ...string) []byte {
	k := []byte{kind}
	for i, v := range values {
		if i > 0 {
			k = append(k, 0)
		}
		k = append(k, v...)
	}
	return k
}

// recordCountKeys are the counters r belongs to.
func recordCountKeys(r *record) [][]byte {
	keys := [][]byte{countKey(countAll), countKey(countCreator, r.CreatedBy)}
	if r.ProjectID != "" {
		keys = append(keys, countKey(countProject, r.ProjectID), countKey(countProjectCreator, r.ProjectID, r.CreatedBy))
	}
	if r.IssueID != "" {
		keys = append(keys, countKey(countIssue, r.IssueID))
	}
	return keys
}

// adjustCounts adds delta to every counter of r, dropping counters that
// reach zero so that the bucket does not grow with deleted projects.
func adjustCounts(tx *bbolt.Tx, r *record, delta int64) error {
	b := tx.Bucket(bucketShareCounts)
	for _, k := range recordCountKeys(r) {
		n := int64(readCount(b, k)) + delta
		var err error
		if n <= 0 {
			err = b.Delete(k)
		} else {
			err = b.Put(k, u64(uint64(n)))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func readCount(b *bbolt.Bucket, k []byte) uint64 {
	v := b.Get(k)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// typeCodes are the one-byte codes of share types in a meta.
var typeCodes = []string{"", TypeIssue, TypeBoard, TypeJQL, TypeTimeline}

// Meta layout: id, createdAt, updatedAt, expiration, openedCount (8 bytes
// each), uuid (16), type code (1), then issueId, projectId, createdBy, each
// a uvarint length and the bytes.
const metaFixed = 8*5 + 16 + 1

func encodeMeta(r *record) []byte {
	b := make([]byte, metaFixed, metaFixed+len(r.IssueID)+len(r.ProjectID)+len(r.CreatedBy)+6)
	binary.BigEndian.PutUint64(b[0:], r.ID)
	binary.BigEndian.PutUint64(b[8:], uint64(r.CreatedAt))
	binary.BigEndian.PutUint64(b[16:], uint64(r.UpdatedAt))
	binary.BigEndian.PutUint64(b[24:], uint64(r.Expiration))
	binary.BigEndian.PutUint64(b[32:], uint64(r.OpenedCount))
	if u, err := uuid.Parse(r.UUID); err == nil {
		copy(b[40:56], u[:])
	}
	for i, t := range typeCodes {
		if t == r.Type {
			b[56] = byte(i)
		}
	}
	for _, s := range []string{r.IssueID, r.ProjectID, r.CreatedBy} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// metaView reads a meta in place, without copying: it is valid only
// inside the transaction that read it. The created_at and updated_at
// sorts walk their own indexes, so only the fields a list filters or sorts
// on in memory have accessors.
type metaView []byte

var errBadMeta = errors.New("share: corrupt index entry")

func (m metaView) id() uint64         { return binary.BigEndian.Uint64(m[0:]) }
func (m metaView) expiration() int64  { return int64(binary.BigEndian.Uint64(m[24:])) }
func (m metaView) openedCount() int64 { return int64(binary.BigEndian.Uint64(m[32:])) }
func (m metaView) uuidBytes() []byte  { return m[40:56] }
func (m metaView) typeName() string   { return typeCodes[min(int(m[56]), len(typeCodes)-1)] }
func (m metaView) valid() bool        { return len(m) >= metaFixed }
func (m metaView) strings() (issue, project, creator []byte, err error) {
	rest := []byte(m[metaFixed:])
	var out [3][]byte
	for i := range out {
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return nil, nil, nil, errBadMeta
		}
		out[i] = rest[w : w+int(n)]
		rest = rest[w+int(n):]
	}
	return out[0], out[1], out[2], nil
}

// hasPrefix is bytes.HasPrefix, named for the index walks.
func hasPrefix(k, prefix []byte) bool { return bytes.HasPrefix(k, prefix) }
