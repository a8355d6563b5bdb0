package keystore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// PostgresBackend keeps keys in the `keys` table of a PostgreSQL schema
// (migration 0002_keys.sql) that several gateway instances share: each
// commit that changes a key notifies every instance (Watch), and usage is
// added, never overwritten.
type PostgresBackend struct {
	db      *pgdb.DB
	channel string
}

// NewPostgresBackend uses db, already migrated.
func NewPostgresBackend(db *pgdb.DB) Backend {
	return &PostgresBackend{db: db, channel: db.Channel(keysTopic)}
}

// keysTopic names the notification channel of key changes; its payload
// is a key id, or resyncAll after a change of many keys at once (caddy
// webapi migrate).
const (
	keysTopic = "keys"
	resyncAll = "*"
)

const selectKey = "SELECT id, record, usage_count, last_usage FROM keys"

// scanKey reads a row of selectKey.
func scanKey(row pgx.Row) (*Record, Usage, error) {
	var (
		id    [16]byte
		raw   []byte
		count int64
		last  *time.Time
	)
	if err := row.Scan(&id, &raw, &count, &last); err != nil {
		return nil, Usage{}, err
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, Usage{}, fmt.Errorf("key %x: %w", id, err)
	}
	u := Usage{KeyID: rec.ID, Count: uint64(count)}
	if last != nil {
		u.LastUsage = last.UTC()
	}
	return rec, u, nil
}

// Load implements Backend. The revision is read by the database, so a
// resync decodes only the records that changed.
func (b *PostgresBackend) Load(ctx context.Context, fn func(row *KeyRow) error) error {
	return b.db.View(ctx, func(tx storage.Tx) error {
		rows, err := pgdb.Of(tx).Query(ctx, `SELECT record->>'id', record->>'lastModificationTime', COALESCE(record->>'expiryWarnedFor', ''),
			record, usage_count, last_usage FROM keys ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				row   KeyRow
				count int64
				last  *time.Time
			)
			if err := rows.Scan(&row.ID, &row.Revision.Modified, &row.Revision.Warned, &row.raw, &count, &last); err != nil {
				return err
			}
			row.Usage = Usage{KeyID: row.ID, Count: uint64(count)}
			if last != nil {
				row.Usage.LastUsage = last.UTC()
			}
			if err := fn(&row); err != nil {
				return err
			}
		}
		return rows.Err()
	})
}

// Key implements Backend.
func (b *PostgresBackend) Key(ctx context.Context, id string) (rec *Record, u Usage, err error) {
	k, err := idBytes(id)
	if err != nil {
		return nil, Usage{}, nil
	}
	// One statement on the pool, without BEGIN and COMMIT around it: the
	// key and its usage are one row.
	ctx, cancel := context.WithTimeout(ctx, pgdb.DefaultTimeout)
	defer cancel()
	rec, u, err = scanKey(b.db.Pool.QueryRow(ctx, selectKey+" WHERE id = $1", k))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, Usage{}, nil
	}
	return rec, u, b.db.Wrap("reading a key", err)
}

// Put implements Backend.
func (b *PostgresBackend) Put(ctx context.Context, rec *Record, base time.Time, emit func(storage.Tx) error, clash PlanCheck) error {
	id, v, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	consumer, plan, err := keyRefs(rec)
	if err != nil {
		return err
	}
	return scopeError(b.db.Batch(ctx, func(tx storage.Tx) error {
		if err := checkPlanOfTx(ctx, tx, rec.PlanID, clash); err != nil {
			return err
		}
		// The stored key.expiring mark stays, as on bbolt
		// (keepExpiryMark): a record that keeps its notValidAfter takes
		// the stored mark, or none, whatever mark it carries.
		err := putVersion(ctx, tx, "keys", base, `INSERT INTO keys (id, service, token_hash, record, consumer_id, plan_id) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO UPDATE SET service = excluded.service, token_hash = excluded.token_hash,
				record = excluded.record, consumer_id = excluded.consumer_id, plan_id = excluded.plan_id, updated_at = now()`,
			`UPDATE keys SET service = $2, token_hash = $3, consumer_id = $5, plan_id = $6, updated_at = now(),
				record = CASE WHEN (record->>'notValidAfter')::timestamptz = ($4::jsonb->>'notValidAfter')::timestamptz
					THEN ($4::jsonb - 'expiryWarnedFor') || CASE WHEN record ? 'expiryWarnedFor'
						THEN jsonb_build_object('expiryWarnedFor', record->'expiryWarnedFor') ELSE '{}'::jsonb END
					ELSE $4::jsonb END
				WHERE id = $1`,
			id, string(rec.Service), rec.TokenHash, v, consumer, plan)
		if err != nil {
			return err
		}
		if emit != nil {
			if err := emit(tx); err != nil {
				return err
			}
		}
		return b.notify(ctx, tx, rec.ID)
	}))
}

// putVersion writes a record of table, whose id is args[0], over its
// version of base: a new record (zero base) by insert, else by update,
// which ends in "WHERE id = $1" and to which putVersion adds the
// version: the stored lastModificationTime compared with base as a
// timestamp, as bbolt's checkBase compares times (a record written by
// hand as "…:19.100Z" is the version "…:19.1Z"). An update that changes
// nothing finds the record stale or gone.
func putVersion(ctx context.Context, tx storage.Tx, table string, base time.Time, insert, update string, args ...any) error {
	if base.IsZero() {
		_, err := pgdb.Of(tx).Exec(ctx, insert, args...)
		return err
	}
	update += fmt.Sprintf(" AND (record->>'lastModificationTime')::timestamptz = $%d::timestamptz", len(args)+1)
	tag, err := pgdb.Of(tx).Exec(ctx, update, append(args, baseText(base))...)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return staleOrGone(ctx, tx, table, args[0])
	}
	return nil
}

// staleOrGone tells why an UPDATE of row id of table that named its base
// changed nothing: the row is another version (errStale) or none
// (errGone).
func staleOrGone(ctx context.Context, tx storage.Tx, table string, id any) error {
	var exists bool
	if err := pgdb.Of(tx).QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+table+" WHERE id = $1)", id).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return errStale
	}
	return errGone
}

// keyRefs are the consumer_id and plan_id columns of rec.
func keyRefs(rec *Record) (consumer, plan any, err error) {
	if consumer, err = optionalUUID(rec.ConsumerID); err != nil {
		return nil, nil, unknownRef("consumerId", "consumer")
	}
	if plan, err = optionalUUID(rec.PlanID); err != nil {
		return nil, nil, unknownRef("planId", "plan")
	}
	return consumer, plan, nil
}

// refColumn is an optional id as PutMany's text array holds it: "" for
// none.
func refColumn(id *string) string {
	if id == nil {
		return ""
	}
	return *id
}

// putManyChunk is how many keys one INSERT of PutMany writes.
const putManyChunk = 1000

// PutMany implements Backend: one transaction of multi-row INSERTs,
// pipelined (the plans, the consumers, then the keys, so that the
// foreign keys find what they name), and one notification that makes
// other instances read plans, consumers and keys again once. A token
// that exists already (stored by another instance meanwhile) fails the
// whole transaction: ErrTokenTaken; a plan name or externalId taken
// meanwhile: ErrPlanNameTaken, ErrExternalIDTaken.
func (b *PostgresBackend) PutMany(ctx context.Context, batch *Batch) error {
	recs := batch.Keys
	ids := make([][16]byte, len(recs))
	services := make([]string, len(recs))
	hashes := make([][]byte, len(recs))
	vals := make([]string, len(recs))
	consumers, plans := make([]string, len(recs)), make([]string, len(recs))
	for i, rec := range recs {
		id, v, err := encodeRecord(rec)
		if err != nil {
			return err
		}
		if _, _, err := keyRefs(rec); err != nil {
			return err
		}
		ids[i], services[i], hashes[i], vals[i] = [16]byte(id), string(rec.Service), rec.TokenHash, string(v)
		consumers[i], plans[i] = refColumn(rec.ConsumerID), refColumn(rec.PlanID)
	}
	var planRows, consumerRows scopeRows
	for _, p := range batch.Plans {
		if err := planRows.add(p.ID, p.Name, nil, p); err != nil {
			return err
		}
	}
	for _, c := range batch.Consumers {
		if _, err := optionalUUID(c.PlanID); err != nil {
			return unknownRef("planId", "plan")
		}
		if err := consumerRows.add(c.ID, refColumn(c.ExternalID), c.PlanID, c); err != nil {
			return err
		}
	}
	err := b.db.Update(ctx, func(tx storage.Tx) error {
		// A token stored meanwhile is found first: the unique index would
		// refuse it too, but the server would log its hash.
		var taken bool
		if err := pgdb.Of(tx).QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM keys WHERE token_hash = ANY($1))", hashes).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return ErrTokenTaken
		}
		if err := checkBatchPlans(ctx, tx, batch); err != nil {
			return err
		}
		q := &pgx.Batch{}
		if len(planRows.ids) > 0 {
			q.Queue(`INSERT INTO plans (id, name, record)
				SELECT u.id, u.name, u.record::jsonb FROM unnest($1::uuid[], $2::text[], $3::text[]) AS u(id, name, record)`,
				planRows.ids, planRows.texts, planRows.records)
		}
		for start := 0; start < len(consumerRows.ids); start += putManyChunk {
			end := min(start+putManyChunk, len(consumerRows.ids))
			q.Queue(`INSERT INTO consumers (id, external_id, plan_id, record)
				SELECT u.id, NULLIF(u.ext, ''), NULLIF(u.plan, '')::uuid, u.record::jsonb
				FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[]) AS u(id, ext, plan, record)`,
				consumerRows.ids[start:end], consumerRows.texts[start:end], consumerRows.plans[start:end], consumerRows.records[start:end])
		}
		for start := 0; start < len(recs); start += putManyChunk {
			end := min(start+putManyChunk, len(recs))
			q.Queue(`INSERT INTO keys (id, service, token_hash, record, consumer_id, plan_id)
				SELECT u.id, u.service, u.hash, u.record::jsonb, NULLIF(u.consumer, '')::uuid, NULLIF(u.plan, '')::uuid
				FROM unnest($1::uuid[], $2::text[], $3::bytea[], $4::text[], $5::text[], $6::text[]) AS u(id, service, hash, record, consumer, plan)`,
				ids[start:end], services[start:end], hashes[start:end], vals[start:end], consumers[start:end], plans[start:end])
		}
		q.Queue("SELECT pg_notify($1, $2)", b.channel, resyncAll)
		return pgdb.Of(tx).SendBatch(ctx, q).Close()
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName != "plans_name_key" && pe.ConstraintName != "consumers_external_id_key" {
		return ErrTokenTaken
	}
	return scopeError(err)
}

// scopeRows are the columns of plans or consumers for one multi-row
// INSERT: texts holds a plan's name or a consumer's externalId ("" for
// none), plans a consumer's plan id ("" for none).
type scopeRows struct {
	ids            [][16]byte
	texts, records []string
	plans          []string
}

func (r *scopeRows) add(id, text string, plan *string, scope any) error {
	k, v, err := encodeScope(id, scope)
	if err != nil {
		return err
	}
	r.ids = append(r.ids, [16]byte(k))
	r.texts = append(r.texts, text)
	r.records = append(r.records, string(v))
	r.plans = append(r.plans, refColumn(plan))
	return nil
}

// MarkExpiryWarned implements Backend: the key's row is locked while it
// is read, so of instances racing one marks it and emits.
func (b *PostgresBackend) MarkExpiryWarned(ctx context.Context, id string, notValidAfter time.Time, emit func(storage.Tx) error) (bool, error) {
	k, err := idBytes(id)
	if err != nil {
		return false, err
	}
	marked := false
	err = b.db.Update(ctx, func(tx storage.Tx) error {
		marked = false
		var raw []byte
		err := pgdb.Of(tx).QueryRow(ctx, "SELECT record FROM keys WHERE id = $1 FOR UPDATE", k).Scan(&raw)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		v, due, err := markExpiryWarned(raw, notValidAfter)
		if err != nil || !due {
			return err
		}
		if _, err := pgdb.Of(tx).Exec(ctx, "UPDATE keys SET record = $2, updated_at = now() WHERE id = $1", k, v); err != nil {
			return err
		}
		if emit != nil {
			if err := emit(tx); err != nil {
				return err
			}
		}
		marked = true
		return b.notify(ctx, tx, id)
	})
	return marked, err
}

// notify tells every instance's Watch of key id once tx commits.
func (b *PostgresBackend) notify(ctx context.Context, tx storage.Tx, id string) error {
	_, err := pgdb.Of(tx).Exec(ctx, "SELECT pg_notify($1, $2)", b.channel, id)
	return err
}

// Delete implements Backend: the key and its usage go together.
func (b *PostgresBackend) Delete(ctx context.Context, id string) error {
	k, err := idBytes(id)
	if err != nil {
		return err
	}
	return b.db.Update(ctx, func(tx storage.Tx) error {
		if _, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM keys WHERE id = $1", k); err != nil {
			return err
		}
		if err := deleteTraffic(ctx, tx, k); err != nil {
			return err
		}
		return b.notify(ctx, tx, id)
	})
}

// AddUsage implements Backend: one statement batch in one transaction,
// each adding to what other instances added. Rows are updated in key
// order, so that two instances flushing the same keys cannot deadlock.
func (b *PostgresBackend) AddUsage(ctx context.Context, batch []Usage) error {
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return batch[order[i]].KeyID < batch[order[j]].KeyID })
	// The totals are kept apart until the commit: a retried transaction
	// adds the same deltas again.
	totals := make([]Usage, len(batch))
	err := b.db.Update(ctx, func(tx storage.Tx) error {
		var q pgx.Batch
		for _, i := range order {
			u := batch[i]
			totals[i] = Usage{KeyID: u.KeyID}
			k, err := idBytes(u.KeyID)
			if err != nil {
				continue
			}
			var last *time.Time
			if !u.LastUsage.IsZero() {
				t := u.LastUsage.UTC()
				last = &t
			}
			q.Queue(`UPDATE keys SET usage_count = usage_count + $2,
					last_usage = greatest(last_usage, $3::timestamptz)
				WHERE id = $1 RETURNING usage_count, last_usage`, k, int64(u.Count), last).
				QueryRow(func(row pgx.Row) error {
					var count int64
					var last *time.Time
					err := row.Scan(&count, &last)
					if errors.Is(err, pgx.ErrNoRows) {
						return nil // deleted meanwhile
					}
					if err != nil {
						return err
					}
					totals[i].Count = uint64(count)
					if last != nil {
						totals[i].LastUsage = last.UTC()
					}
					return nil
				})
			queueHours(&q, k, u.Hours)
		}
		return pgdb.Of(tx).SendBatch(ctx, &q).Close()
	})
	if err != nil {
		return err
	}
	copy(batch, totals)
	return nil
}

// Watch implements Watcher.
func (b *PostgresBackend) Watch(ctx context.Context, changed func(id string), resync func()) {
	b.db.Listen(ctx, b.channel, func(payload string) {
		if payload == resyncAll {
			resync()
			return
		}
		changed(payload)
	}, resync)
}

var (
	_ Backend = (*PostgresBackend)(nil)
	_ Watcher = (*PostgresBackend)(nil)
)
