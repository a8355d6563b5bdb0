package keystore

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/token"
)

// CopyToPostgres copies every key from from, a transaction of the bbolt
// backend, into to, one of the PostgreSQL backend whose keys table is
// empty (caddy webapi migrate): each record's bytes as stored, with the
// token hash and service that PostgresBackend keeps beside them, and the
// key's flushed usage (count and last use). Every sealed token must open
// with sealer, the master key the copy will be served with, so that every
// key stays revealable; a key whose token does not open stops the copy.
func CopyToPostgres(ctx context.Context, from, to storage.Tx, sealer *seal.Sealer) ([]storage.Copied, error) {
	btx := boltdb.Of(from)
	keys := btx.Bucket(bucketKeys)
	if keys == nil {
		return []storage.Copied{{Kind: "keys"}}, nil
	}
	usage := btx.Bucket(bucketKeyUsage)
	// Plans, then consumers, then the keys that name them.
	plans, consumers, err := copyScopes(ctx, btx, to)
	if err != nil {
		return nil, err
	}
	out := pgdb.NewCopier(ctx, to, "keys", "id", "service", "token_hash", "record", "usage_count", "last_usage", "consumer_id", "plan_id")
	perService := map[access.Service]int{}
	used := 0
	err = keys.ForEach(func(k, v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("key %x: the stored record does not decode: %w", k, err)
		}
		id, err := uuid.Parse(rec.ID)
		if err != nil || !bytes.Equal(id[:], k) {
			return fmt.Errorf("key %x: the record names id %q", k, rec.ID)
		}
		if len(rec.TokenHash) != len(token.Hash{}) {
			return fmt.Errorf("key %s: the token hash has %d bytes, want %d", rec.ID, len(rec.TokenHash), len(token.Hash{}))
		}
		if _, err := sealer.Open(rec.SealedToken, []byte(rec.ID)); err != nil {
			return fmt.Errorf("key %s: its sealed token does not open with this master key (give the gateway's master key file)", rec.ID)
		}
		var u Usage
		if usage != nil {
			u = boltUsage(rec.ID, usage.Get(k))
		}
		count := u.Count
		var last *time.Time
		if !u.LastUsage.IsZero() {
			last = &u.LastUsage
		}
		if count > 1<<63-1 {
			return fmt.Errorf("key %s: usage count %d out of range", rec.ID, count)
		}
		perService[rec.Service]++
		if count > 0 {
			used++
		}
		// The record as stored; jsonb keeps its meaning, not its bytes,
		// as PostgresBackend.Put stores it too.
		consumer, plan, err := keyRefs(rec)
		if err != nil {
			return fmt.Errorf("key %s: %w", rec.ID, err)
		}
		return out.Add(id, string(rec.Service), rec.TokenHash, v, int64(count), last, consumer, plan)
	})
	if err != nil {
		return nil, err
	}
	n, err := out.Close()
	if err != nil {
		return nil, err
	}
	hours, quotas, err := copyTraffic(ctx, btx, to)
	if err != nil {
		return nil, err
	}
	// Gateways already running on the schema read every key again once
	// the copy commits.
	var schema string
	if err := pgdb.Of(to).QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, err
	}
	if _, err := pgdb.Of(to).Exec(ctx, "SELECT pg_notify($1, $2)", pgdb.Channel(schema, keysTopic), resyncAll); err != nil {
		return nil, err
	}
	note := fmt.Sprintf("%d contracts, %d share; %d used; %d hourly usage rows, %d quota periods", perService[access.ServiceContracts], perService[access.ServiceShare], used, hours, quotas)
	return []storage.Copied{{Kind: "keys", N: n, Note: note}, {Kind: "plans", N: plans}, {Kind: "consumers", N: consumers}}, nil
}

// copyScopes copies every plan and consumer, each record as stored with
// the columns PostgresBackend keeps beside it.
func copyScopes(ctx context.Context, btx *bbolt.Tx, to storage.Tx) (plans, consumers int64, err error) {
	if b := btx.Bucket(bucketPlans); b != nil {
		out := pgdb.NewCopier(ctx, to, "plans", "id", "name", "record")
		err := b.ForEach(func(k, v []byte) error {
			var p Plan
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("plan %x: the stored record does not decode: %w", k, err)
			}
			return out.Add(k, p.Name, v)
		})
		if err != nil {
			return 0, 0, err
		}
		if plans, err = out.Close(); err != nil {
			return 0, 0, err
		}
	}
	if b := btx.Bucket(bucketConsumers); b != nil {
		out := pgdb.NewCopier(ctx, to, "consumers", "id", "external_id", "plan_id", "record")
		err := b.ForEach(func(k, v []byte) error {
			var c Consumer
			if err := json.Unmarshal(v, &c); err != nil {
				return fmt.Errorf("consumer %x: the stored record does not decode: %w", k, err)
			}
			plan, err := optionalUUID(c.PlanID)
			if err != nil {
				return fmt.Errorf("consumer %s: %w", c.ID, err)
			}
			return out.Add(k, c.ExternalID, plan, v)
		})
		if err != nil {
			return 0, 0, err
		}
		if consumers, err = out.Close(); err != nil {
			return 0, 0, err
		}
	}
	return plans, consumers, nil
}

// copyTraffic copies what keys spent: the hourly usage and the quota
// periods (rate-limit counts live a window or two and are not copied).
// The gateway was stopped cleanly, so its quota blocks were given back.
func copyTraffic(ctx context.Context, btx *bbolt.Tx, to storage.Tx) (hours, quotas int64, err error) {
	if b := btx.Bucket(bucketKeyHours); b != nil {
		out := pgdb.NewCopier(ctx, to, "key_usage_hourly", "key_id", "hour", "outcome", "count")
		err := b.ForEach(func(k, v []byte) error {
			if len(k) < 24 || len(v) != 8 {
				return fmt.Errorf("hourly usage %x: malformed", k)
			}
			hour := time.Unix(int64(binary.BigEndian.Uint64(k[16:24]))*3600, 0).UTC()
			return out.Add(k[:16], hour, string(k[24:]), int64(binary.BigEndian.Uint64(v)))
		})
		if err != nil {
			return 0, 0, err
		}
		if hours, err = out.Close(); err != nil {
			return 0, 0, err
		}
	}
	if b := btx.Bucket(bucketKeyQuota); b != nil {
		out := pgdb.NewCopier(ctx, to, "key_quota", "key_id", "period", "period_start", "used", "exhausted")
		err := b.ForEach(func(k, v []byte) error {
			span, ok := quotaSpanOf(k)
			if !ok || len(v) != 9 {
				return fmt.Errorf("quota period %x: malformed", k)
			}
			used, exhausted := quotaRow(v)
			return out.Add(k[:16], string(span.Period), span.Start, used, exhausted)
		})
		if err != nil {
			return 0, 0, err
		}
		if quotas, err = out.Close(); err != nil {
			return 0, 0, err
		}
	}
	return hours, quotas, nil
}
