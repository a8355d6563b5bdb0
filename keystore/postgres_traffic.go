package keystore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/keystore/traffic"
)

// queueHours queues the additions of hours to key k's hourly counts,
// after the UPDATE of its usage has locked its row (migration
// 0009_traffic.sql); a key deleted meanwhile gets none.
func queueHours(q *pgx.Batch, k []byte, hours []HourCount) {
	for _, h := range hours {
		q.Queue(`INSERT INTO key_usage_hourly (key_id, hour, outcome, count)
				SELECT $1, $2, $3, $4 WHERE `+holderExistsSQL+`
			ON CONFLICT (key_id, hour, outcome) DO UPDATE SET count = key_usage_hourly.count + excluded.count`,
			k, h.Hour.UTC(), h.Outcome, int64(h.Count))
	}
}

// UsageHours implements Backend.
func (b *PostgresBackend) UsageHours(ctx context.Context, id string, from, to time.Time) ([]HourCount, error) {
	k, err := idBytes(id)
	if err != nil {
		return nil, nil
	}
	var out []HourCount
	err = b.db.View(ctx, func(tx storage.Tx) error {
		out = out[:0]
		rows, err := pgdb.Of(tx).Query(ctx, `SELECT hour, outcome, count FROM key_usage_hourly
			WHERE key_id = $1 AND hour >= $2 AND hour < $3 ORDER BY hour, outcome`, k, from.UTC(), to.UTC())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h HourCount
			var n int64
			if err := rows.Scan(&h.Hour, &h.Outcome, &n); err != nil {
				return err
			}
			h.Hour, h.Count = h.Hour.UTC(), uint64(n)
			out = append(out, h)
		}
		return rows.Err()
	})
	return out, err
}

// PurgeUsage implements Backend.
func (b *PostgresBackend) PurgeUsage(ctx context.Context, before time.Time) error {
	return b.db.Update(ctx, func(tx storage.Tx) error {
		if _, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM key_usage_hourly WHERE hour < $1", before.UTC()); err != nil {
			return err
		}
		_, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM key_quota WHERE period_start < $1", before.UTC())
		return err
	})
}

// LeaseQuota implements Backend: the period's row is created if need be
// and locked while the lease is computed, so instances leasing at once
// take turns and never grant beyond the limit together.
func (b *PostgresBackend) LeaseQuota(ctx context.Context, id string, span traffic.QuotaSpan, limit, want int64, emit func(storage.Tx) error) (traffic.QuotaLease, error) {
	k, err := idBytes(id)
	if err != nil {
		return traffic.QuotaLease{}, err
	}
	var l traffic.QuotaLease
	err = b.db.Update(ctx, func(tx storage.Tx) error {
		l = traffic.QuotaLease{}
		db := pgdb.Of(tx)
		_, err := db.Exec(ctx, `INSERT INTO key_quota (key_id, period, period_start, used)
				SELECT $1, $2, $3, 0 WHERE `+holderExistsSQL+`
			ON CONFLICT (key_id, period, period_start) DO NOTHING`, k, string(span.Period), span.Start.UTC())
		if err != nil {
			return err
		}
		var used int64
		var exhausted bool
		err = db.QueryRow(ctx, `SELECT used, exhausted FROM key_quota WHERE key_id = $1 AND period = $2 AND period_start = $3 FOR UPDATE`,
			k, string(span.Period), span.Start.UTC()).Scan(&used, &exhausted)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		granted, total, first := leaseQuota(used, exhausted, limit, want)
		if _, err := db.Exec(ctx, `UPDATE key_quota SET used = $4, exhausted = $5 WHERE key_id = $1 AND period = $2 AND period_start = $3`,
			k, string(span.Period), span.Start.UTC(), total, exhausted || first); err != nil {
			return err
		}
		if first && emit != nil {
			if err := emit(tx); err != nil {
				return err
			}
		}
		l = traffic.QuotaLease{Granted: granted, Used: total}
		return nil
	})
	return l, err
}

// ReturnQuota implements Backend.
func (b *PostgresBackend) ReturnQuota(ctx context.Context, id string, span traffic.QuotaSpan, n int64) error {
	k, err := idBytes(id)
	if err != nil {
		return err
	}
	return b.db.Update(ctx, func(tx storage.Tx) error {
		_, err := pgdb.Of(tx).Exec(ctx, `UPDATE key_quota SET used = greatest(used - $4, 0)
			WHERE key_id = $1 AND period = $2 AND period_start = $3`, k, string(span.Period), span.Start.UTC(), n)
		return err
	})
}

// QuotaUsed implements Backend.
func (b *PostgresBackend) QuotaUsed(ctx context.Context, id string, span traffic.QuotaSpan) (int64, error) {
	k, err := idBytes(id)
	if err != nil {
		return 0, nil
	}
	var used int64
	err = b.db.View(ctx, func(tx storage.Tx) error {
		err := pgdb.Of(tx).QueryRow(ctx, `SELECT used FROM key_quota WHERE key_id = $1 AND period = $2 AND period_start = $3`,
			k, string(span.Period), span.Start.UTC()).Scan(&used)
		if errors.Is(err, pgx.ErrNoRows) {
			used = 0
			return nil
		}
		return err
	})
	return used, err
}

// ShareRates implements RateSharer: an advisory lock makes the syncs of
// instances take turns, so each claims from counts that hold every claim
// before it; one batch adds this instance's deltas, drops windows that
// ended before the previous one and marks the instance as seen, then
// the counts still current are read and the claims added.
func (b *PostgresBackend) ShareRates(now time.Time, instance string, live time.Duration, deltas, demand []traffic.RateCount, claim func(traffic.RateShare) []traffic.RateCount) error {
	ctx := context.Background()
	sec, ms := now.Unix(), now.UnixMilli()
	self, err := uuid.Parse(instance)
	if err != nil {
		return err
	}
	sortRateCounts(deltas)
	return b.db.Update(ctx, func(tx storage.Tx) error {
		var share traffic.RateShare
		var q pgx.Batch
		q.Queue("SELECT pg_advisory_xact_lock(hashtext('keygate rate sync'))")
		queueRateCounts(&q, deltas)
		// A window is still current while it or the one after it runs.
		q.Queue("DELETE FROM key_rate_counts WHERE window_end + window_seconds <= $1", sec)
		q.Queue(`INSERT INTO rate_instances (instance, seen_at) VALUES ($1, $2)
			ON CONFLICT (instance) DO UPDATE SET seen_at = greatest(rate_instances.seen_at, excluded.seen_at)`, self, ms)
		for _, d := range demand {
			if k, err := idBytes(d.HolderID); err == nil {
				q.Queue(`INSERT INTO rate_demand (key_id, policy, window_seconds, instance, asked, seen_at)
						SELECT $1, $2, $3, $4, $5, $6 WHERE `+holderExistsSQL+`
					ON CONFLICT (key_id, policy, window_seconds, instance) DO UPDATE SET asked = excluded.asked, seen_at = excluded.seen_at`,
					k, d.Policy, d.WindowSeconds, self, d.Count, ms)
			}
		}
		// Long gone instances are forgotten; an hour keeps the table small
		// without racing a clock that is a little behind.
		q.Queue("DELETE FROM rate_instances WHERE seen_at < $1", ms-time.Hour.Milliseconds())
		q.Queue("DELETE FROM rate_demand WHERE seen_at < $1", ms-time.Hour.Milliseconds())
		q.Queue("SELECT count(*) FROM rate_instances WHERE seen_at > $1", ms-live.Milliseconds())
		br := pgdb.Of(tx).SendBatch(ctx, &q)
		for range len(q.QueuedQueries) - 1 {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return err
			}
		}
		if err := br.QueryRow().Scan(&share.Instances); err != nil {
			br.Close()
			return err
		}
		if err := br.Close(); err != nil {
			return err
		}
		var err error
		share.Counts, err = readRateCounts(ctx, tx, `SELECT key_id, policy, window_seconds, window_index, count
			FROM key_rate_counts WHERE window_end + window_seconds > $1`, sec)
		if err != nil {
			return err
		}
		// A demand has no window: 0 stands in for it.
		share.Demand, err = readRateCounts(ctx, tx, `SELECT key_id, policy, window_seconds, 0, sum(asked)::bigint
			FROM rate_demand WHERE seen_at > $1 GROUP BY key_id, policy, window_seconds`, ms-live.Milliseconds())
		if err != nil {
			return err
		}
		claims := claim(share)
		if len(claims) == 0 {
			return nil
		}
		var cq pgx.Batch
		queueRateCounts(&cq, claims)
		return pgdb.Of(tx).SendBatch(ctx, &cq).Close()
	})
}

// readRateCounts reads the rows of query, each a key id, policy, window
// seconds, window index and count.
func readRateCounts(ctx context.Context, tx storage.Tx, query string, arg int64) ([]traffic.RateCount, error) {
	rows, err := pgdb.Of(tx).Query(ctx, query, arg)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []traffic.RateCount
	for rows.Next() {
		var id [16]byte
		var c traffic.RateCount
		if err := rows.Scan(&id, &c.Policy, &c.WindowSeconds, &c.Index, &c.Count); err != nil {
			return nil, err
		}
		c.HolderID = uuidString(id)
		out = append(out, c)
	}
	return out, rows.Err()
}

// queueRateCounts queues the addition of each of list to its window's
// count (a claim given back subtracts; a count never goes below 0); a
// key deleted meanwhile gets none.
func queueRateCounts(q *pgx.Batch, list []traffic.RateCount) {
	for _, d := range list {
		k, err := idBytes(d.HolderID)
		if err != nil {
			continue
		}
		q.Queue(`INSERT INTO key_rate_counts (key_id, policy, window_seconds, window_index, count, window_end)
				SELECT $1, $2, $3, $4, greatest($5::bigint, 0), $6 WHERE `+holderExistsSQL+`
			ON CONFLICT (key_id, policy, window_seconds, window_index)
				DO UPDATE SET count = greatest(key_rate_counts.count + $5::bigint, 0)`,
			k, d.Policy, d.WindowSeconds, d.Index, d.Count, (d.Index+1)*d.WindowSeconds)
	}
}

var _ traffic.RateSharer = (*PostgresBackend)(nil)

// uuidString is a key id as the key store names it.
func uuidString(id [16]byte) string { return uuid.UUID(id).String() }

// sortRateCounts orders deltas by key, policy and window, the order in
// which every instance adds them.
func sortRateCounts(list []traffic.RateCount) {
	slices.SortFunc(list, func(a, b traffic.RateCount) int {
		return cmp.Or(cmp.Compare(a.HolderID, b.HolderID), cmp.Compare(a.Policy, b.Policy),
			cmp.Compare(a.WindowSeconds, b.WindowSeconds), cmp.Compare(a.Index, b.Index))
	})
}
