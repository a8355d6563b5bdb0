package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// CopyToPostgres copies the webhooks of from, a transaction of the bbolt
// backend, into to, one of the PostgreSQL backend whose webhook tables
// are empty (caddy webapi migrate): the subscriptions with their sealed
// secrets (bound to their ids, so they open alike under the same master
// key), the events not yet fanned out, the pending deliveries with their
// message ids, bodies, attempts and next attempt, and the delivery logs,
// in their order. Nothing is unsealed.
func CopyToPostgres(ctx context.Context, from, to storage.Tx) ([]storage.Copied, error) {
	root := boltdb.Of(from).Bucket(bucketRoot)
	if root == nil {
		return []storage.Copied{{Kind: "webhooks"}, {Kind: "webhook deliveries"}, {Kind: "webhook log"}}, nil
	}
	b, err := openBuckets(boltdb.Wrap(boltdb.Of(from)))
	if err != nil {
		return nil, err
	}

	subs := pgdb.NewCopier(ctx, to, "webhook_subscriptions", "id", "url", "events", "owners", "description", "enabled",
		"sealed_secret", "sealed_previous", "previous_expiry", "created", "modified")
	ids := map[string]bool{}
	enabled := 0
	err = b.sub.ForEach(func(k, v []byte) error {
		r, err := decodeSub(v)
		if err != nil {
			return fmt.Errorf("webhook subscription %s: %w", k, err)
		}
		var prev *time.Time
		if r.SealedPrevious != nil {
			prev = &r.PreviousExpiry
		}
		ids[r.ID] = true
		if r.Enabled {
			enabled++
		}
		return subs.Add(r.ID, r.URL, r.Events, r.Owners, r.Description, r.Enabled, r.SealedSecret, r.SealedPrevious,
			prev, r.CreationTime, r.LastModificationTime)
	})
	if err != nil {
		return nil, err
	}
	nSubs, err := subs.Close()
	if err != nil {
		return nil, err
	}

	evs := pgdb.NewCopier(ctx, to, "webhook_events", "type", "owner", "at", "data")
	err = b.ev.ForEach(func(k, v []byte) error {
		e, err := decodeEvent(v)
		if err != nil {
			return fmt.Errorf("webhook event %x: %w", k, err)
		}
		return evs.Add(e.Type, e.Owner, e.At, []byte(e.Data))
	})
	if err != nil {
		return nil, err
	}
	nEvs, err := evs.Close()
	if err != nil {
		return nil, err
	}

	dlv := pgdb.NewCopier(ctx, to, "webhook_deliveries", "subscription_id", "message_id", "event", "body", "event_at",
		"attempts", "next_attempt")
	err = b.dlv.ForEach(func(k, v []byte) error {
		var d boltDelivery
		if err := json.Unmarshal(v, &d); err != nil {
			return fmt.Errorf("webhook delivery %x does not decode: %w", k, err)
		}
		if !ids[d.SubscriptionID] {
			return nil // of no subscription: never delivered
		}
		return dlv.Add(d.SubscriptionID, d.MessageID, d.Event, d.Body, d.EventAt, int32(d.Attempts), time.Unix(0, d.Next).UTC())
	})
	if err != nil {
		return nil, err
	}
	nDlv, err := dlv.Close()
	if err != nil {
		return nil, err
	}

	logs := pgdb.NewCopier(ctx, to, "webhook_attempts", "subscription_id", "message_id", "event", "attempt", "status",
		"duration_ms", "error", "at")
	err = b.log.ForEachBucket(func(sub []byte) error {
		if !ids[string(sub)] {
			return nil
		}
		lb := b.log.Bucket(sub)
		return lb.ForEach(func(k, v []byte) error {
			var a Attempt
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("webhook log entry %x of %s does not decode: %w", k, sub, err)
			}
			return logs.Add(string(sub), a.MessageID, a.Event, int32(a.Attempt), int32(a.Status), a.DurationMs, a.Error, a.Timestamp)
		})
	})
	if err != nil {
		return nil, err
	}
	nLogs, err := logs.Close()
	if err != nil {
		return nil, err
	}
	// Kinds of at most 18 characters: the report's column is as wide as
	// the other stores' kinds.
	return []storage.Copied{
		{Kind: "webhooks", N: nSubs, Note: fmt.Sprintf("%d enabled", enabled)},
		{Kind: "webhook deliveries", N: nDlv, Note: fmt.Sprintf("pending; and %d events not yet fanned out", nEvs)},
		{Kind: "webhook log", N: nLogs, Note: "delivery attempts"},
	}, nil
}
