package share

import (
	"context"
	"encoding/json"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// Activity page limits; share.md gives none, these follow the list's.
const (
	defaultActivityLimit = 100
	maxActivityLimit     = 1000
)

// activityKey orders a share's entries by time, then by the order they
// were written: id | timestamp | sequence.
func activityKey(id uint64, ts int64, seq uint64) []byte {
	k := make([]byte, 0, 24)
	k = append(k, u64(id)...)
	k = append(k, sortableInt(ts)...)
	return append(k, u64(seq)...)
}

// appendActivity stores one entry of share id.
func appendActivity(tx *bbolt.Tx, id uint64, a Activity) error {
	b := tx.Bucket(bucketShareActivity)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return b.Put(activityKey(id, a.Timestamp, seq), v)
}

// deleteActivity removes every entry of share id.
func deleteActivity(tx *bbolt.Tx, id uint64) error {
	c := tx.Bucket(bucketShareActivity).Cursor()
	prefix := u64(id)
	for k, _ := c.Seek(prefix); k != nil && hasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Activity returns entries of the share named uuidStr, newest first,
// skipping offset and returning at most limit (0: the default 100). Page
// openings not yet flushed are included.
func (s *Store) Activity(ctx context.Context, caller *keystore.Identity, uuidStr string, limit, offset int) ([]Activity, error) {
	if caller == nil {
		return nil, errNoIdentity
	}
	var f problem.Fields
	if limit == 0 {
		limit = defaultActivityLimit
	}
	if limit < 1 || limit > maxActivityLimit {
		f.Add("limit", "out_of_range", "limit must be 1 to 1000")
	}
	if offset < 0 {
		f.Add("offset", "out_of_range", "offset must be 0 or more")
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	var out []Activity
	err := s.db.View(func(tx *bbolt.Tx) error {
		r, err := loadVisible(tx, caller, uuidStr)
		if err != nil {
			return err
		}
		pending := s.views.pendingActivity(tx.ID(), r.ID) // newest first
		want := offset + limit
		stored := make([]Activity, 0, min(want, 64))
		c := tx.Bucket(bucketShareActivity).Cursor()
		prefix := u64(r.ID)
		k, v := c.Seek(u64(r.ID + 1))
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		for ; k != nil && hasPrefix(k, prefix) && len(stored) < want; k, v = c.Prev() {
			var a Activity
			if err := json.Unmarshal(v, &a); err != nil {
				return err
			}
			stored = append(stored, a)
		}
		merged := mergeNewestFirst(pending, stored, want)
		if offset < len(merged) {
			out = merged[offset:]
		}
		return nil
	})
	if out == nil && err == nil {
		out = []Activity{}
	}
	return out, err
}

// mergeNewestFirst merges two newest-first lists into at most n entries;
// at equal timestamps the pending (unflushed) entry counts as newer.
func mergeNewestFirst(pending, stored []Activity, n int) []Activity {
	out := make([]Activity, 0, min(n, len(pending)+len(stored)))
	i, j := 0, 0
	for len(out) < n && (i < len(pending) || j < len(stored)) {
		if j == len(stored) || (i < len(pending) && pending[i].Timestamp >= stored[j].Timestamp) {
			out = append(out, pending[i])
			i++
		} else {
			out = append(out, stored[j])
			j++
		}
	}
	return out
}
