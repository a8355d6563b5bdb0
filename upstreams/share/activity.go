package share

import (
	"context"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
)

// Activity page limits; docs/clients.md gives none, these follow the list's.
const (
	defaultActivityLimit = 100
	maxActivityLimit     = 1000
)

// Activity returns entries of the share named uuidStr, newest first,
// skipping offset and returning at most limit (0: the default 100). Page
// openings not yet flushed are included.
func (s *Store) Activity(ctx context.Context, caller *access.Identity, uuidStr string, limit, offset int) ([]Activity, error) {
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
	err := s.db.View(ctx, func(tx storage.Tx) error {
		r, err := s.loadVisible(tx, caller, uuidStr)
		if err != nil {
			return err
		}
		pending, err := s.pending(tx).activity(r.ID) // newest first
		if err != nil {
			return err
		}
		want := offset + limit
		stored, err := s.be.Activity(tx, r.ID, want)
		if err != nil {
			return err
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
