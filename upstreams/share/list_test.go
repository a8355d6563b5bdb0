package share

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// seedShares makes a varied set: three creators, projects P1-P3 and none,
// every type, equal creation times (ties), expirations and openings
// (some flushed, some still in memory).
func seedShares(e *env, n int) []*Share {
	e.t.Helper()
	creators := []*access.Identity{alice, carol, bob}
	projects := []string{"P1", "P2", "P3", ""}
	var out []*Share
	for i := range n {
		if i%3 == 0 {
			e.clock.Advance(time.Second) // groups of three share a createdAt
		}
		caller := creators[i%len(creators)]
		project := projects[(i/2)%len(projects)]
		var in *CreateRequest
		switch i % 5 {
		case 0, 1:
			in = issueShare(fmt.Sprintf("I%d", i%7), project)
		case 2:
			in = &CreateRequest{Type: TypeBoard, ProjectID: str(cmp.Or(project, "P1"))}
		case 3:
			in = &CreateRequest{Type: TypeJQL, ProjectID: str(cmp.Or(project, "P2")), JQL: str("project = X")}
		default:
			in = &CreateRequest{Type: TypeTimeline, ProjectID: str(cmp.Or(project, "P3"))}
		}
		if i%4 == 1 {
			in.Expiration = i64(e.nowMs() + int64(1000*(i%6+1)))
		}
		sh := e.create(caller, in)
		out = append(out, sh)
	}
	// Updates move updatedAt away from createdAt order.
	for i := 0; i < n; i += 4 {
		e.clock.Advance(time.Second)
		r := e.stored(out[n-1-i].UUID)
		in := &CreateRequest{Type: r.Type, IssueID: nonEmpty(r.IssueID), ProjectID: nonEmpty(r.ProjectID)}
		if _, err := e.store.Update(context.Background(), root, r.UUID, in); err != nil {
			e.t.Fatal(err)
		}
	}
	// Openings: flushed for some, pending for others.
	for i := 0; i < n; i += 3 {
		for range i % 4 {
			e.store.recordPageEvent(out[i].ID, Activity{Timestamp: e.nowMs(), Source: "share", Action: ActionViewed}, true)
		}
		if i == n/2 {
			if err := e.store.Flush(); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return out
}

// reference lists what the store must answer, computed the slow way from
// every share as Get returns it (see getAll).
// getAll reads every share of all with Get, as the reference needs them.
func getAll(e *env, all []*Share) []*Share {
	e.t.Helper()
	out := make([]*Share, len(all))
	for i, s := range all {
		full, err := e.store.Get(context.Background(), root, s.UUID)
		if err != nil {
			e.t.Fatal(err)
		}
		out[i] = full
	}
	return out
}

func reference(e *env, all []*Share, caller *access.Identity, q ListQuery) []uint64 {
	e.t.Helper()
	var rows []*Share
	for _, full := range all {
		p := ""
		if full.ProjectID != nil {
			p = *full.ProjectID
		}
		if full.CreatedBy != caller.Owner && !caller.AdminOf(p) {
			continue
		}
		if q.IssueID != "" && (full.IssueID == nil || *full.IssueID != q.IssueID) ||
			q.ProjectID != "" && p != q.ProjectID || q.UserID != "" && full.CreatedBy != q.UserID {
			continue
		}
		rows = append(rows, full)
	}
	key := func(s *Share) (string, int64) {
		deref := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		switch q.Sort {
		case "uuid":
			return s.UUID, 0
		case "type":
			return s.Type, 0
		case "issue_id":
			return deref(s.IssueID), 0
		case "project_id":
			return deref(s.ProjectID), 0
		case "created_by":
			return s.CreatedBy, 0
		case "created_at":
			return "", s.CreatedAt
		case "updated_at":
			return "", s.UpdatedAt
		case "expiration":
			if s.Expiration == nil {
				return "", 0
			}
			return "", *s.Expiration
		case "opened_count":
			return "", s.OpenedCount
		}
		return "", 0
	}
	slices.SortFunc(rows, func(a, b *Share) int {
		as, an := key(a)
		bs, bn := key(b)
		c := cmp.Or(cmp.Compare(as, bs), cmp.Compare(an, bn), cmp.Compare(a.ID, b.ID))
		if q.Desc {
			return -c
		}
		return c
	})
	ids := []uint64{}
	for _, s := range rows {
		ids = append(ids, s.ID)
	}
	return ids
}

func listPath(q ListQuery) string {
	v := url.Values{}
	if q.Sort != "" {
		v.Set("sort", q.Sort)
	}
	if q.Desc {
		v.Set("sortOrder", "desc")
	}
	if q.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Offset != 0 {
		v.Set("offset", strconv.Itoa(q.Offset))
	}
	for k, val := range map[string]string{"issueId": q.IssueID, "userId": q.UserID, "projectId": q.ProjectID} {
		if val != "" {
			v.Set(k, val)
		}
	}
	return "/webapi/share?" + v.Encode()
}

func ids(shares []Share) []uint64 {
	out := []uint64{}
	for _, s := range shares {
		out = append(out, s.ID)
	}
	return out
}

// TestListMatchesReference checks every sort in both directions, with
// each filter and each kind of caller, whole and page by page.
func TestListMatchesReference(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		all := seedShares(e, 60)
		e.checkIndexes()
		full := getAll(e, all)
		scopes := []struct {
			name   string
			caller *access.Identity
			q      ListQuery
		}{
			{"star admin, everything", root, ListQuery{}},
			{"star admin, project", root, ListQuery{ProjectID: "P2"}},
			{"star admin, user and project", root, ListQuery{UserID: "carol", ProjectID: "P3"}},
			{"star admin, issue", root, ListQuery{IssueID: "I3"}},
			{"star admin, issue and user", root, ListQuery{IssueID: "I1", UserID: "alice"}},
			{"project admin, everything it may see", bob, ListQuery{}},
			{"project admin, its project", bob, ListQuery{ProjectID: "P1"}},
			{"project admin, other project", bob, ListQuery{ProjectID: "P2"}},
			{"project admin, other user", bob, ListQuery{UserID: "alice"}},
			{"project admin, itself", bob, ListQuery{UserID: "bob"}},
			{"user, itself", alice, ListQuery{UserID: "alice"}},
			{"user, a project", alice, ListQuery{ProjectID: "P1"}},
			{"user, another user", alice, ListQuery{UserID: "carol"}},
			{"user, project and other user", alice, ListQuery{ProjectID: "P1", UserID: "carol"}},
			{"no rights", dave, ListQuery{UserID: "alice"}},
		}
		for _, sc := range scopes {
			for _, sort := range SortFields {
				for _, desc := range []bool{false, true} {
					q := sc.q
					q.Sort, q.Desc = sort, desc
					t.Run(fmt.Sprintf("%s/%s/desc=%v", sc.name, sort, desc), func(t *testing.T) {
						want := reference(e, full, sc.caller, q)
						w := e.call(sc.caller, "GET", listPath(q), nil)
						if w.Code != 200 {
							t.Fatalf("status %d: %s", w.Code, w.Body)
						}
						if got := ids(decode[[]Share](t, w)); !slices.Equal(got, want) {
							t.Fatalf("ids\n got %v\nwant %v", got, want)
						}
						if tc := w.Header().Get("X-Total-Count"); tc != strconv.Itoa(len(want)) {
							t.Fatalf("X-Total-Count %s, want %d", tc, len(want))
						}
						var paged []uint64
						for off := 0; off < len(want)+4; off += 4 {
							q.Limit, q.Offset = 4, off
							w := e.call(sc.caller, "GET", listPath(q), nil)
							paged = append(paged, ids(decode[[]Share](t, w))...)
							if tc := w.Header().Get("X-Total-Count"); tc != strconv.Itoa(len(want)) {
								t.Fatalf("page X-Total-Count %s, want %d", tc, len(want))
							}
						}
						if !slices.Equal(paged, want) {
							t.Fatalf("pages\n got %v\nwant %v", paged, want)
						}
					})
				}
			}
		}
	})
}

func TestListDefaultsAndRecords(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		for range 120 {
			e.create(alice, issueShare("I", "P1"))
		}
		w := e.call(alice, "GET", "/webapi/share?userId=alice", nil)
		got := decode[[]Share](t, w)
		if len(got) != 100 || got[0].ID != 1 || got[99].ID != 100 || w.Header().Get("X-Total-Count") != "120" {
			t.Fatalf("default page: %d shares, first %d, total %s", len(got), got[0].ID, w.Header().Get("X-Total-Count"))
		}
		one, _ := e.store.Get(context.Background(), alice, got[5].UUID)
		if mustJSON(t, got[5]) != mustJSON(t, one) {
			t.Fatalf("list record differs from get:\n%s\n%s", mustJSON(t, got[5]), mustJSON(t, one))
		}
		w = e.call(alice, "GET", "/webapi/share?userId=alice&limit=1000&offset=200", nil)
		if body := w.Body.String(); body != "[]\n" || w.Header().Get("X-Total-Count") != "120" {
			t.Fatalf("past the end: %q total %s", body, w.Header().Get("X-Total-Count"))
		}
		w = e.call(dave, "GET", "/webapi/share?userId=alice", nil)
		if w.Body.String() != "[]\n" || w.Header().Get("X-Total-Count") != "0" {
			t.Fatalf("unseen: %q", w.Body)
		}
	})
}

func TestListRefusals(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tests := []struct {
			name   string
			caller *access.Identity
			query  string
			status int
			code   string
			fields []string
		}{
			{"non-admin without userId or projectId", alice, "", 403, "forbidden", nil},
			{"non-admin with only issueId", alice, "issueId=1", 403, "forbidden", nil},
			{"unknown parameters", root, "foo=1&bar=2", 400, "invalid_request", []string{"foo:unknown_parameter", "bar:unknown_parameter"}},
			{"bad values", root, "sort=issueId&sortOrder=up&limit=0&offset=-1", 400, "invalid_request",
				[]string{"sort:invalid", "sortOrder:invalid", "limit:out_of_range", "offset:out_of_range"}},
			{"limit too big and not integers", root, "limit=1001&offset=x", 400, "invalid_request", []string{"limit:out_of_range", "offset:invalid"}},
			{"empty and repeated filters", root, "projectId=&userId=a&userId=b&issueId=%01", 400, "invalid_request",
				[]string{"projectId:required", "userId:invalid", "issueId:invalid"}},
			{"empty sort", root, "sort=", 400, "invalid_request", []string{"sort:invalid"}},
			// Found by FuzzList: url.Values dropped the broken pair.
			{"bad escape", root, "limit=%zz", 400, "invalid_request", nil},
			{"semicolon", root, "projectId=P1;limit=1", 400, "invalid_request", nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				wantProblem(t, e.call(tc.caller, "GET", "/webapi/share?"+tc.query, nil), tc.status, tc.code, tc.fields...)
			})
		}
		for _, q := range []string{"sortOrder=DESC", "sortOrder=asc&limit=1000&offset=0"} {
			if w := e.call(root, "GET", "/webapi/share?"+q, nil); w.Code != 200 {
				t.Fatalf("%s: %d %s", q, w.Code, w.Body)
			}
		}
	})
}

// TestConcurrentPagesSeeEachShareOnce reads all pages at once, from many
// goroutines, for several sorts.
func TestConcurrentPagesSeeEachShareOnce(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		const n = 310
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := e.store.Create(context.Background(), alice, issueShare("I", []string{"P1", "P2"}[i%2])); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		e.checkIndexes()
		for _, q := range []ListQuery{
			{Sort: "created_at", Desc: true, UserID: "alice"},
			{Sort: "uuid", UserID: "alice"},
			{Sort: "project_id", Desc: true, UserID: "alice"},
			{Sort: "id", ProjectID: "P1"},
		} {
			want := 0
			if q.ProjectID != "" {
				want = n / 2
			} else {
				want = n
			}
			seen := make(map[uint64]int)
			var mu sync.Mutex
			for off := 0; off < want; off += 13 {
				wg.Add(1)
				go func(off int) {
					defer wg.Done()
					q := q
					q.Limit, q.Offset = 13, off
					w := e.call(alice, "GET", listPath(q), nil)
					if w.Code != 200 || w.Header().Get("X-Total-Count") != strconv.Itoa(want) {
						t.Errorf("page %d: %d total %s", off, w.Code, w.Header().Get("X-Total-Count"))
						return
					}
					page := decode[[]Share](t, w)
					mu.Lock()
					for _, s := range page {
						seen[s.ID]++
					}
					mu.Unlock()
				}(off)
			}
			wg.Wait()
			if len(seen) != want {
				t.Fatalf("%+v: saw %d shares, want %d", q, len(seen), want)
			}
			for id, c := range seen {
				if c != 1 {
					t.Fatalf("%+v: share %d seen %d times", q, id, c)
				}
			}
		}
	})
}
