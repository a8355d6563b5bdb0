package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// pgBackend keeps the outbox in PostgreSQL tables (migration
// 0005_outbox.sql), shared by every instance of a deployment: Take leases
// what it takes, and each commit that enqueues notifies every instance.
type pgBackend struct {
	db *pgdb.DB
	// wakeup wakes the workers of every instance after an enqueue.
	wakeup *pgdb.Wakeup

	mu sync.Mutex
	// ids are taken from the sequence in blocks (idBlock at a time), so
	// that an enqueue costs no round trip for its id.
	ids []int64
}

// idBlock is how many message ids NewID takes from the sequence at once.
const idBlock = 64

// NewPostgresBackend returns the outbox of db's schema.
func NewPostgresBackend(db *pgdb.DB) Backend {
	return &pgBackend{db: db, wakeup: db.NewWakeup("outbox")}
}

// NewID takes ids from the sequence a block at a time, on tx's own
// connection (another one could wait for a pool that transactions like tx
// hold). Ids are unique and never reused; on several instances, and with
// blocks taken at once, they grow in enqueue order only roughly.
func (b *pgBackend) NewID(t storage.Tx) (uint64, error) {
	b.mu.Lock()
	if len(b.ids) == 0 {
		b.mu.Unlock()
		rows, err := pgdb.Of(t).Query(context.Background(),
			"SELECT nextval(pg_get_serial_sequence('outbox', 'id')) FROM generate_series(1, $1)", idBlock)
		if err != nil {
			return 0, err
		}
		block, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return 0, err
		}
		b.mu.Lock()
		b.ids = append(b.ids, block...)
		slices.Sort(b.ids)
	}
	id := b.ids[0]
	b.ids = b.ids[1:]
	b.mu.Unlock()
	return uint64(id), nil
}

// Enqueue queues the message's INSERT to go with tx's commit (its chunks,
// if any, are copied at once). The NOTIFY that wakes every instance's
// worker is sent after the commit, not in tx: a transaction that notifies
// holds a lock that serialises every notifying commit, disk flush
// included, until it ends, which made all creates wait in line.
func (b *pgBackend) Enqueue(t storage.Tx, r *Record, committed func()) error {
	ctx := context.Background()
	atts, err := json.Marshal(r.Attachments)
	if err != nil {
		return err
	}
	if r.Attachments == nil {
		atts = []byte("[]")
	}
	pgdb.Queue(t, `INSERT INTO outbox (id, channel, recipient, ref, sealed, subject, body_text, body_html,
		attachments, queued, attempts, next_attempt, last_error)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now(), $12)`,
		int64(r.ID), string(r.Channel), r.To, r.Ref, r.Sealed, r.Subject, r.Text, r.HTML,
		string(atts), r.Queued, r.Attempts, r.LastError)
	if len(r.Chunks) > 0 {
		var rows [][]any
		for i, chunks := range r.Chunks {
			for c, v := range chunks {
				rows = append(rows, []any{int64(r.ID), int16(i), int32(c), v})
			}
		}
		if len(rows) > 0 {
			if _, err := pgdb.Of(t).CopyFrom(ctx, pgx.Identifier{"outbox_chunks"}, []string{"message_id", "attachment", "chunk", "data"}, pgx.CopyFromRows(rows)); err != nil {
				return err
			}
		}
	}
	pgdb.AfterCommit(t, func() {
		committed()
		b.wakeup.Notify()
	})
	return nil
}

func (b *pgBackend) DropRef(t storage.Tx, ref string) error {
	// ref <> '' lets a generic plan use the partial index outbox_ref.
	_, err := pgdb.Of(t).Exec(context.Background(), "DELETE FROM outbox WHERE ref = $1 AND ref <> ''", ref)
	return err
}

// Take leases the earliest due message that no other transaction is
// taking (SKIP LOCKED), and moves its next attempt to the lease's end:
// should its holder die, it falls due again then. Times are the
// database's, so the instances' clocks need not agree. It is one
// statement, a transaction of its own, so one round trip: when nothing is
// due, it tells when the earliest message falls due.
func (b *pgBackend) Take(ctx context.Context, holder string, lease time.Duration) (uint64, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, pgdb.DefaultTimeout)
	defer cancel()
	var id *int64
	var next *time.Time
	err := b.db.Pool.QueryRow(ctx, `WITH taken AS (
			UPDATE outbox SET lease_holder = $1, lease_until = now() + $2::bigint * interval '1 microsecond',
				next_attempt = now() + $2::bigint * interval '1 microsecond'
			WHERE id = (SELECT id FROM outbox WHERE next_attempt <= now()
				ORDER BY next_attempt, id LIMIT 1 FOR UPDATE SKIP LOCKED)
			RETURNING id)
		SELECT (SELECT id FROM taken),
			CASE WHEN NOT EXISTS (SELECT 1 FROM taken) THEN (SELECT min(next_attempt) FROM outbox) END`,
		holder, lease.Microseconds()).Scan(&id, &next)
	switch {
	case err != nil:
		return 0, time.Time{}, b.db.Wrap("taking a message", err)
	case id != nil:
		return uint64(*id), time.Time{}, nil
	case next != nil:
		return 0, *next, nil
	}
	return 0, time.Time{}, nil
}

func (b *pgBackend) Load(t storage.Tx, id uint64) (*Record, error) {
	ctx := context.Background()
	tx := pgdb.Of(t)
	r := &Record{ID: id}
	var channel string
	var atts []byte
	err := tx.QueryRow(ctx, `SELECT channel, recipient, ref, sealed, subject, body_text, body_html, attachments::text,
		queued, attempts, last_error FROM outbox WHERE id = $1`, int64(id)).Scan(
		&channel, &r.To, &r.Ref, &r.Sealed, &r.Subject, &r.Text, &r.HTML, &atts, &r.Queued, &r.Attempts, &r.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.Channel, r.Queued = Channel(channel), r.Queued.UTC()
	if err := json.Unmarshal(atts, &r.Attachments); err != nil {
		return r, fmt.Errorf("notify: message %d: %w: %w", id, ErrCorrupt, err)
	}
	if len(r.Attachments) == 0 {
		r.Attachments = nil
		return r, nil
	}
	r.Chunks = make([][][]byte, len(r.Attachments))
	rows, err := tx.Query(ctx, "SELECT attachment, data FROM outbox_chunks WHERE message_id = $1 ORDER BY attachment, chunk", int64(id))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var i int16
		var data []byte
		if err := rows.Scan(&i, &data); err != nil {
			return nil, err
		}
		if int(i) < len(r.Chunks) {
			r.Chunks[i] = append(r.Chunks[i], data)
		}
	}
	return r, rows.Err()
}

// Reschedule records the failed attempt only if holder still holds the
// message: after its lease ended, another instance may have taken it.
// Reschedule queues its UPDATE with the commit: nothing reads its result.
func (b *pgBackend) Reschedule(t storage.Tx, id uint64, holder string, delay time.Duration, lastErr string) error {
	pgdb.Queue(t, `UPDATE outbox
		SET attempts = attempts + 1, next_attempt = now() + $3::bigint * interval '1 microsecond', last_error = $4,
			lease_holder = NULL, lease_until = NULL
		WHERE id = $1 AND lease_holder = $2`, int64(id), holder, delay.Microseconds(), lastErr)
	return nil
}

// Delete queues its DELETE with the commit.
func (b *pgBackend) Delete(t storage.Tx, id uint64) error {
	pgdb.Queue(t, "DELETE FROM outbox WHERE id = $1", int64(id))
	return nil
}

// Watch listens for the commits that enqueue, from any instance; it wakes
// the worker as well whenever a notification may have been missed.
func (b *pgBackend) Watch(ctx context.Context, wake func()) {
	b.wakeup.Watch(ctx, wake)
}
