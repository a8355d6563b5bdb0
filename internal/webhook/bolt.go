package webhook

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
)

// Bucket layout, under one top-level bucket:
//
//	webhooks/
//	  sub/   id                   -> JSON subscription (secrets sealed)
//	  ev/    seq(8)               -> event (encodeEvent); the outbox, oldest first
//	  dlv/   id(8)                -> JSON delivery
//	  due/   next(8) | id(8)      -> subscription id; the schedule, earliest first
//	  bysub/ subID | 0x00 | id(8) -> empty; a subscription's deliveries
//	  log/   subID/ seq(8)        -> JSON attempt; one bucket per subscription
//
// seq and id are their bucket's sequence, big-endian, so keys sort in the
// order written; next is Unix nanoseconds, big-endian.
var (
	bucketRoot  = []byte("webhooks")
	bucketSub   = []byte("sub")
	bucketEv    = []byte("ev")
	bucketDlv   = []byte("dlv")
	bucketDue   = []byte("due")
	bucketBySub = []byte("bysub")
	bucketLog   = []byte("log")
)

// ErrNoBuckets means the transaction's database was never prepared with
// NewBoltBackend.
var ErrNoBuckets = errors.New("webhook: buckets missing (NewBoltBackend not called on this database)")

// boltSub is a subscription as stored.
type boltSub struct {
	Subscription
	SealedSecret   []byte    `json:"sealedSecret"`
	SealedPrevious []byte    `json:"sealedPrevious,omitempty"`
	PreviousExpiry time.Time `json:"previousExpiry,omitzero"`
}

// An event is stored as at(8, Unix nanoseconds) | len(type)(2) | type |
// len(owner)(2) | owner | data: no encoding pass over the data, which Emit
// has checked already, on the create path.
func encodeEvent(e *EventRecord) []byte {
	v := make([]byte, 0, 12+len(e.Type)+len(e.Owner)+len(e.Data))
	v = binary.BigEndian.AppendUint64(v, uint64(e.At.UnixNano()))
	v = binary.BigEndian.AppendUint16(v, uint16(len(e.Type)))
	v = append(v, e.Type...)
	v = binary.BigEndian.AppendUint16(v, uint16(len(e.Owner)))
	v = append(v, e.Owner...)
	return append(v, e.Data...)
}

// errBadEvent is a stored event that does not decode.
var errBadEvent = errors.New("webhook: stored event does not decode")

// decodeEvent reverses encodeEvent; Data is a copy.
func decodeEvent(v []byte) (EventRecord, error) {
	var e EventRecord
	if len(v) < 10 {
		return e, errBadEvent
	}
	e.At = time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC()
	v = v[8:]
	n := int(binary.BigEndian.Uint16(v))
	if len(v) < 2+n+2 {
		return e, errBadEvent
	}
	e.Type, v = string(v[2:2+n]), v[2+n:]
	n = int(binary.BigEndian.Uint16(v))
	if len(v) < 2+n {
		return e, errBadEvent
	}
	e.Owner, v = string(v[2:2+n]), v[2+n:]
	if len(v) > 0 {
		e.Data = bytes.Clone(v)
	}
	return e, nil
}

// boltDelivery is a delivery as stored.
type boltDelivery struct {
	SubscriptionID string    `json:"subscriptionId"`
	MessageID      string    `json:"messageId"`
	Event          string    `json:"event"`
	Body           []byte    `json:"body"`
	EventAt        time.Time `json:"eventAt"`
	Attempts       int       `json:"attempts"`
	// Next is the Unix-nanosecond time of the next attempt, as in the due
	// key, so the key can be found again.
	Next int64 `json:"next"`
}

// boltBackend keeps the webhooks in a bbolt file. One process owns the
// file, so TakeDelivery needs no lease: the one worker is the only taker.
type boltBackend struct{ db *boltdb.DB }

// NewBoltBackend creates the buckets in db if needed.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	err := db.Bolt.Update(func(tx *bbolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bucketRoot)
		if err != nil {
			return err
		}
		for _, name := range [][]byte{bucketSub, bucketEv, bucketDlv, bucketDue, bucketBySub, bucketLog} {
			if _, err := root.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("webhook: create buckets: %w", err)
	}
	return boltBackend{db: db}, nil
}

type buckets struct{ sub, ev, dlv, due, bySub, log *bbolt.Bucket }

func openBuckets(t storage.Tx) (buckets, error) {
	root := boltdb.Of(t).Bucket(bucketRoot)
	if root == nil {
		return buckets{}, ErrNoBuckets
	}
	b := buckets{sub: root.Bucket(bucketSub), ev: root.Bucket(bucketEv), dlv: root.Bucket(bucketDlv),
		due: root.Bucket(bucketDue), bySub: root.Bucket(bucketBySub), log: root.Bucket(bucketLog)}
	if b.sub == nil || b.ev == nil || b.dlv == nil || b.due == nil || b.bySub == nil || b.log == nil {
		return buckets{}, ErrNoBuckets
	}
	return b, nil
}

func (boltBackend) PutSubscription(t storage.Tx, r *Record) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(boltSub{Subscription: r.Subscription, SealedSecret: r.SealedSecret,
		SealedPrevious: r.SealedPrevious, PreviousExpiry: r.PreviousExpiry})
	if err != nil {
		return err
	}
	return b.sub.Put([]byte(r.ID), raw)
}

func decodeSub(raw []byte) (*Record, error) {
	var s boltSub
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("webhook: stored subscription does not decode: %w", err)
	}
	s.Subscription.Secret = ""
	if s.Events == nil {
		s.Events = []string{}
	}
	if s.Owners == nil {
		s.Owners = []string{}
	}
	return &Record{Subscription: s.Subscription, SealedSecret: s.SealedSecret,
		SealedPrevious: s.SealedPrevious, PreviousExpiry: s.PreviousExpiry}, nil
}

func (boltBackend) GetSubscription(t storage.Tx, id string) (*Record, error) {
	b, err := openBuckets(t)
	if err != nil {
		return nil, err
	}
	raw := b.sub.Get([]byte(id))
	if raw == nil {
		return nil, nil
	}
	return decodeSub(raw)
}

func (boltBackend) ListSubscriptions(t storage.Tx) ([]*Record, error) {
	b, err := openBuckets(t)
	if err != nil {
		return nil, err
	}
	var out []*Record
	err = b.sub.ForEach(func(_, v []byte) error {
		r, err := decodeSub(v)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	sortRecords(out)
	return out, err
}

func (bb boltBackend) DeleteSubscription(t storage.Tx, id string) (bool, error) {
	b, err := openBuckets(t)
	if err != nil {
		return false, err
	}
	if b.sub.Get([]byte(id)) == nil {
		return false, nil
	}
	if err := bb.DropDeliveries(t, id); err != nil {
		return false, err
	}
	if b.log.Bucket([]byte(id)) != nil {
		if err := b.log.DeleteBucket([]byte(id)); err != nil {
			return false, err
		}
	}
	return true, b.sub.Delete([]byte(id))
}

func (boltBackend) DropDeliveries(t storage.Tx, id string) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	prefix := append([]byte(id), 0)
	var ids []uint64
	c := b.bySub.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) == len(prefix)+8 {
			ids = append(ids, binary.BigEndian.Uint64(k[len(prefix):]))
		}
	}
	for _, d := range ids {
		if err := removeDelivery(b, d); err != nil {
			return err
		}
	}
	return nil
}

func (boltBackend) AddEvent(t storage.Tx, e *EventRecord, committed func()) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	seq, err := b.ev.NextSequence()
	if err != nil {
		return err
	}
	if err := b.ev.Put(u64(seq), encodeEvent(e)); err != nil {
		return err
	}
	if committed != nil {
		boltdb.Of(t).OnCommit(committed)
	}
	return nil
}

func (boltBackend) TakeEvents(t storage.Tx, limit int) ([]EventRecord, error) {
	b, err := openBuckets(t)
	if err != nil {
		return nil, err
	}
	var out []EventRecord
	var keys [][]byte
	c := b.ev.Cursor()
	for k, v := c.First(); k != nil && len(out) < limit; k, v = c.Next() {
		keys = append(keys, bytes.Clone(k))
		e, err := decodeEvent(v)
		if len(k) != 8 || err != nil {
			continue // unreadable: dropped, it cannot be delivered
		}
		e.Seq = binary.BigEndian.Uint64(k)
		out = append(out, e)
	}
	for _, k := range keys {
		if err := b.ev.Delete(k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (boltBackend) AddDelivery(t storage.Tx, d *Delivery, committed func()) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	id, err := b.dlv.NextSequence()
	if err != nil {
		return err
	}
	d.ID = id
	rec := boltDelivery{SubscriptionID: d.SubscriptionID, MessageID: d.MessageID, Event: d.Event, Body: d.Body,
		EventAt: d.EventAt, Attempts: d.Attempts, Next: time.Now().UnixNano()}
	if err := putDelivery(b, id, &rec); err != nil {
		return err
	}
	if err := b.bySub.Put(bySubKey(d.SubscriptionID, id), nil); err != nil {
		return err
	}
	if committed != nil {
		boltdb.Of(t).OnCommit(committed)
	}
	return nil
}

// TakeDelivery returns the earliest due delivery not skipped, in a
// read-only transaction: the one worker of the one process that opens
// the file is the only taker.
func (bb boltBackend) TakeDelivery(ctx context.Context, _ string, _ time.Duration, skipSubs []string, skipIDs []uint64) (d *Delivery, next time.Time, err error) {
	err = bb.db.View(ctx, func(t storage.Tx) error {
		b, err := openBuckets(t)
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		c := b.due.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if len(k) != 16 {
				continue
			}
			id := binary.BigEndian.Uint64(k[8:])
			if slices.Contains(skipIDs, id) || slices.Contains(skipSubs, string(v)) {
				continue
			}
			if at := int64(binary.BigEndian.Uint64(k[:8])); at > now {
				next = time.Unix(0, at)
				return nil
			}
			d, err = getDelivery(b, id)
			if err != nil || d != nil {
				return err
			}
		}
		return nil
	})
	return d, next, err
}

// loadDelivery decodes delivery id as stored; nil if there is none.
func loadDelivery(b buckets, id uint64) (*boltDelivery, error) {
	raw := b.dlv.Get(u64(id))
	if raw == nil {
		return nil, nil
	}
	rec := new(boltDelivery)
	if err := json.Unmarshal(raw, rec); err != nil {
		return nil, fmt.Errorf("webhook: delivery %d does not decode: %w", id, err)
	}
	return rec, nil
}

func getDelivery(b buckets, id uint64) (*Delivery, error) {
	rec, err := loadDelivery(b, id)
	if rec == nil || err != nil {
		return nil, err
	}
	return &Delivery{ID: id, SubscriptionID: rec.SubscriptionID, MessageID: rec.MessageID, Event: rec.Event,
		Body: rec.Body, EventAt: rec.EventAt, Attempts: rec.Attempts}, nil
}

func (boltBackend) GetDelivery(t storage.Tx, id uint64) (*Delivery, error) {
	b, err := openBuckets(t)
	if err != nil {
		return nil, err
	}
	return getDelivery(b, id)
}

func (boltBackend) RescheduleDelivery(t storage.Tx, id uint64, _ string, delay time.Duration) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	rec, err := loadDelivery(b, id)
	if rec == nil || err != nil {
		return err
	}
	if err := b.due.Delete(dueKey(rec.Next, id)); err != nil {
		return err
	}
	rec.Attempts++
	rec.Next = time.Now().Add(delay).UnixNano()
	return putDelivery(b, id, rec)
}

func (boltBackend) DeleteDelivery(t storage.Tx, id uint64) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	return removeDelivery(b, id)
}

func (boltBackend) AddAttempt(t storage.Tx, id string, a *Attempt, keep int) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	if b.sub.Get([]byte(id)) == nil {
		return nil // deleted while the attempt was made
	}
	lb, err := b.log.CreateBucketIfNotExists([]byte(id))
	if err != nil {
		return err
	}
	seq, err := lb.NextSequence()
	if err != nil {
		return err
	}
	raw, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := lb.Put(u64(seq), raw); err != nil {
		return err
	}
	// Sequence numbers of a log are consecutive and only its oldest are
	// deleted, so the first key tells how many it holds.
	c := lb.Cursor()
	for k, _ := c.First(); k != nil && len(k) == 8 && seq-binary.BigEndian.Uint64(k) >= uint64(keep); k, _ = c.First() {
		if err := lb.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func (boltBackend) Attempts(t storage.Tx, id string, limit, offset int) ([]Attempt, error) {
	b, err := openBuckets(t)
	if err != nil {
		return nil, err
	}
	lb := b.log.Bucket([]byte(id))
	out := []Attempt{}
	if lb == nil {
		return out, nil
	}
	c := lb.Cursor()
	skipped := 0
	for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
		if skipped < offset {
			skipped++
			continue
		}
		var a Attempt
		if err := json.Unmarshal(v, &a); err != nil {
			return nil, fmt.Errorf("webhook: log entry does not decode: %w", err)
		}
		out = append(out, a)
	}
	return out, nil
}

// Watch returns at once: every commit is reported through committed.
func (boltBackend) Watch(context.Context, func()) {}

func putDelivery(b buckets, id uint64, rec *boltDelivery) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := b.dlv.Put(u64(id), raw); err != nil {
		return err
	}
	return b.due.Put(dueKey(rec.Next, id), []byte(rec.SubscriptionID))
}

// removeDelivery deletes a delivery and its index entries.
func removeDelivery(b buckets, id uint64) error {
	rec, err := loadDelivery(b, id)
	if rec == nil || err != nil {
		return err
	}
	if err := b.due.Delete(dueKey(rec.Next, id)); err != nil {
		return err
	}
	if err := b.bySub.Delete(bySubKey(rec.SubscriptionID, id)); err != nil {
		return err
	}
	return b.dlv.Delete(u64(id))
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func dueKey(at int64, id uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(at)), id)
}

func bySubKey(sub string, id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(sub), 0), id)
}
