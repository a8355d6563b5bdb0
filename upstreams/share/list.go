package share

import (
	"bytes"
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// List limits of the seed and share.md.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// SortFields are the sort values of share.md: the snake_case form of the
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
	caller       *keystore.Identity
	// empty: no share can match (a filter contradicts visibility).
	empty bool
}

// plan applies share.md's visibility rule to q. A caller that
// administers the filtered project (or everything) sees every match; one
// that does not sees only its own shares there, which is a creator filter.
func plan(caller *keystore.Identity, q *ListQuery) listPlan {
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

// match reports whether the index entry m passes the filters that its
// index does not already imply, and the visibility rule.
func (p *listPlan) match(m metaView, driving dim) (bool, error) {
	issue, project, creator, err := m.strings()
	if err != nil {
		return false, err
	}
	if p.issue != "" && driving != dimIssue && string(issue) != p.issue {
		return false, nil
	}
	if p.project != "" && driving != dimProject && string(project) != p.project {
		return false, nil
	}
	if p.creator != "" && driving != dimCreator && string(creator) != p.creator {
		return false, nil
	}
	if p.checkVisible && string(creator) != p.caller.Owner && !p.caller.AdminOf(string(project)) {
		return false, nil
	}
	return true, nil
}

// driving picks the index to walk: the issue (few shares each), else the
// smaller of project and creator, else one of them, else all shares.
func (p *listPlan) driving(counts *bbolt.Bucket) (dim, string) {
	switch {
	case p.issue != "":
		return dimIssue, p.issue
	case p.project != "" && p.creator != "":
		if readCount(counts, countKey(countCreator, p.creator)) < readCount(counts, countKey(countProject, p.project)) {
			return dimCreator, p.creator
		}
		return dimProject, p.project
	case p.project != "":
		return dimProject, p.project
	case p.creator != "":
		return dimCreator, p.creator
	}
	return dimAll, ""
}

// knownTotal returns the number of matches from the counters when every
// match is visible and the filters are ones a counter keeps; ok is false
// when the list has to count while walking.
func (p *listPlan) knownTotal(counts *bbolt.Bucket) (n int, ok bool) {
	if p.checkVisible {
		return 0, false
	}
	var k []byte
	switch {
	case p.issue != "" && p.project == "" && p.creator == "":
		k = countKey(countIssue, p.issue)
	case p.issue != "":
		return 0, false
	case p.project != "" && p.creator != "":
		k = countKey(countProjectCreator, p.project, p.creator)
	case p.project != "":
		k = countKey(countProject, p.project)
	case p.creator != "":
		k = countKey(countCreator, p.creator)
	default:
		k = countKey(countAll)
	}
	return int(readCount(counts, k)), true
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

// walkCheckEvery is how many index entries a list walks between checks
// of its context.
const walkCheckEvery = 4096

// List returns one page of the shares caller may see that match q, sorted
// by q.Sort with ties by id (both in q's direction), and the number of all
// matches. A caller without adminProjects must name userId or projectId
// (403). All of it is read in one read transaction, so pages taken at once
// by many clients see the same snapshot.
func (s *Store) List(ctx context.Context, caller *keystore.Identity, q ListQuery) ([]*Share, int, error) {
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
	var total int
	err := s.db.View(func(tx *bbolt.Tx) error {
		var ids []uint64
		var err error
		switch q.Sort {
		case "id", "created_at", "updated_at":
			ids, total, err = s.walkOrdered(ctx, tx, &p, &q)
		default:
			ids, total, err = s.sortInMemory(ctx, tx, &p, &q)
		}
		if err != nil {
			return err
		}
		nowMs := s.nowMs()
		for _, id := range ids {
			r, err := loadByID(tx, u64(id))
			if err != nil {
				return err
			}
			if r == nil {
				continue // an index entry without its share: never written so, skip
			}
			out = append(out, r.toShare(s.baseURL, nowMs, s.views.pendingCount(tx.ID(), id)))
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return out, total, nil
}

// indexCursor walks the entries of one dimension value in an index, in
// either direction.
type indexCursor struct {
	c      *bbolt.Cursor
	prefix []byte
	desc   bool
}

func newIndexCursor(tx *bbolt.Tx, d dim, o order, value string, desc bool) *indexCursor {
	return &indexCursor{c: tx.Bucket(indexBuckets[d][o]).Cursor(), prefix: dimPrefix(d, value), desc: desc}
}

func (ic *indexCursor) first() ([]byte, []byte) {
	switch {
	case !ic.desc && len(ic.prefix) == 0:
		return ic.check(ic.c.First())
	case !ic.desc:
		return ic.check(ic.c.Seek(ic.prefix))
	case len(ic.prefix) == 0:
		return ic.check(ic.c.Last())
	}
	// The prefix ends in \x00; the first key past all of its entries
	// starts with the prefix whose last byte is \x01.
	end := append(bytes.Clone(ic.prefix[:len(ic.prefix)-1]), 1)
	if k, _ := ic.c.Seek(end); k == nil {
		return ic.check(ic.c.Last())
	}
	return ic.check(ic.c.Prev())
}

func (ic *indexCursor) next() ([]byte, []byte) {
	if ic.desc {
		return ic.check(ic.c.Prev())
	}
	return ic.check(ic.c.Next())
}

func (ic *indexCursor) check(k, v []byte) ([]byte, []byte) {
	if k == nil || !hasPrefix(k, ic.prefix) {
		return nil, nil
	}
	return k, v
}

// walkOrdered serves the sorts an index keeps (id, created_at,
// updated_at): it walks the driving index in order and stops after the
// page when the total is known from the counters.
func (s *Store) walkOrdered(ctx context.Context, tx *bbolt.Tx, p *listPlan, q *ListQuery) ([]uint64, int, error) {
	counts := tx.Bucket(bucketShareCounts)
	total, known := p.knownTotal(counts)
	if known && q.Offset >= total {
		return nil, total, nil
	}
	o := orderID
	switch q.Sort {
	case "created_at":
		o = orderCreated
	case "updated_at":
		o = orderUpdated
	}
	d, value := p.driving(counts)
	ic := newIndexCursor(tx, d, o, value, q.Desc)
	var ids []uint64
	matched := 0
	err := eachMatch(ctx, ic, p, d, func(m metaView) bool {
		if matched >= q.Offset && len(ids) < q.Limit {
			ids = append(ids, m.id())
		}
		matched++
		return !known || len(ids) < q.Limit
	})
	if err != nil {
		return nil, 0, err
	}
	if !known {
		total = matched
	}
	return ids, total, nil
}

// eachMatch walks ic and calls fn with every entry p matches, until fn
// returns false. It gives up when ctx ends, checking every walkCheckEvery
// entries.
func eachMatch(ctx context.Context, ic *indexCursor, p *listPlan, d dim, fn func(m metaView) bool) error {
	walked := 0
	for k, v := ic.first(); k != nil; k, v = ic.next() {
		if walked++; walked%walkCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		m := metaView(v)
		if !m.valid() {
			return errBadMeta
		}
		ok, err := p.match(m, d)
		if err != nil {
			return err
		}
		if ok && !fn(m) {
			return nil
		}
	}
	return nil
}

// sortItem is what an in-memory sort keeps of a match: its id and its
// value of the sort field.
type sortItem struct {
	id  uint64
	str string
	num int64
}

// sortInMemory serves the other sorts: it reads the matches of the
// driving dimension value (and nothing else) from the index, sorts them
// by the field with ties by id, and cuts the page.
func (s *Store) sortInMemory(ctx context.Context, tx *bbolt.Tx, p *listPlan, q *ListQuery) ([]uint64, int, error) {
	d, value := p.driving(tx.Bucket(bucketShareCounts))
	var pending map[uint64]int64
	if q.Sort == "opened_count" {
		pending = s.views.pendingCounts(tx.ID())
	}
	ic := newIndexCursor(tx, d, orderID, value, false)
	var items []sortItem
	err := eachMatch(ctx, ic, p, d, func(m metaView) bool {
		it := sortItem{id: m.id()}
		issue, project, creator, _ := m.strings()
		switch q.Sort {
		case "uuid":
			it.str = string(m.uuidBytes()) // raw bytes sort as the hex form does
		case "type":
			it.str = m.typeName()
		case "issue_id":
			it.str = string(issue)
		case "project_id":
			it.str = string(project)
		case "created_by":
			it.str = string(creator)
		case "expiration":
			it.num = m.expiration()
		case "opened_count":
			it.num = m.openedCount() + pending[it.id]
		}
		items = append(items, it)
		return true
	})
	if err != nil {
		return nil, 0, err
	}
	slices.SortFunc(items, func(a, b sortItem) int {
		c := cmp.Compare(a.str, b.str)
		if c == 0 {
			c = cmp.Compare(a.num, b.num)
		}
		if c == 0 {
			c = cmp.Compare(a.id, b.id)
		}
		if q.Desc {
			return -c
		}
		return c
	})
	total := len(items)
	if q.Offset >= total {
		return nil, total, nil
	}
	page := items[q.Offset:min(total, q.Offset+q.Limit)]
	ids := make([]uint64, len(page))
	for i, it := range page {
		ids[i] = it.id
	}
	return ids, total, nil
}
