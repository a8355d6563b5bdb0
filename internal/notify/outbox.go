package notify

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/seal"
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
//
// Bodies carry one-time passwords and signing links, and attachments carry
// signed contracts, so both are sealed under the master key (AES-256-GCM)
// and opened only by the worker on their way out: a copy of the database
// file alone reveals neither. The body is bound to its id and each chunk to
// its key, so nothing sealed can be moved to another message. Records
// written before sealing (no "sealed" field) hold them in clear and are
// delivered as they are.
var (
	bucketRoot = []byte("notify_outbox")
	bucketMsg  = []byte("msg")
	bucketAtt  = []byte("att")
	bucketDue  = []byte("due")
	bucketRef  = []byte("ref")
)

// attChunk bounds each attachment value: a finalized contract of several
// megabytes becomes several moderate values instead of one that needs a
// long run of free contiguous pages in the database file.
const attChunk = 256 << 10

// ErrNoOutbox means the transaction's database was never prepared with
// NewOutbox.
var ErrNoOutbox = errors.New("notify: outbox buckets missing (NewOutbox not called on this database)")

// Outbox is the durable queue of notifications in a bbolt database. It is
// safe for concurrent use.
type Outbox struct {
	db     *bbolt.DB
	sealer *seal.Sealer
	// wake is signalled after a transaction that enqueued commits.
	wake chan struct{}
	// running is held by the one Worker that may deliver from this outbox,
	// so that two workers never send the same message.
	running atomic.Bool
}

// record is a message as stored.
type record struct {
	Channel Channel `json:"channel"`
	To      string  `json:"to"`
	// Sealed is the sealed JSON of the body (Subject, Text, HTML); when it
	// is set, the attachment chunks are sealed too. Records from before
	// sealing have it empty and the body in the clear fields below.
	Sealed      []byte    `json:"sealed,omitempty"`
	Subject     string    `json:"subject,omitempty"`
	Text        string    `json:"text,omitempty"`
	HTML        string    `json:"html,omitempty"`
	Ref         string    `json:"ref,omitempty"`
	Attachments []attMeta `json:"attachments,omitempty"`
	Queued      time.Time `json:"queued"`
	Attempts    int       `json:"attempts"`
	// Next is the Unix-nanosecond time of the next attempt, exactly as in
	// the due key, so the key can be found again.
	Next      int64  `json:"next"`
	LastError string `json:"lastError,omitempty"`
}

// body is the sealed part of a record.
type body struct {
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text,omitempty"`
	HTML    string `json:"html,omitempty"`
}

type attMeta struct {
	Name      string `json:"name"`
	MediaType string `json:"mediaType"`
	// Size is the attachment's size before sealing.
	Size int `json:"size"`
}

// errUnsealable is a message whose sealed parts do not open: the master key
// is not the one it was sealed with. The worker retries it like a failed
// send, so that a restart with the right key within the retry window still
// delivers it.
var errUnsealable = errors.New("sealed message does not open with this master key")

// NewOutbox creates the outbox buckets in db if needed. sealer (of the
// master key) seals what is queued.
func NewOutbox(db *bbolt.DB, sealer *seal.Sealer) (*Outbox, error) {
	if sealer == nil {
		return nil, errors.New("notify: NewOutbox needs a sealer")
	}
	err := db.Update(func(tx *bbolt.Tx) error {
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
	return &Outbox{db: db, sealer: sealer, wake: make(chan struct{}, 1)}, nil
}

// buckets are the outbox's sub-buckets within one transaction.
type buckets struct {
	msg, att, due, ref *bbolt.Bucket
}

func open(tx *bbolt.Tx) (buckets, error) {
	root := tx.Bucket(bucketRoot)
	if root == nil {
		return buckets{}, ErrNoOutbox
	}
	b := buckets{msg: root.Bucket(bucketMsg), att: root.Bucket(bucketAtt), due: root.Bucket(bucketDue), ref: root.Bucket(bucketRef)}
	if b.msg == nil || b.att == nil || b.due == nil || b.ref == nil {
		return buckets{}, ErrNoOutbox
	}
	return b, nil
}

// Enqueue stores m in the caller's write transaction, due at once. It
// becomes visible to the worker, which is woken, only when tx commits; if
// tx rolls back, the message never existed.
func (o *Outbox) Enqueue(tx *bbolt.Tx, m Message) error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("notify: invalid message: %w", err)
	}
	b, err := open(tx)
	if err != nil {
		return err
	}
	id, err := b.msg.NextSequence()
	if err != nil {
		return fmt.Errorf("notify: enqueue: %w", err)
	}
	plain, err := json.Marshal(body{Subject: m.Subject, Text: m.Text, HTML: m.HTML})
	if err != nil {
		return fmt.Errorf("notify: encode message: %w", err)
	}
	now := time.Now().UTC()
	rec := record{
		Channel: m.Channel, To: m.To, Sealed: o.sealer.Seal(plain, sealAAD(idKey(id))),
		Ref: m.Ref, Queued: now, Next: now.UnixNano(),
	}
	for i, a := range m.Attachments {
		rec.Attachments = append(rec.Attachments, attMeta{Name: a.Name, MediaType: a.MediaType, Size: len(a.Data)})
		for c, off := 0, 0; off < len(a.Data); c, off = c+1, off+attChunk {
			end := min(off+attChunk, len(a.Data))
			k := attKey(id, i, c)
			if err := b.att.Put(k, o.sealer.Seal(a.Data[off:end], sealAAD(k))); err != nil {
				return fmt.Errorf("notify: enqueue attachment: %w", err)
			}
		}
	}
	if err := putRecord(b, id, &rec); err != nil {
		return err
	}
	if err := b.due.Put(dueKey(rec.Next, id), nil); err != nil {
		return fmt.Errorf("notify: enqueue: %w", err)
	}
	if rec.Ref != "" {
		if err := b.ref.Put(refKey(rec.Ref, id), nil); err != nil {
			return fmt.Errorf("notify: enqueue: %w", err)
		}
	}
	tx.OnCommit(o.signal)
	return nil
}

// DropRef removes, in the caller's write transaction, every message still
// waiting for delivery whose Ref is ref. A message being sent at that moment
// may still arrive.
func (o *Outbox) DropRef(tx *bbolt.Tx, ref string) error {
	if ref == "" {
		return nil
	}
	b, err := open(tx)
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

// signal wakes the worker without blocking; one pending wake-up is enough.
func (o *Outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// due returns up to limit ids whose attempt time is not after now, earliest
// first, and the time of the earliest attempt after those (zero if none).
func due(tx *bbolt.Tx, now time.Time, limit int) (ids []uint64, next time.Time, err error) {
	b, err := open(tx)
	if err != nil {
		return nil, time.Time{}, err
	}
	c := b.due.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) != 16 {
			continue
		}
		at := int64(binary.BigEndian.Uint64(k[:8]))
		if at > now.UnixNano() || len(ids) == limit {
			return ids, time.Unix(0, at), nil
		}
		ids = append(ids, binary.BigEndian.Uint64(k[8:]))
	}
	return ids, time.Time{}, nil
}

// load reads message id with its attachments, opened and copied out of the
// transaction. ok is false when the message no longer exists; err wraps
// errUnsealable when its sealed parts do not open.
func (o *Outbox) load(tx *bbolt.Tx, id uint64) (m Message, rec record, ok bool, err error) {
	b, err := open(tx)
	if err != nil {
		return m, rec, false, err
	}
	raw := b.msg.Get(idKey(id))
	if raw == nil {
		return m, rec, false, nil
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		return m, rec, true, fmt.Errorf("notify: message %d is corrupt: %w", id, err)
	}
	m = Message{
		Channel: rec.Channel, To: rec.To, Subject: rec.Subject, Text: rec.Text, HTML: rec.HTML,
		Ref: rec.Ref, ID: id, Queued: rec.Queued,
	}
	sealed := rec.Sealed != nil
	if sealed {
		plain, err := o.sealer.Open(rec.Sealed, sealAAD(idKey(id)))
		if err != nil {
			return m, rec, true, fmt.Errorf("notify: message %d: %w", id, errUnsealable)
		}
		var bd body
		if err := json.Unmarshal(plain, &bd); err != nil {
			return m, rec, true, fmt.Errorf("notify: message %d is corrupt: %w", id, err)
		}
		m.Subject, m.Text, m.HTML = bd.Subject, bd.Text, bd.HTML
	}
	for i, a := range rec.Attachments {
		data := make([]byte, 0, a.Size)
		prefix := attKey(id, i, 0)[:10]
		c := b.att.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if !sealed {
				data = append(data, v...)
				continue
			}
			chunk, err := o.sealer.Open(v, sealAAD(k))
			if err != nil {
				return m, rec, true, fmt.Errorf("notify: message %d: attachment %d: %w", id, i, errUnsealable)
			}
			data = append(data, chunk...)
		}
		if len(data) != a.Size {
			return m, rec, true, fmt.Errorf("notify: message %d: attachment %d has %d of %d bytes", id, i, len(data), a.Size)
		}
		m.Attachments = append(m.Attachments, Attachment{Name: a.Name, MediaType: a.MediaType, Data: data})
	}
	return m, rec, true, nil
}

// reschedule records a failed attempt of message id and moves it to next.
// It does nothing if the message was dropped meanwhile.
func reschedule(tx *bbolt.Tx, id uint64, next time.Time, lastErr string) error {
	b, err := open(tx)
	if err != nil {
		return err
	}
	raw := b.msg.Get(idKey(id))
	if raw == nil {
		return nil
	}
	var rec record
	if err := json.Unmarshal(raw, &rec); err != nil {
		return fmt.Errorf("notify: message %d is corrupt: %w", id, err)
	}
	if err := b.due.Delete(dueKey(rec.Next, id)); err != nil {
		return err
	}
	rec.Attempts++
	rec.Next = next.UnixNano()
	rec.LastError = lastErr
	if err := putRecord(b, id, &rec); err != nil {
		return err
	}
	return b.due.Put(dueKey(rec.Next, id), nil)
}

// deleteMessage removes message id after delivery or when it is given up.
func deleteMessage(tx *bbolt.Tx, id uint64) error {
	b, err := open(tx)
	if err != nil {
		return err
	}
	return remove(b, id)
}

// remove deletes a message and every index entry and chunk of it. A corrupt
// record is removed too; its index entries are then found by scanning.
func remove(b buckets, id uint64) error {
	key := idKey(id)
	raw := b.msg.Get(key)
	if raw == nil {
		return nil
	}
	var rec record
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
		if err := deleteWhere(b.due, func(k []byte) bool { return len(k) == 16 && bytes.Equal(k[8:], key) }); err != nil {
			return err
		}
		if err := deleteWhere(b.ref, func(k []byte) bool { return bytes.HasSuffix(k, append([]byte{0}, key...)) }); err != nil {
			return err
		}
	}
	if err := deletePrefix(b.att, key); err != nil {
		return err
	}
	return b.msg.Delete(key)
}

// deletePrefix deletes the keys of bkt that start with prefix.
func deletePrefix(bkt *bbolt.Bucket, prefix []byte) error {
	var keys [][]byte
	c := bkt.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := bkt.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteWhere deletes the keys of bkt that match, scanning the whole
// bucket; only a corrupt record, whose index keys are unknown, needs it.
func deleteWhere(bkt *bbolt.Bucket, match func(k []byte) bool) error {
	var keys [][]byte
	if err := bkt.ForEach(func(k, _ []byte) error {
		if match(k) {
			keys = append(keys, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return err
	}
	for _, k := range keys {
		if err := bkt.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

func putRecord(b buckets, id uint64, rec *record) error {
	raw, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("notify: encode message: %w", err)
	}
	if err := b.msg.Put(idKey(id), raw); err != nil {
		return fmt.Errorf("notify: store message: %w", err)
	}
	return nil
}

// sealAAD binds a sealed value to its key in the outbox; the prefix keeps it
// apart from the other values sealed under the master key (tokens, links).
func sealAAD(key []byte) []byte {
	return append([]byte("notify_outbox\x00"), key...)
}

func idKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, id)
}

func dueKey(at int64, id uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(at)), id)
}

func refKey(ref string, id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(ref), 0), id)
}

func attKey(id uint64, index, chunk int) []byte {
	k := binary.BigEndian.AppendUint64(nil, id)
	k = binary.BigEndian.AppendUint16(k, uint16(index))
	return binary.BigEndian.AppendUint32(k, uint32(chunk))
}
