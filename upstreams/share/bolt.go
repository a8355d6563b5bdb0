package share

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"slices"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
)

// BoltBackend keeps shares in the gateway's bbolt file: the buckets below,
// unchanged in format since before backends existed, so that an existing
// webapi.db keeps working.
type BoltBackend struct{ db *boltdb.DB }

// NewBoltBackend creates the share buckets in db.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	if err := db.CreateBuckets(allBuckets()...); err != nil {
		return nil, err
	}
	return &BoltBackend{db: db}, nil
}

var _ Backend = (*BoltBackend)(nil)

// ShareByUUID implements Backend.
func (*BoltBackend) ShareByUUID(tx storage.Tx, uuidStr string, _ bool) (*Record, error) {
	return loadByUUID(boltdb.Of(tx), uuidStr)
}

// ShareNow implements Backend with a read transaction, which costs bbolt
// no round trip.
func (b *BoltBackend) ShareNow(ctx context.Context, uuidStr string, mark int64) (r *Record, seen bool, err error) {
	err = b.db.View(ctx, func(tx storage.Tx) error {
		if r, err = loadByUUID(boltdb.Of(tx), uuidStr); err != nil {
			return err
		}
		seen, err = b.Sees(tx, mark)
		return err
	})
	return r, seen, err
}

// ShareByID implements Backend.
func (*BoltBackend) ShareByID(tx storage.Tx, id uint64) (*Record, error) {
	return loadByID(boltdb.Of(tx), u64(id))
}

// CreateShare implements Backend: the id is the shares bucket's sequence.
func (*BoltBackend) CreateShare(t storage.Tx, r *Record) error {
	tx := boltdb.Of(t)
	key, ok := canonicalUUID(r.UUID)
	if !ok {
		return errors.New("share: bad uuid")
	}
	uuids := tx.Bucket(bucketShareUUIDs)
	if uuids.Get(key) != nil {
		return errors.New("share: uuid collision")
	}
	appendOnly(tx)
	id, err := tx.Bucket(bucketShares).NextSequence()
	if err != nil {
		return err
	}
	r.ID = id
	if err := uuids.Put(key, u64(id)); err != nil {
		return err
	}
	if err := putShare(tx, r); err != nil {
		return err
	}
	return adjustCounts(tx, r, 1)
}

// UpdateShare implements Backend.
func (*BoltBackend) UpdateShare(t storage.Tx, old, r *Record) error {
	tx := boltdb.Of(t)
	if err := deleteIndexes(tx, old); err != nil {
		return err
	}
	return putShare(tx, r)
}

// DeleteShare implements Backend.
func (*BoltBackend) DeleteShare(t storage.Tx, r *Record) error {
	tx := boltdb.Of(t)
	key, _ := canonicalUUID(r.UUID)
	if err := tx.Bucket(bucketShareUUIDs).Delete(key); err != nil {
		return err
	}
	if err := tx.Bucket(bucketShares).Delete(u64(r.ID)); err != nil {
		return err
	}
	if err := deleteIndexes(tx, r); err != nil {
		return err
	}
	if err := adjustCounts(tx, r, -1); err != nil {
		return err
	}
	return deleteActivity(tx, r.ID)
}

// AddActivity implements Backend.
func (*BoltBackend) AddActivity(tx storage.Tx, id uint64, a Activity) error {
	return appendActivity(boltdb.Of(tx), id, a)
}

// Activity implements Backend.
func (*BoltBackend) Activity(t storage.Tx, id uint64, n int) ([]Activity, error) {
	tx := boltdb.Of(t)
	out := make([]Activity, 0, min(n, 64))
	c := tx.Bucket(bucketShareActivity).Cursor()
	prefix := u64(id)
	k, v := c.Seek(u64(id + 1))
	if k == nil {
		k, v = c.Last()
	} else {
		k, v = c.Prev()
	}
	for ; k != nil && hasPrefix(k, prefix) && len(out) < n; k, v = c.Prev() {
		var a Activity
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// AddOpenings implements Backend.
func (*BoltBackend) AddOpenings(t storage.Tx, id uint64, n int64, entries []Activity) error {
	tx := boltdb.Of(t)
	r, err := loadByID(tx, u64(id))
	if err != nil || r == nil {
		return err
	}
	if n > 0 {
		r.OpenedCount += n
		if err := putShare(tx, r); err != nil {
			return err
		}
	}
	for _, a := range entries {
		if err := appendActivity(tx, id, a); err != nil {
			return err
		}
	}
	return nil
}

// Mark implements Backend: bbolt's transaction ids grow with each write.
func (*BoltBackend) Mark(tx storage.Tx) (int64, error) { return int64(boltdb.Of(tx).ID()), nil }

// Sees implements Backend: a read transaction sees every write committed
// before it began, whose id is at most its own.
func (*BoltBackend) Sees(tx storage.Tx, mark int64) (bool, error) {
	return int64(boltdb.Of(tx).ID()) >= mark, nil
}

// List implements Backend: it walks the index of the most selective
// filter, in order for the orders an index keeps (id, created_at,
// updated_at), else reading that filter's matches and sorting them in
// memory.
func (*BoltBackend) List(ctx context.Context, t storage.Tx, q *ListSpec) ([]*Record, int, error) {
	tx := boltdb.Of(t)
	p := listPlan{issue: q.IssueID, project: q.ProjectID, creator: q.CreatedBy,
		checkVisible: q.VisibleTo != nil, caller: q.VisibleTo}
	var ids []uint64
	var total int
	var err error
	switch q.Sort {
	case "id", "created_at", "updated_at":
		ids, total, err = walkOrdered(ctx, tx, &p, q)
	default:
		ids, total, err = sortInMemory(ctx, tx, &p, q)
	}
	if err != nil {
		return nil, 0, err
	}
	out := make([]*Record, 0, len(ids))
	for _, id := range ids {
		r, err := loadByID(tx, u64(id))
		if err != nil {
			return nil, 0, err
		}
		if r == nil {
			continue // an index entry without its share: never written so, skip
		}
		out = append(out, r)
	}
	return out, total, nil
}

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
func dimValue(r *Record, d dim) (v string, ok bool) {
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
func indexKey(d dim, o order, v string, r *Record) []byte {
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
func putIndexes(tx *bbolt.Tx, r *Record) error {
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
func deleteIndexes(tx *bbolt.Tx, r *Record) error {
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
func recordCountKeys(r *Record) [][]byte {
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
func adjustCounts(tx *bbolt.Tx, r *Record, delta int64) error {
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

func encodeMeta(r *Record) []byte {
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

// loadByUUID reads the share named uuidStr in tx; nil when absent.
func loadByUUID(tx *bbolt.Tx, uuidStr string) (*Record, error) {
	key, ok := canonicalUUID(uuidStr)
	if !ok {
		return nil, nil
	}
	id := tx.Bucket(bucketShareUUIDs).Get(key)
	if id == nil {
		return nil, nil
	}
	return loadByID(tx, id)
}

// loadByID decodes the record stored under idKey; decoding copies it out
// of the transaction. nil when absent.
func loadByID(tx *bbolt.Tx, idKey []byte) (*Record, error) {
	v := tx.Bucket(bucketShares).Get(idKey)
	if v == nil {
		return nil, nil
	}
	r := new(Record)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, err
	}
	return r, nil
}

// putShare writes r with its uuid entry and index entries.
func putShare(tx *bbolt.Tx, r *Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketShares).Put(u64(r.ID), v); err != nil {
		return err
	}
	return putIndexes(tx, r)
}

// appendFill is the page fill of buckets whose keys only grow: bbolt's
// default (half-full pages, for random inserts) would double their size.
const appendFill = 0.9

// appendOnly sets the fill of the buckets a create appends to: the shares
// by id and the id- and time-ordered indexes of all shares.
func appendOnly(tx *bbolt.Tx) {
	tx.Bucket(bucketShares).FillPercent = appendFill
	for o := range numOrders {
		tx.Bucket(indexBuckets[dimAll][o]).FillPercent = appendFill
	}
}

// match reports whether the index entry m passes the filters that its
// index does not already imply, and the visibility rule.
func (p *listPlan) match(m metaView, driving dim) (bool, error) {
	issue, project, creator, err := m.strings()
	if err != nil {
		return false, err
	}
	if p.issue != "" && driving != dimIssue && string(issue) != p.issue {
		return false, nil
	}
	if p.project != "" && driving != dimProject && string(project) != p.project {
		return false, nil
	}
	if p.creator != "" && driving != dimCreator && string(creator) != p.creator {
		return false, nil
	}
	if p.checkVisible && string(creator) != p.caller.Owner && !p.caller.AdminOf(string(project)) {
		return false, nil
	}
	return true, nil
}

// driving picks the index to walk: the issue (few shares each), else the
// smaller of project and creator, else one of them, else all shares.
func (p *listPlan) driving(counts *bbolt.Bucket) (dim, string) {
	switch {
	case p.issue != "":
		return dimIssue, p.issue
	case p.project != "" && p.creator != "":
		if readCount(counts, countKey(countCreator, p.creator)) < readCount(counts, countKey(countProject, p.project)) {
			return dimCreator, p.creator
		}
		return dimProject, p.project
	case p.project != "":
		return dimProject, p.project
	case p.creator != "":
		return dimCreator, p.creator
	}
	return dimAll, ""
}

// knownTotal returns the number of matches from the counters when every
// match is visible and the filters are ones a counter keeps; ok is false
// when the list has to count while walking.
func (p *listPlan) knownTotal(counts *bbolt.Bucket) (n int, ok bool) {
	if p.checkVisible {
		return 0, false
	}
	var k []byte
	switch {
	case p.issue != "" && p.project == "" && p.creator == "":
		k = countKey(countIssue, p.issue)
	case p.issue != "":
		return 0, false
	case p.project != "" && p.creator != "":
		k = countKey(countProjectCreator, p.project, p.creator)
	case p.project != "":
		k = countKey(countProject, p.project)
	case p.creator != "":
		k = countKey(countCreator, p.creator)
	default:
		k = countKey(countAll)
	}
	return int(readCount(counts, k)), true
}

// walkCheckEvery is how many index entries a list walks between checks
// of its context.
const walkCheckEvery = 4096

// indexCursor walks the entries of one dimension value in an index, in
// either direction.
type indexCursor struct {
	c      *bbolt.Cursor
	prefix []byte
	desc   bool
}

func newIndexCursor(tx *bbolt.Tx, d dim, o order, value string, desc bool) *indexCursor {
	return &indexCursor{c: tx.Bucket(indexBuckets[d][o]).Cursor(), prefix: dimPrefix(d, value), desc: desc}
}

func (ic *indexCursor) first() ([]byte, []byte) {
	switch {
	case !ic.desc && len(ic.prefix) == 0:
		return ic.check(ic.c.First())
	case !ic.desc:
		return ic.check(ic.c.Seek(ic.prefix))
	case len(ic.prefix) == 0:
		return ic.check(ic.c.Last())
	}
	// The prefix ends in \x00; the first key past all of its entries
	// starts with the prefix whose last byte is \x01.
	end := append(bytes.Clone(ic.prefix[:len(ic.prefix)-1]), 1)
	if k, _ := ic.c.Seek(end); k == nil {
		return ic.check(ic.c.Last())
	}
	return ic.check(ic.c.Prev())
}

func (ic *indexCursor) next() ([]byte, []byte) {
	if ic.desc {
		return ic.check(ic.c.Prev())
	}
	return ic.check(ic.c.Next())
}

func (ic *indexCursor) check(k, v []byte) ([]byte, []byte) {
	if k == nil || !hasPrefix(k, ic.prefix) {
		return nil, nil
	}
	return k, v
}

// walkOrdered serves the sorts an index keeps (id, created_at,
// updated_at): it walks the driving index in order and stops after the
// page when the total is known from the counters.
func walkOrdered(ctx context.Context, tx *bbolt.Tx, p *listPlan, q *ListSpec) ([]uint64, int, error) {
	counts := tx.Bucket(bucketShareCounts)
	total, known := p.knownTotal(counts)
	if known && q.Offset >= total {
		return nil, total, nil
	}
	o := orderID
	switch q.Sort {
	case "created_at":
		o = orderCreated
	case "updated_at":
		o = orderUpdated
	}
	d, value := p.driving(counts)
	ic := newIndexCursor(tx, d, o, value, q.Desc)
	var ids []uint64
	matched := 0
	err := eachMatch(ctx, ic, p, d, func(m metaView) bool {
		if matched >= q.Offset && len(ids) < q.Limit {
			ids = append(ids, m.id())
		}
		matched++
		return !known || len(ids) < q.Limit
	})
	if err != nil {
		return nil, 0, err
	}
	if !known {
		total = matched
	}
	return ids, total, nil
}

// eachMatch walks ic and calls fn with every entry p matches, until fn
// returns false. It gives up when ctx ends, checking every walkCheckEvery
// entries.
func eachMatch(ctx context.Context, ic *indexCursor, p *listPlan, d dim, fn func(m metaView) bool) error {
	walked := 0
	for k, v := ic.first(); k != nil; k, v = ic.next() {
		if walked++; walked%walkCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		m := metaView(v)
		if !m.valid() {
			return errBadMeta
		}
		ok, err := p.match(m, d)
		if err != nil {
			return err
		}
		if ok && !fn(m) {
			return nil
		}
	}
	return nil
}

// sortItem is what an in-memory sort keeps of a match: its id and its
// value of the sort field.
type sortItem struct {
	id  uint64
	str string
	num int64
}

// sortInMemory serves the other sorts: it reads the matches of the
// driving dimension value (and nothing else) from the index, sorts them
// by the field with ties by id, and cuts the page.
func sortInMemory(ctx context.Context, tx *bbolt.Tx, p *listPlan, q *ListSpec) ([]uint64, int, error) {
	d, value := p.driving(tx.Bucket(bucketShareCounts))
	pending := q.Pending
	ic := newIndexCursor(tx, d, orderID, value, false)
	var items []sortItem
	err := eachMatch(ctx, ic, p, d, func(m metaView) bool {
		it := sortItem{id: m.id()}
		issue, project, creator, _ := m.strings()
		switch q.Sort {
		case "uuid":
			it.str = string(m.uuidBytes()) // raw bytes sort as the hex form does
		case "type":
			it.str = m.typeName()
		case "issue_id":
			it.str = string(issue)
		case "project_id":
			it.str = string(project)
		case "created_by":
			it.str = string(creator)
		case "expiration":
			it.num = m.expiration()
		case "opened_count":
			it.num = m.openedCount() + pending[it.id]
		}
		items = append(items, it)
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(items, func(a, b sortItem) int {
		c := cmp.Compare(a.str, b.str)
		if c == 0 {
			c = cmp.Compare(a.num, b.num)
		}
		if c == 0 {
			c = cmp.Compare(a.id, b.id)
		}
		if q.Desc {
			return -c
		}
		return c
	})
	total := len(items)
	if q.Offset >= total {
		return nil, total, nil
	}
	page := items[q.Offset:min(total, q.Offset+q.Limit)]
	ids := make([]uint64, len(page))
	for i, it := range page {
		ids[i] = it.id
	}
	return ids, total, nil
}

// activityKey orders a share's entries by time, then by the order they
// were written: id | timestamp | sequence.
func activityKey(id uint64, ts int64, seq uint64) []byte {
	k := make([]byte, 0, 24)
	k = append(k, u64(id)...)
	k = append(k, sortableInt(ts)...)
	return append(k, u64(seq)...)
}

// appendActivity stores one entry of share id.
func appendActivity(tx *bbolt.Tx, id uint64, a Activity) error {
	b := tx.Bucket(bucketShareActivity)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return b.Put(activityKey(id, a.Timestamp, seq), v)
}

// deleteActivity removes every entry of share id.
func deleteActivity(tx *bbolt.Tx, id uint64) error {
	c := tx.Bucket(bucketShareActivity).Cursor()
	prefix := u64(id)
	for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}
