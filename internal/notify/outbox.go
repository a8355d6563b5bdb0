package notify

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
)

// Backend is what the outbox needs of a database: a queue of sealed
// messages. Enqueue and DropRef run in the caller's transaction, so that a
// change and its notifications commit together; the worker's calls run in
// short transactions of their own, and never while a message is being
// sent. Implementations: NewBoltBackend (bolt.go), NewPostgresBackend
// (postgres.go).
type Backend interface {
	// NewID allocates the id of a message about to be enqueued in tx. Ids
	// are never reused and grow in enqueue order (on PostgreSQL roughly:
	// an instance takes them from the sequence in blocks).
	NewID(tx storage.Tx) (uint64, error)
	// Enqueue stores r (its ID from NewID, body and chunks sealed), due at
	// once. committed, if the backend can, is called once tx has
	// committed; otherwise Watch reports the commit.
	Enqueue(tx storage.Tx, r *Record, committed func()) error
	// DropRef deletes every message whose Ref is ref.
	DropRef(tx storage.Tx, ref string) error
	// Take claims the earliest due message for holder until lease has
	// passed: until then no other holder takes it, and after it, if the
	// message is still there (its holder died), anyone may. It returns the
	// message's id, or 0 when none is due, with the time at which the
	// earliest other message falls due (zero if none). It runs in a
	// transaction of its own: a backend serving one process only may
	// ignore holder and lease and read without writing (no commit, no
	// disk sync per pass of the worker).
	Take(ctx context.Context, holder string, lease time.Duration) (id uint64, next time.Time, err error)
	// Load reads message id as stored; nil, nil when it no longer exists.
	// An error wrapping ErrCorrupt means the message exists but cannot be
	// read; the record then holds what could be (its ID at least).
	Load(tx storage.Tx, id uint64) (*Record, error)
	// Reschedule records a failed attempt of message id by holder, with
	// its error, and makes it due again after delay, releasing the lease.
	// It does nothing if the message is gone or another holder has taken
	// it since.
	Reschedule(tx storage.Tx, id uint64, holder string, delay time.Duration, lastErr string) error
	// Delete removes message id with everything stored for it (delivered,
	// given up or unreadable). A missing message is no error.
	Delete(tx storage.Tx, id uint64) error
	// Watch calls wake whenever messages may have been enqueued by a
	// commit that Enqueue could not report itself (another process), until
	// ctx ends. A backend that reports every commit returns at once.
	Watch(ctx context.Context, wake func())
}

// Record is a message as a Backend stores it. Subject and bodies are
// sealed in Sealed, attachment data in Chunks; records written before
// sealing (bbolt files of older versions) have Sealed nil and hold both in
// clear.
type Record struct {
	ID      uint64
	Channel Channel
	To      string
	Ref     string
	// Sealed is the sealed JSON of the body (subject, text, HTML), bound
	// to the message's id.
	Sealed []byte
	// Subject, Text and HTML are the body of a record from before sealing.
	Subject, Text, HTML string
	Attachments         []AttachmentMeta
	// Chunks holds each attachment's data as stored, in chunks of at most
	// attChunk bytes before sealing: Chunks[i][c] is chunk c of attachment
	// i, sealed (when Sealed is set) and bound to its (id, i, c).
	Chunks    [][][]byte
	Queued    time.Time
	Attempts  int
	LastError string
}

// AttachmentMeta describes a stored attachment.
type AttachmentMeta struct {
	Name      string `json:"name"`
	MediaType string `json:"mediaType"`
	// Size is the attachment's size before sealing.
	Size int `json:"size"`
}

// Bodies carry one-time passwords and signing links, and attachments carry
// signed contracts, so both are sealed under the master key (AES-256-GCM)
// and opened only by the worker on their way out: a copy of the database
// alone reveals neither. The body is bound to its id and each chunk to
// its (id, attachment, chunk), so nothing sealed can be moved to another
// message. Records written before sealing hold them in clear and are
// delivered as they are.

// attChunk bounds each attachment value: a finalized contract of several
// megabytes becomes several moderate values instead of one that needs a
// long run of free contiguous pages in the database file.
const attChunk = 256 << 10

// ErrNoOutbox means the transaction's database was never prepared with
// NewBoltBackend.
var ErrNoOutbox = errors.New("notify: outbox buckets missing (NewBoltBackend not called on this database)")

// ErrCorrupt marks a stored message that cannot be read.
var ErrCorrupt = errors.New("notify: stored message is corrupt")

// Outbox is the durable queue of notifications. It is safe for concurrent
// use. Several Outboxes (of several processes) may share one database
// whose Backend leases what it takes.
type Outbox struct {
	db      storage.DB
	backend Backend
	sealer  *seal.Sealer
	// holder names this outbox in the leases it takes.
	holder string
	// wake is signalled after a transaction that enqueued commits.
	wake chan struct{}
	// running is held by the one Worker that may deliver from this outbox,
	// so that two workers never send the same message.
	running atomic.Bool
}

// body is the sealed part of a record.
type body struct {
	Subject string `json:"subject,omitempty"`
	Text    string `json:"text,omitempty"`
	HTML    string `json:"html,omitempty"`
}

// errUnsealable is a message whose sealed parts do not open: the master key
// is not the one it was sealed with. The worker retries it like a failed
// send, so that a restart with the right key within the retry window still
// delivers it.
var errUnsealable = errors.New("sealed message does not open with this master key")

// NewOutbox returns the outbox kept by backend in db. sealer (of the
// master key) seals what is queued.
func NewOutbox(db storage.DB, backend Backend, sealer *seal.Sealer) (*Outbox, error) {
	if sealer == nil {
		return nil, errors.New("notify: NewOutbox needs a sealer")
	}
	if db == nil || backend == nil {
		return nil, errors.New("notify: NewOutbox needs a database and its backend")
	}
	var h [16]byte
	if _, err := rand.Read(h[:]); err != nil {
		return nil, err
	}
	return &Outbox{db: db, backend: backend, sealer: sealer, holder: hex.EncodeToString(h[:]), wake: make(chan struct{}, 1)}, nil
}

// Enqueue stores m in the caller's write transaction, due at once. It
// becomes visible to the worker, which is woken, only when tx commits; if
// tx rolls back, the message never existed.
func (o *Outbox) Enqueue(tx storage.Tx, m Message) error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("notify: invalid message: %w", err)
	}
	id, err := o.backend.NewID(tx)
	if err != nil {
		return fmt.Errorf("notify: enqueue: %w", err)
	}
	plain, err := json.Marshal(body{Subject: m.Subject, Text: m.Text, HTML: m.HTML})
	if err != nil {
		return fmt.Errorf("notify: encode message: %w", err)
	}
	r := &Record{
		ID: id, Channel: m.Channel, To: m.To, Ref: m.Ref,
		Sealed: o.sealer.Seal(plain, sealAAD(idKey(id))), Queued: time.Now().UTC(),
	}
	for i, a := range m.Attachments {
		r.Attachments = append(r.Attachments, AttachmentMeta{Name: a.Name, MediaType: a.MediaType, Size: len(a.Data)})
		var chunks [][]byte
		for c, off := 0, 0; off < len(a.Data); c, off = c+1, off+attChunk {
			end := min(off+attChunk, len(a.Data))
			chunks = append(chunks, o.sealer.Seal(a.Data[off:end], sealAAD(attKey(id, i, c))))
		}
		r.Chunks = append(r.Chunks, chunks)
	}
	if err := o.backend.Enqueue(tx, r, o.signal); err != nil {
		return fmt.Errorf("notify: enqueue: %w", err)
	}
	return nil
}

// DropRef removes, in the caller's write transaction, every message still
// waiting for delivery whose Ref is ref. A message being sent at that moment
// may still arrive.
func (o *Outbox) DropRef(tx storage.Tx, ref string) error {
	if ref == "" {
		return nil
	}
	return o.backend.DropRef(tx, ref)
}

// signal wakes the worker without blocking; one pending wake-up is enough.
func (o *Outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// open turns a stored record into the message to send, opening what is
// sealed; err wraps errUnsealable when that does not open with this
// master key, ErrCorrupt when the record is damaged.
func (o *Outbox) open(r *Record) (Message, error) {
	m := Message{
		Channel: r.Channel, To: r.To, Subject: r.Subject, Text: r.Text, HTML: r.HTML,
		Ref: r.Ref, ID: r.ID, Queued: r.Queued,
	}
	sealed := r.Sealed != nil
	if sealed {
		plain, err := o.sealer.Open(r.Sealed, sealAAD(idKey(r.ID)))
		if err != nil {
			return m, fmt.Errorf("notify: message %d: %w", r.ID, errUnsealable)
		}
		var bd body
		if err := json.Unmarshal(plain, &bd); err != nil {
			return m, fmt.Errorf("notify: message %d: %w: %w", r.ID, ErrCorrupt, err)
		}
		m.Subject, m.Text, m.HTML = bd.Subject, bd.Text, bd.HTML
	}
	for i, a := range r.Attachments {
		data := make([]byte, 0, a.Size)
		var chunks [][]byte
		if i < len(r.Chunks) {
			chunks = r.Chunks[i]
		}
		for c, v := range chunks {
			if !sealed {
				data = append(data, v...)
				continue
			}
			chunk, err := o.sealer.Open(v, sealAAD(attKey(r.ID, i, c)))
			if err != nil {
				return m, fmt.Errorf("notify: message %d: attachment %d: %w", r.ID, i, errUnsealable)
			}
			data = append(data, chunk...)
		}
		if len(data) != a.Size {
			return m, fmt.Errorf("notify: message %d: attachment %d has %d of %d bytes: %w", r.ID, i, len(data), a.Size, ErrCorrupt)
		}
		m.Attachments = append(m.Attachments, Attachment{Name: a.Name, MediaType: a.MediaType, Data: data})
	}
	return m, nil
}

// sealAAD binds a sealed value to its key in the outbox; the prefix keeps it
// apart from the other values sealed under the master key (tokens, links).
// The keys are those of the bbolt layout on every backend.
func sealAAD(key []byte) []byte {
	return append([]byte("notify_outbox\x00"), key...)
}

func idKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, id)
}

func attKey(id uint64, index, chunk int) []byte {
	k := binary.BigEndian.AppendUint64(nil, id)
	k = binary.BigEndian.AppendUint16(k, uint16(index))
	return binary.BigEndian.AppendUint32(k, uint32(chunk))
}
