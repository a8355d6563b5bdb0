package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	// channel is the LISTEN/NOTIFY channel of this schema's outbox.
	channel string
}

// NewPostgresBackend returns the outbox of db's schema.
func NewPostgresBackend(db *pgdb.DB) Backend {
	return &pgBackend{db: db, channel: db.Channel("outbox")}
}

func (b *pgBackend) NewID(t storage.Tx) (uint64, error) {
	var id int64
	err := pgdb.Of(t).QueryRow(context.Background(), "SELECT nextval(pg_get_serial_sequence('outbox', 'id'))").Scan(&id)
	return uint64(id), err
}

func (b *pgBackend) Enqueue(t storage.Tx, r *Record, _ func()) error {
	ctx := context.Background()
	tx := pgdb.Of(t)
	atts, err := json.Marshal(r.Attachments)
	if err != nil {
		return err
	}
	if r.Attachments == nil {
		atts = []byte("[]")
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox (id, channel, recipient, ref, sealed, subject, body_text, body_html,
		attachments, queued, attempts, next_attempt, last_error)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, now(), $12)`,
		int64(r.ID), string(r.Channel), r.To, r.Ref, r.Sealed, r.Subject, r.Text, r.HTML,
		string(atts), r.Queued, r.Attempts, r.LastError)
	if err != nil {
		return err
	}
	if len(r.Chunks) > 0 {
		var rows [][]any
		for i, chunks := range r.Chunks {
			for c, v := range chunks {
				rows = append(rows, []any{int64(r.ID), int16(i), int32(c), v})
			}
		}
		if len(rows) > 0 {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"outbox_chunks"}, []string{"message_id", "attachment", "chunk", "data"}, pgx.CopyFromRows(rows)); err != nil {
				return err
			}
		}
	}
	// Delivered to every instance's Watch when tx commits, never if it
	// rolls back.
	_, err = tx.Exec(ctx, "SELECT pg_notify($1, '')", b.channel)
	return err
}

func (b *pgBackend) DropRef(t storage.Tx, ref string) error {
	// ref <> '' lets a generic plan use the partial index outbox_ref.
	_, err := pgdb.Of(t).Exec(context.Background(), "DELETE FROM outbox WHERE ref = $1 AND ref <> ''", ref)
	return err
}

// Take leases the earliest due message that no other transaction is
// taking (SKIP LOCKED), and moves its next attempt to the lease's end:
// should its holder die, it falls due again then. Times are the
// database's, so the instances' clocks need not agree.
func (b *pgBackend) Take(ctx context.Context, holder string, lease time.Duration) (id uint64, next time.Time, err error) {
	err = b.db.Update(ctx, func(t storage.Tx) error {
		id, next, err = b.take(ctx, pgdb.Of(t), holder, lease)
		return err
	})
	return id, next, err
}

func (b *pgBackend) take(ctx context.Context, tx pgx.Tx, holder string, lease time.Duration) (uint64, time.Time, error) {
	var id int64
	err := tx.QueryRow(ctx, `UPDATE outbox
		SET lease_holder = $1, lease_until = now() + $2::bigint * interval '1 microsecond', next_attempt = now() + $2::bigint * interval '1 microsecond'
		WHERE id = (SELECT id FROM outbox WHERE next_attempt <= now()
			ORDER BY next_attempt, id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id`, holder, lease.Microseconds()).Scan(&id)
	if err == nil {
		return uint64(id), time.Time{}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, time.Time{}, err
	}
	var next *time.Time
	if err := tx.QueryRow(ctx, "SELECT min(next_attempt) FROM outbox").Scan(&next); err != nil {
		return 0, time.Time{}, err
	}
	if next == nil {
		return 0, time.Time{}, nil
	}
	return 0, *next, nil
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
func (b *pgBackend) Reschedule(t storage.Tx, id uint64, holder string, delay time.Duration, lastErr string) error {
	_, err := pgdb.Of(t).Exec(context.Background(), `UPDATE outbox
		SET attempts = attempts + 1, next_attempt = now() + $3::bigint * interval '1 microsecond', last_error = $4,
			lease_holder = NULL, lease_until = NULL
		WHERE id = $1 AND lease_holder = $2`, int64(id), holder, delay.Microseconds(), lastErr)
	return err
}

func (b *pgBackend) Delete(t storage.Tx, id uint64) error {
	_, err := pgdb.Of(t).Exec(context.Background(), "DELETE FROM outbox WHERE id = $1", int64(id))
	return err
}

// Watch listens for the commits that enqueue, from any instance; it wakes
// the worker as well whenever a notification may have been missed.
func (b *pgBackend) Watch(ctx context.Context, wake func()) {
	b.db.Listen(ctx, b.channel, func(string) { wake() }, wake)
}
