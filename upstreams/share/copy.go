package share

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// CopyToPostgres copies the shares of from, a transaction of the bbolt
// backend, into to, one of the PostgreSQL backend whose share tables are
// empty (caddy webapi migrate): every share as its stored bytes, with its
// id, uuid, password hash and opening count, beside the columns the list
// filters and sorts on; every activity entry with its time and write
// order; and share_counts, the totals of the common lists, counted from
// the shares copied. share_id_seq and the activity sequence then continue
// after the last values bbolt gave, so that no id is given twice. The
// unlock limit is not copied: on bbolt it lives in the process's memory
// and went with it.
func CopyToPostgres(ctx context.Context, from, to storage.Tx) ([]storage.Copied, error) {
	btx := boltdb.Of(from)
	shares := btx.Bucket(bucketShares)
	activity := btx.Bucket(bucketShareActivity)
	type countKey struct{ kind, a, b string }
	counts := map[countKey]int64{}
	ids := map[uint64]bool{}
	var withPassword, openings int64

	out := pgdb.NewCopier(ctx, to, "shares", "id", "uuid", "type", "issue_id", "project_id", "created_by",
		"created_at", "updated_at", "expiration", "opened_count", "record")
	if shares != nil {
		err := shares.ForEach(func(k, v []byte) error {
			r := new(Record)
			if err := json.Unmarshal(v, r); err != nil {
				return fmt.Errorf("share %x: the stored record does not decode: %w", k, err)
			}
			if len(k) != 8 || binary.BigEndian.Uint64(k) != r.ID || r.ID > 1<<63-1 {
				return fmt.Errorf("share %x: the record names id %d", k, r.ID)
			}
			u, err := uuid.Parse(r.UUID)
			if err != nil {
				return fmt.Errorf("share %d: uuid %q: %w", r.ID, r.UUID, err)
			}
			ids[r.ID] = true
			kinds, as, bs := pgCountKeys(r)
			for i := range kinds {
				counts[countKey{kinds[i], as[i], bs[i]}]++
			}
			if r.PasswordHash != "" {
				withPassword++
			}
			openings += r.OpenedCount
			return out.Add(int64(r.ID), u, r.Type, r.IssueID, r.ProjectID, r.CreatedBy, r.CreatedAt, r.UpdatedAt,
				r.Expiration, r.OpenedCount, v)
		})
		if err != nil {
			return nil, err
		}
	}
	n, err := out.Close()
	if err != nil {
		return nil, err
	}
	report := []storage.Copied{{Kind: "shares", N: n, Note: fmt.Sprintf("%d with a password; %d openings", withPassword, openings)}}

	// Activity in key order, its bbolt sequence kept as seq: entries of
	// one share and time stay in the order they were written.
	acts := pgdb.NewCopier(ctx, to, "share_activity", "share_id", "ts", "seq", "entry")
	orphans := 0
	if activity != nil {
		err := activity.ForEach(func(k, v []byte) error {
			if len(k) != 24 {
				return fmt.Errorf("share activity key %x: %d bytes, want 24", k, len(k))
			}
			id := binary.BigEndian.Uint64(k[:8])
			if !ids[id] {
				// An entry whose share is gone: nothing shows it, and the
				// foreign key of share_activity refuses it.
				orphans++
				return nil
			}
			ts := int64(binary.BigEndian.Uint64(k[8:16]) ^ 1<<63)
			seq := binary.BigEndian.Uint64(k[16:])
			if seq > 1<<63-1 {
				return fmt.Errorf("share %d: activity sequence %d out of range", id, seq)
			}
			return acts.Add(int64(id), ts, int64(seq), v)
		})
		if err != nil {
			return nil, err
		}
	}
	// seq is GENERATED ALWAYS, but COPY writes the values it is given
	// (as INSERT ... OVERRIDING SYSTEM VALUE would).
	na, err := acts.Close()
	if err != nil {
		return nil, err
	}
	note := ""
	if orphans > 0 {
		note = fmt.Sprintf("%d entries of no share left out", orphans)
	}
	report = append(report, storage.Copied{Kind: "share activity", N: na, Note: note})

	keys := make([]countKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y countKey) int {
		return cmp.Or(strings.Compare(x.kind, y.kind), strings.Compare(x.a, y.a), strings.Compare(x.b, y.b))
	})
	cw := pgdb.NewCopier(ctx, to, "share_counts", "kind", "a", "b", "n")
	for _, k := range keys {
		if err := cw.Add(k.kind, k.a, k.b, counts[k]); err != nil {
			return nil, err
		}
	}
	if _, err := cw.Close(); err != nil {
		return nil, err
	}
	if shares != nil {
		if err := pgdb.AdvanceSequence(ctx, to, "'share_id_seq'", shares.Sequence()); err != nil {
			return nil, err
		}
	}
	if activity != nil {
		if err := pgdb.AdvanceSequence(ctx, to, "pg_get_serial_sequence('share_activity', 'seq')", activity.Sequence()); err != nil {
			return nil, err
		}
	}
	return report, nil
}
