package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// holderExistsSQL is the SQL condition that $1 is a key's or a consumer's
// id: what spends quota and counts hours.
const holderExistsSQL = "(EXISTS (SELECT 1 FROM keys WHERE id = $1) OR EXISTS (SELECT 1 FROM consumers WHERE id = $1))"

// scopeError is the error of a write of a key, plan or consumer as the
// store's problem: a unique name or externalId taken, or a plan or
// consumer named that is gone.
func scopeError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch {
	case pe.Code == "23505" && pe.ConstraintName == "plans_name_key":
		return ErrPlanNameTaken
	case pe.Code == "23505" && pe.ConstraintName == "consumers_external_id_key":
		return ErrExternalIDTaken
	case pe.Code == "23503" && pe.ConstraintName == "keys_consumer_id_fkey":
		return unknownRef("consumerId", "consumer")
	case pe.Code == "23503":
		return unknownRef("planId", "plan")
	}
	return err
}

// LoadScopes implements Backend.
func (b *PostgresBackend) LoadScopes(ctx context.Context, plan func(*Plan) error, consumer func(*Consumer) error) error {
	return b.db.View(ctx, func(tx storage.Tx) error {
		if err := eachRecord(ctx, tx, "SELECT record FROM plans ORDER BY id", func(raw []byte) error {
			p := new(Plan)
			if err := json.Unmarshal(raw, p); err != nil {
				return fmt.Errorf("a stored plan does not decode: %w", err)
			}
			return plan(p)
		}); err != nil {
			return err
		}
		return eachRecord(ctx, tx, "SELECT record FROM consumers ORDER BY id", func(raw []byte) error {
			c := new(Consumer)
			if err := json.Unmarshal(raw, c); err != nil {
				return fmt.Errorf("a stored consumer does not decode: %w", err)
			}
			return consumer(c)
		})
	})
}

// eachRecord calls fn with the one column of every row of query.
func eachRecord(ctx context.Context, tx storage.Tx, query string, fn func([]byte) error) error {
	rows, err := pgdb.Of(tx).Query(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return err
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Plan implements Backend.
func (b *PostgresBackend) Plan(ctx context.Context, id string) (*Plan, error) {
	var p *Plan
	return p, b.getRecord(ctx, "SELECT record FROM plans WHERE id = $1", id, func(raw []byte) error {
		p = new(Plan)
		return json.Unmarshal(raw, p)
	})
}

// Consumer implements Backend.
func (b *PostgresBackend) Consumer(ctx context.Context, id string) (*Consumer, error) {
	var c *Consumer
	return c, b.getRecord(ctx, "SELECT record FROM consumers WHERE id = $1", id, func(raw []byte) error {
		c = new(Consumer)
		return json.Unmarshal(raw, c)
	})
}

// getRecord calls fn with the record query finds for id, if any.
func (b *PostgresBackend) getRecord(ctx context.Context, query, id string, fn func([]byte) error) error {
	k, err := idBytes(id)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pgdb.DefaultTimeout)
	defer cancel()
	var raw []byte
	err = b.db.Pool.QueryRow(ctx, query, k).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return b.db.Wrap("reading a plan or consumer", err)
	}
	return fn(raw)
}

// PutPlan implements Backend.
func (b *PostgresBackend) PutPlan(ctx context.Context, p *Plan, base time.Time, holders HoldersCheck) error {
	k, err := idBytes(p.ID)
	if err != nil {
		return err
	}
	v, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return scopeError(b.db.Update(ctx, func(tx storage.Tx) error {
		if holders != nil {
			// The plan locked first: a holder's write that has read it
			// commits before the holders are read here, and one that
			// has not reads it only once this write commits.
			if _, err := pgdb.Of(tx).Exec(ctx, "SELECT 1 FROM plans WHERE id = $1 FOR UPDATE", k); err != nil {
				return err
			}
			hs, err := holdersOfTx(ctx, tx, k)
			if err != nil {
				return err
			}
			if err := holders(hs); err != nil {
				return err
			}
		}
		err := putVersion(ctx, tx, "plans", base, `INSERT INTO plans (id, name, record) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET name = excluded.name, record = excluded.record, updated_at = now()`,
			`UPDATE plans SET name = $2, record = $3, updated_at = now() WHERE id = $1`,
			k, p.Name, v)
		if err != nil {
			return err
		}
		return b.notify(ctx, tx, planTopic+p.ID)
	}))
}

// DeletePlan implements Backend.
func (b *PostgresBackend) DeletePlan(ctx context.Context, id string) error {
	return b.deleteScope(ctx, "plans", planTopic, id, ErrPlanNotFound, ErrPlanInUse)
}

// holdersOfTx reads the keys and consumers that take plan k.
func holdersOfTx(ctx context.Context, tx storage.Tx, k []byte) ([]Holder, error) {
	rows, err := pgdb.Of(tx).Query(ctx, `SELECT 'key', record FROM keys WHERE plan_id = $1
		UNION ALL SELECT 'consumer', record FROM consumers WHERE plan_id = $1`, k)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Holder
	for rows.Next() {
		var kind string
		var raw []byte
		if err := rows.Scan(&kind, &raw); err != nil {
			return nil, err
		}
		h, err := holderOf(kind, raw)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, rows.Err()
}

// checkPlanOfTx calls clash, when set, with the plan ref names as tx
// reads it (nil: none or gone), locked by lockPlan.
func checkPlanOfTx(ctx context.Context, tx storage.Tx, ref *string, clash PlanCheck) error {
	if clash == nil || ref == nil {
		return nil
	}
	p, err := lockPlan(ctx, tx, *ref)
	if err != nil || p == nil {
		return err
	}
	return clash(p)
}

// lockPlan reads plan id (nil: gone, or no plan's id) locked FOR SHARE
// until tx ends: a write of the plan, which locks it first, waits for
// this transaction, or this one reads the plan as that write left it.
func lockPlan(ctx context.Context, tx storage.Tx, id string) (*Plan, error) {
	k, err := idBytes(id)
	if err != nil {
		return nil, nil // the reference's own check refuses it
	}
	var raw []byte
	err = pgdb.Of(tx).QueryRow(ctx, "SELECT record FROM plans WHERE id = $1 FOR SHARE", k).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p := new(Plan)
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("a stored plan does not decode: %w", err)
	}
	return p, nil
}

// checkBatchPlans runs batch's clash checks, each with its holder's plan
// read once by lockPlan; a plan of the batch itself is not stored yet,
// and the import checked its holders against it.
func checkBatchPlans(ctx context.Context, tx storage.Tx, batch *Batch) error {
	read := map[string]*Plan{}
	check := func(ref *string, clash PlanCheck) error {
		if ref == nil || clash == nil {
			return nil
		}
		p, ok := read[*ref]
		if !ok {
			var err error
			if p, err = lockPlan(ctx, tx, *ref); err != nil {
				return err
			}
			read[*ref] = p
		}
		if p == nil {
			return nil
		}
		return clash(p)
	}
	for _, c := range batch.Consumers {
		if err := check(c.PlanID, batch.Clash[c.ID]); err != nil {
			return err
		}
	}
	for _, rec := range batch.Keys {
		if err := check(rec.PlanID, batch.Clash[rec.ID]); err != nil {
			return err
		}
	}
	return nil
}

// PutConsumer implements Backend.
func (b *PostgresBackend) PutConsumer(ctx context.Context, c *Consumer, base time.Time, clash PlanCheck) error {
	k, err := idBytes(c.ID)
	if err != nil {
		return err
	}
	v, err := json.Marshal(c)
	if err != nil {
		return err
	}
	plan, err := optionalUUID(c.PlanID)
	if err != nil {
		return unknownRef("planId", "plan")
	}
	return scopeError(b.db.Update(ctx, func(tx storage.Tx) error {
		if err := checkPlanOfTx(ctx, tx, c.PlanID, clash); err != nil {
			return err
		}
		err := putVersion(ctx, tx, "consumers", base, `INSERT INTO consumers (id, external_id, plan_id, record) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET external_id = excluded.external_id, plan_id = excluded.plan_id,
				record = excluded.record, updated_at = now()`,
			`UPDATE consumers SET external_id = $2, plan_id = $3, record = $4, updated_at = now()
				WHERE id = $1`,
			k, c.ExternalID, plan, v)
		if err != nil {
			return err
		}
		return b.notify(ctx, tx, consumerTopic+c.ID)
	}))
}

// DeleteConsumer implements Backend: the consumer and its traffic go
// together.
func (b *PostgresBackend) DeleteConsumer(ctx context.Context, id string) error {
	return b.deleteScope(ctx, "consumers", consumerTopic, id, ErrConsumerNotFound, ErrConsumerHasKeys)
}

// deleteScope deletes row id of table (plans or consumers) with the
// traffic stored under its id, and tells every instance; inUse while a
// key or consumer still names it (the foreign keys refuse the delete).
func (b *PostgresBackend) deleteScope(ctx context.Context, table, topic, id string, notFound, inUse error) error {
	k, err := idBytes(id)
	if err != nil {
		return notFound
	}
	err = b.db.Update(ctx, func(tx storage.Tx) error {
		tag, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM "+table+" WHERE id = $1", k)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return notFound
		}
		if err := deleteTraffic(ctx, tx, k); err != nil {
			return err
		}
		return b.notify(ctx, tx, topic+id)
	})
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == "23503" {
		return inUse
	}
	return err
}

// deleteTraffic deletes what holder k (a key or consumer) spent.
func deleteTraffic(ctx context.Context, tx storage.Tx, k []byte) error {
	for _, table := range []string{"key_quota", "key_rate_counts", "key_usage_hourly", "rate_demand"} {
		if _, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM "+table+" WHERE key_id = $1", k); err != nil {
			return err
		}
	}
	return nil
}

// optionalUUID is an optional id as a column value: nil for none.
func optionalUUID(id *string) (any, error) {
	if id == nil {
		return nil, nil
	}
	k, err := idBytes(*id)
	if err != nil {
		return nil, err
	}
	return k, nil
}
