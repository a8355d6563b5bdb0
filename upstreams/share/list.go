package share

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
)

// List limits of docs/clients.md.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// SortFields are the sort values of docs/clients.md: the snake_case form of the
// record's sortable fields.
var SortFields = []string{"id", "uuid", "type", "issue_id", "project_id", "created_by",
	"created_at", "updated_at", "expiration", "opened_count"}

// ListQuery is a list call: sort (snake_case, "" for id), direction,
// page and filters ("" for none).
type ListQuery struct {
	Sort      string
	Desc      bool
	Limit     int // 0: the default 100
	Offset    int
	IssueID   string
	UserID    string
	ProjectID string
}

// listPlan is a list call reduced to equality filters on the index
// dimensions plus, when the filters alone do not imply it, the visibility
// rule checked per share.
type listPlan struct {
	issue, project, creator string
	// checkVisible: some matches of the filters may be unseen by caller.
	checkVisible bool
	caller       *access.Identity
	// empty: no share can match (a filter contradicts visibility).
	empty bool
}

// plan applies docs/clients.md's visibility rule to q. A caller that
// administers the filtered project (or everything) sees every match; one
// that does not sees only its own shares there, which is a creator filter.
func plan(caller *access.Identity, q *ListQuery) listPlan {
	p := listPlan{issue: q.IssueID, project: q.ProjectID, creator: q.UserID, caller: caller}
	switch {
	case caller.AdminOfAll():
	case p.project != "" && caller.AdminOf(p.project):
	case p.project != "" || len(caller.AdminProjects) == 0:
		if p.creator != "" && p.creator != caller.Owner {
			p.empty = true
		}
		p.creator = caller.Owner
	case p.creator == caller.Owner:
	default:
		p.checkVisible = true
	}
	return p
}

// checkListQuery enforces the query rules for Go callers; the handler
// reports malformed parameters before this.
func checkListQuery(q *ListQuery) error {
	var f problem.Fields
	if q.Sort == "" {
		q.Sort = "id"
	}
	if !slices.Contains(SortFields, q.Sort) {
		f.Add("sort", "invalid", "sort must be one of "+strings.Join(SortFields, ", "))
	}
	if q.Limit == 0 {
		q.Limit = defaultListLimit
	}
	if q.Limit < 1 || q.Limit > maxListLimit {
		f.Add("limit", "out_of_range", "limit must be 1 to 1000")
	}
	if q.Offset < 0 {
		f.Add("offset", "out_of_range", "offset must be 0 or more")
	}
	return f.Err()
}

// List returns one page of the shares caller may see that match q, sorted
// by q.Sort with ties by id (both in q's direction), and the number of all
// matches. A caller without adminProjects must name userId or projectId
// (403). All of it is read in one read transaction, so pages taken at once
// by many clients see the same snapshot.
func (s *Store) List(ctx context.Context, caller *access.Identity, q ListQuery) ([]*Share, int, error) {
	if caller == nil {
		return nil, 0, errNoIdentity
	}
	if err := checkListQuery(&q); err != nil {
		return nil, 0, err
	}
	if len(caller.AdminProjects) == 0 && q.UserID == "" && q.ProjectID == "" {
		return nil, 0, problem.New(http.StatusForbidden, problem.CodeForbidden,
			"a key without adminProjects must name userId or projectId")
	}
	p := plan(caller, &q)
	out := []*Share{}
	if p.empty {
		return out, 0, nil
	}
	spec := ListSpec{IssueID: p.issue, ProjectID: p.project, CreatedBy: p.creator,
		Sort: q.Sort, Desc: q.Desc, Limit: q.Limit, Offset: q.Offset}
	if p.checkVisible {
		spec.VisibleTo = caller
	}
	var total int
	err := s.db.View(ctx, func(tx storage.Tx) error {
		pv := s.pending(tx)
		if q.Sort == "opened_count" {
			var err error
			if spec.Pending, err = pv.counts(); err != nil {
				return err
			}
		}
		recs, n, err := s.be.List(ctx, tx, &spec)
		if err != nil {
			return err
		}
		total = n
		nowMs := s.nowMs()
		for _, r := range recs {
			pending, err := pv.count(r.ID)
			if err != nil {
				return err
			}
			out = append(out, r.toShare(s.baseURL, nowMs, pending))
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}
