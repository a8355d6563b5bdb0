package webhook

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// pgBackend keeps the webhooks in PostgreSQL tables (migration
// 0007_webhooks.sql) shared by every instance of a deployment: events and
// deliveries are taken with FOR UPDATE SKIP LOCKED, and a commit that
// adds deliveries notifies every instance, so that any may take them.
type pgBackend struct {
	db *pgdb.DB
	// wakeup wakes the workers of every instance after deliveries are added.
	wakeup *pgdb.Wakeup
}

// NewPostgresBackend returns the webhooks of db's schema.
func NewPostgresBackend(db *pgdb.DB) Backend {
	return &pgBackend{db: db, wakeup: db.NewWakeup("webhooks")}
}

const subColumns = `id, url, events, owners, description, enabled, sealed_secret, sealed_previous, previous_expiry, created, modified`

func (b *pgBackend) PutSubscription(t storage.Tx, r *Record) error {
	var prevExpiry *time.Time
	if r.SealedPrevious != nil {
		prevExpiry = &r.PreviousExpiry
	}
	pgdb.Queue(t, `INSERT INTO webhook_subscriptions (`+subColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (id) DO UPDATE SET url = EXCLUDED.url, events = EXCLUDED.events, owners = EXCLUDED.owners,
			description = EXCLUDED.description, enabled = EXCLUDED.enabled, sealed_secret = EXCLUDED.sealed_secret,
			sealed_previous = EXCLUDED.sealed_previous, previous_expiry = EXCLUDED.previous_expiry,
			modified = EXCLUDED.modified`,
		r.ID, r.URL, nonNil(r.Events), nonNil(r.Owners), r.Description, r.Enabled, r.SealedSecret, r.SealedPrevious,
		prevExpiry, r.CreationTime, r.LastModificationTime)
	return nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func scanSub(row pgx.Row) (*Record, error) {
	r := &Record{}
	var prevExpiry *time.Time
	err := row.Scan(&r.ID, &r.URL, &r.Events, &r.Owners, &r.Description, &r.Enabled, &r.SealedSecret,
		&r.SealedPrevious, &prevExpiry, &r.CreationTime, &r.LastModificationTime)
	if err != nil {
		return nil, err
	}
	if prevExpiry != nil {
		r.PreviousExpiry = prevExpiry.UTC()
	}
	r.CreationTime, r.LastModificationTime = r.CreationTime.UTC(), r.LastModificationTime.UTC()
	r.Events, r.Owners = nonNil(r.Events), nonNil(r.Owners)
	return r, nil
}

func (b *pgBackend) GetSubscription(t storage.Tx, id string) (*Record, error) {
	r, err := scanSub(pgdb.Of(t).QueryRow(context.Background(), `SELECT `+subColumns+` FROM webhook_subscriptions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

func (b *pgBackend) ListSubscriptions(t storage.Tx) ([]*Record, error) {
	rows, err := pgdb.Of(t).Query(context.Background(), `SELECT `+subColumns+` FROM webhook_subscriptions ORDER BY created, id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*Record
	for rows.Next() {
		r, err := scanSub(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteSubscription deletes the row; its deliveries and log go with it
// (ON DELETE CASCADE).
func (b *pgBackend) DeleteSubscription(t storage.Tx, id string) (bool, error) {
	tag, err := pgdb.Of(t).Exec(context.Background(), "DELETE FROM webhook_subscriptions WHERE id = $1", id)
	return tag.RowsAffected() > 0, err
}

func (b *pgBackend) DropDeliveries(t storage.Tx, id string) error {
	pgdb.Queue(t, "DELETE FROM webhook_deliveries WHERE subscription_id = $1", id)
	return nil
}

// AddEvent queues the event's INSERT to go with tx's commit: no round trip
// of its own, its id from the identity column. No NOTIFY: the emitting
// instance's own worker, woken by committed, fans the event out (another
// instance's poll does, should this one die first), so that a create
// costs the other instances nothing.
func (b *pgBackend) AddEvent(t storage.Tx, e *EventRecord, committed func()) error {
	pgdb.Queue(t, "INSERT INTO webhook_events (type, owner, at, data) VALUES ($1, $2, $3, $4)",
		e.Type, e.Owner, e.At, []byte(e.Data))
	if committed != nil {
		pgdb.AfterCommit(t, committed)
	}
	return nil
}

// after is the function run after a commit that added deliveries: the
// caller's committed and a NOTIFY to the other instances.
func (b *pgBackend) after(committed func()) func() {
	return func() {
		if committed != nil {
			committed()
		}
		b.wakeup.Notify()
	}
}

// TakeEvents deletes up to limit events that no other transaction is
// taking (SKIP LOCKED) and returns them; a rollback puts them back.
func (b *pgBackend) TakeEvents(t storage.Tx, limit int) ([]EventRecord, error) {
	rows, err := pgdb.Of(t).Query(context.Background(), `DELETE FROM webhook_events WHERE id IN (
			SELECT id FROM webhook_events ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
		RETURNING id, type, owner, at, data`, limit)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (EventRecord, error) {
		var e EventRecord
		var id int64
		var data []byte
		err := row.Scan(&id, &e.Type, &e.Owner, &e.At, &data)
		e.Seq, e.At, e.Data = uint64(id), e.At.UTC(), data
		return e, err
	})
	if err != nil {
		return nil, err
	}
	sortEvents(out)
	return out, nil
}

// AddDelivery queues the delivery's INSERT with the commit: a fan-out adds
// many and reads none back.
func (b *pgBackend) AddDelivery(t storage.Tx, d *Delivery, committed func()) error {
	pgdb.Queue(t, `INSERT INTO webhook_deliveries
		(subscription_id, message_id, event, body, event_at, attempts, next_attempt)
		VALUES ($1, $2, $3, $4, $5, $6, now())`,
		d.SubscriptionID, d.MessageID, d.Event, d.Body, d.EventAt, d.Attempts)
	if committed != nil {
		pgdb.AfterCommit(t, b.after(committed))
	}
	return nil
}

const deliveryColumns = `id, subscription_id, message_id, event, body, event_at, attempts`

func scanDelivery(row pgx.Row) (*Delivery, error) {
	d := &Delivery{}
	var id int64
	err := row.Scan(&id, &d.SubscriptionID, &d.MessageID, &d.Event, &d.Body, &d.EventAt, &d.Attempts)
	d.ID, d.EventAt = uint64(id), d.EventAt.UTC()
	return d, err
}

// TakeDelivery leases the earliest due delivery that no other transaction
// is taking (SKIP LOCKED) and that is not skipped, moving its next attempt
// to the lease's end: should its holder die, it falls due again then.
// Times are the database's. It is one statement, a transaction of its
// own: when nothing is due it tells when the earliest delivery not
// skipped falls due.
func (b *pgBackend) TakeDelivery(ctx context.Context, holder string, lease time.Duration, skipSubs []string, skipIDs []uint64) (*Delivery, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, pgdb.DefaultTimeout)
	defer cancel()
	ids := make([]int64, len(skipIDs))
	for i, id := range skipIDs {
		ids[i] = int64(id)
	}
	if skipSubs == nil {
		skipSubs = []string{}
	}
	var (
		id      *int64
		sub     *string
		msg     *string
		event   *string
		body    []byte
		eventAt *time.Time
		tries   *int
		next    *time.Time
	)
	err := b.db.Pool.QueryRow(ctx, `WITH taken AS (
			UPDATE webhook_deliveries SET lease_holder = $1, lease_until = now() + $2::bigint * interval '1 microsecond',
				next_attempt = now() + $2::bigint * interval '1 microsecond'
			WHERE id = (SELECT id FROM webhook_deliveries
				WHERE next_attempt <= now() AND subscription_id <> ALL($3) AND id <> ALL($4)
				ORDER BY next_attempt, id LIMIT 1 FOR UPDATE SKIP LOCKED)
			RETURNING `+deliveryColumns+`)
		SELECT t.id, t.subscription_id, t.message_id, t.event, t.body, t.event_at, t.attempts,
			CASE WHEN t.id IS NULL THEN (SELECT min(next_attempt) FROM webhook_deliveries
				WHERE subscription_id <> ALL($3) AND id <> ALL($4)) END
		FROM (SELECT 1) one LEFT JOIN taken t ON true`,
		holder, lease.Microseconds(), skipSubs, ids).Scan(&id, &sub, &msg, &event, &body, &eventAt, &tries, &next)
	switch {
	case err != nil:
		return nil, time.Time{}, b.db.Wrap("taking a webhook delivery", err)
	case id != nil:
		return &Delivery{ID: uint64(*id), SubscriptionID: *sub, MessageID: *msg, Event: *event, Body: body,
			EventAt: eventAt.UTC(), Attempts: *tries}, time.Time{}, nil
	case next != nil:
		return nil, *next, nil
	}
	return nil, time.Time{}, nil
}

func (b *pgBackend) GetDelivery(t storage.Tx, id uint64) (*Delivery, error) {
	d, err := scanDelivery(pgdb.Of(t).QueryRow(context.Background(),
		`SELECT `+deliveryColumns+` FROM webhook_deliveries WHERE id = $1`, int64(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return d, err
}

// RescheduleDelivery records the failed attempt only if holder still
// holds the delivery: after its lease ended, another instance may have
// taken it.
func (b *pgBackend) RescheduleDelivery(t storage.Tx, id uint64, holder string, delay time.Duration) error {
	pgdb.Queue(t, `UPDATE webhook_deliveries
		SET attempts = attempts + 1, next_attempt = now() + $3::bigint * interval '1 microsecond',
			lease_holder = NULL, lease_until = NULL
		WHERE id = $1 AND lease_holder = $2`, int64(id), holder, delay.Microseconds())
	return nil
}

func (b *pgBackend) DeleteDelivery(t storage.Tx, id uint64) error {
	pgdb.Queue(t, "DELETE FROM webhook_deliveries WHERE id = $1", int64(id))
	return nil
}

// AddAttempt queues the entry and the trim of the log to its newest keep
// entries with the commit.
func (b *pgBackend) AddAttempt(t storage.Tx, id string, a *Attempt, keep int) error {
	pgdb.Queue(t, `INSERT INTO webhook_attempts (subscription_id, message_id, event, attempt, status, duration_ms, error, at)
		SELECT $1, $2, $3, $4, $5, $6, $7, $8 WHERE EXISTS (SELECT 1 FROM webhook_subscriptions WHERE id = $1)`,
		id, a.MessageID, a.Event, a.Attempt, a.Status, a.DurationMs, a.Error, a.Timestamp)
	pgdb.Queue(t, `DELETE FROM webhook_attempts WHERE subscription_id = $1 AND seq <= (
		SELECT seq FROM webhook_attempts WHERE subscription_id = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)`, id, keep)
	return nil
}

func (b *pgBackend) Attempts(t storage.Tx, id string, limit, offset int) ([]Attempt, error) {
	rows, err := pgdb.Of(t).Query(context.Background(), `SELECT message_id, event, attempt, status, duration_ms, error, at
		FROM webhook_attempts WHERE subscription_id = $1 ORDER BY seq DESC LIMIT $2 OFFSET $3`, id, limit, offset)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := row.Scan(&a.MessageID, &a.Event, &a.Attempt, &a.Status, &a.DurationMs, &a.Error, &a.Timestamp)
		a.Timestamp = a.Timestamp.UTC()
		return a, err
	})
	if out == nil {
		out = []Attempt{}
	}
	return out, err
}

// Watch listens for the commits that add deliveries, from any instance; it wakes the worker as well whenever a notification may have
// been missed.
func (b *pgBackend) Watch(ctx context.Context, wake func()) {
	b.wakeup.Watch(ctx, wake)
}
