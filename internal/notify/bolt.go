package notify

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
)

// Bucket layout. Everything lives under one top-level bucket so that the
// outbox never collides with the buckets of other packages:
//
//	notify_outbox/
//	  msg/  id                      -> JSON record (envelope, sealed body, attachment names and sizes, attempts)
//	  att/  id | index(2) | chunk(4) -> attachment bytes, at most attChunk per value before sealing
//	  due/  nextAttempt(8) | id     -> empty; the worker's schedule, earliest first
//	  ref/  ref | 0x00 | id         -> empty; finds the messages of a ref for DropRef
//
// id is the msg bucket's sequence as 8 big-endian bytes, so keys sort in
// enqueue order; nextAttempt is Unix nanoseconds, big-endian.
var (
	bucketRoot = []byte("notify_outbox")
	bucketMsg  = []byte("msg")
	bucketAtt  = []byte("att")
	bucketDue  = []byte("due")
	bucketRef  = []byte("ref")
)

// boltRecord is a message as stored in the msg bucket.
type boltRecord struct {
	Channel Channel `json:"channel"`
	To      string  `json:"to"`
	// Sealed is the sealed JSON of the body (Subject, Text, HTML); when it
	// is set, the attachment chunks are sealed too. Records from before
	// sealing have it empty and the body in the clear fields below.
	Sealed      []byte           `json:"sealed,omitempty"`
	Subject     string           `json:"subject,omitempty"`
	Text        string           `json:"text,omitempty"`
	HTML        string           `json:"html,omitempty"`
	Ref         string           `json:"ref,omitempty"`
	Attachments []AttachmentMeta `json:"attachments,omitempty"`
	Queued      time.Time        `json:"queued"`
	Attempts    int              `json:"attempts"`
	// Next is the Unix-nanosecond time of the next attempt, exactly as in
	// the due key, so the key can be found again.
	Next      int64  `json:"next"`
	LastError string `json:"lastError,omitempty"`
}

// boltBackend keeps the outbox in a bbolt file. One process owns the file,
// so Take needs no lease: the Outbox's single worker is the only taker.
type boltBackend struct{ db *boltdb.DB }

// NewBoltBackend creates the outbox buckets in db if needed.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	err := db.Bolt.Update(func(tx *bbolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bucketRoot)
		if err != nil {
			return err
		}
		for _, name := range [][]byte{bucketMsg, bucketAtt, bucketDue, bucketRef} {
			if _, err := root.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("notify: create outbox buckets: %w", err)
	}
	return boltBackend{db: db}, nil
}

// buckets are the outbox's sub-buckets within one transaction.
type buckets struct {
	msg, att, due, ref *bbolt.Bucket
}

func openBuckets(t storage.Tx) (buckets, error) {
	root := boltdb.Of(t).Bucket(bucketRoot)
	if root == nil {
		return buckets{}, ErrNoOutbox
	}
	b := buckets{msg: root.Bucket(bucketMsg), att: root.Bucket(bucketAtt), due: root.Bucket(bucketDue), ref: root.Bucket(bucketRef)}
	if b.msg == nil || b.att == nil || b.due == nil || b.ref == nil {
		return buckets{}, ErrNoOutbox
	}
	return b, nil
}

func (boltBackend) NewID(t storage.Tx) (uint64, error) {
	b, err := openBuckets(t)
	if err != nil {
		return 0, err
	}
	return b.msg.NextSequence()
}

func (boltBackend) Enqueue(t storage.Tx, r *Record, committed func()) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	rec := boltRecord{
		Channel: r.Channel, To: r.To, Sealed: r.Sealed, Subject: r.Subject, Text: r.Text, HTML: r.HTML,
		Ref: r.Ref, Attachments: r.Attachments, Queued: r.Queued, Attempts: r.Attempts,
		Next: time.Now().UnixNano(), LastError: r.LastError,
	}
	for i, chunks := range r.Chunks {
		for c, v := range chunks {
			if err := b.att.Put(attKey(r.ID, i, c), v); err != nil {
				return fmt.Errorf("attachment: %w", err)
			}
		}
	}
	if err := putRecord(b, r.ID, &rec); err != nil {
		return err
	}
	if err := b.due.Put(dueKey(rec.Next, r.ID), nil); err != nil {
		return err
	}
	if rec.Ref != "" {
		if err := b.ref.Put(refKey(rec.Ref, r.ID), nil); err != nil {
			return err
		}
	}
	if committed != nil {
		boltdb.Of(t).OnCommit(committed)
	}
	return nil
}

func (boltBackend) DropRef(t storage.Tx, ref string) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	prefix := append([]byte(ref), 0)
	var ids []uint64
	c := b.ref.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		if len(k) == len(prefix)+8 {
			ids = append(ids, binary.BigEndian.Uint64(k[len(prefix):]))
		}
	}
	for _, id := range ids {
		if err := remove(b, id); err != nil {
			return err
		}
	}
	return nil
}

// Take returns the earliest due message, in a read-only transaction: the
// one worker of the one process that opens the file is the only taker.
func (bb boltBackend) Take(ctx context.Context, _ string, _ time.Duration) (id uint64, next time.Time, err error) {
	err = bb.db.View(ctx, func(t storage.Tx) error {
		b, err := openBuckets(t)
		if err != nil {
			return err
		}
		now := time.Now().UnixNano()
		c := b.due.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) != 16 {
				continue
			}
			if at := int64(binary.BigEndian.Uint64(k[:8])); at > now {
				next = time.Unix(0, at)
			} else {
				id = binary.BigEndian.Uint64(k[8:])
			}
			return nil
		}
		return nil
	})
	return id, next, err
}

func (boltBackend) Load(t storage.Tx, id uint64) (*Record, error) {
	b, err := openBuckets(t)
	if err != nil {
		return nil, err
	}
	raw := b.msg.Get(idKey(id))
	if raw == nil {
		return nil, nil
	}
	var rec boltRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return &Record{ID: id}, fmt.Errorf("notify: message %d: %w: %w", id, ErrCorrupt, err)
	}
	r := &Record{
		ID: id, Channel: rec.Channel, To: rec.To, Ref: rec.Ref, Sealed: rec.Sealed,
		Subject: rec.Subject, Text: rec.Text, HTML: rec.HTML, Attachments: rec.Attachments,
		Queued: rec.Queued, Attempts: rec.Attempts, LastError: rec.LastError,
	}
	for i := range rec.Attachments {
		var chunks [][]byte
		prefix := attKey(id, i, 0)[:10]
		c := b.att.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			chunks = append(chunks, bytes.Clone(v))
		}
		r.Chunks = append(r.Chunks, chunks)
	}
	return r, nil
}

func (boltBackend) Reschedule(t storage.Tx, id uint64, _ string, delay time.Duration, lastErr string) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	raw := b.msg.Get(idKey(id))
	if raw == nil {
		return nil
	}
	var rec boltRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("notify: message %d: %w: %w", id, ErrCorrupt, err)
	}
	if err := b.due.Delete(dueKey(rec.Next, id)); err != nil {
		return err
	}
	rec.Attempts++
	rec.Next = time.Now().Add(delay).UnixNano()
	rec.LastError = lastErr
	if err := putRecord(b, id, &rec); err != nil {
		return err
	}
	return b.due.Put(dueKey(rec.Next, id), nil)
}

func (boltBackend) Delete(t storage.Tx, id uint64) error {
	b, err := openBuckets(t)
	if err != nil {
		return err
	}
	return remove(b, id)
}

// Watch returns at once: Enqueue reports every commit.
func (boltBackend) Watch(context.Context, func()) {}

// remove deletes a message and every index entry and chunk of it. A corrupt
// record is removed too; its index entries are then found by scanning.
func remove(b buckets, id uint64) error {
	key := idKey(id)
	raw := b.msg.Get(key)
	if raw == nil {
		return nil
	}
	var rec boltRecord
	if json.Unmarshal(raw, &rec) == nil {
		if err := b.due.Delete(dueKey(rec.Next, id)); err != nil {
			return err
		}
		if rec.Ref != "" {
			if err := b.ref.Delete(refKey(rec.Ref, id)); err != nil {
				return err
			}
		}
	} else {
		// Only a corrupt record, whose index keys are unknown, needs the
		// whole buckets scanned.
		if err := boltdb.DeleteWhere(b.due, func(k []byte) bool { return len(k) == 16 && bytes.Equal(k[8:], key) }); err != nil {
			return err
		}
		if err := boltdb.DeleteWhere(b.ref, func(k []byte) bool { return bytes.HasSuffix(k, append([]byte{0}, key...)) }); err != nil {
			return err
		}
	}
	if err := boltdb.DeletePrefix(b.att, key); err != nil {
		return err
	}
	return b.msg.Delete(key)
}

func putRecord(b buckets, id uint64, rec *boltRecord) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("notify: encode message: %w", err)
	}
	if err := b.msg.Put(idKey(id), raw); err != nil {
		return fmt.Errorf("notify: store message: %w", err)
	}
	return nil
}

func dueKey(at int64, id uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(at)), id)
}

func refKey(ref string, id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(ref), 0), id)
}
