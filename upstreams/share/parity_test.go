package share

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// Values of the parity data set: creators with mixed case and non-ASCII
// bytes (key owners may be any text), ids in mixed case and punctuation
// (printable ASCII), so that byte order and case folding would show.
var (
	parityCreators = []string{"alice", "Alice", "ALICE", "bob", "émile", "Émile", "zoë", "日本", "b", "B_2", "~x"}
	parityProjects = []string{"P1", "p1", "P10", "P2", "proj-A", "PROJ-a", "Z", "_x", "a b"}
	parityIssues   = []string{"I1", "i1", "I10", "I2", "ISS-7", "iss-7", "~", "Z-1", "a"}
)

// paritySeed fixes the data set and the queries.
const paritySeed = 20251124

// parityOps loads the same randomized data set into e through the Store
// API: creates (every type, with and without project, expirations),
// updates, deletes, openings flushed and pending, and a clock that moves
// so that some shares expire and creation times tie.
func parityLoad(t *testing.T, e *env, n int) {
	t.Helper()
	ctx := context.Background()
	rnd := rand.New(rand.NewSource(paritySeed))
	uuid.SetRand(rand.New(rand.NewSource(paritySeed + 1)))
	defer uuid.SetRand(nil)
	var made []*Share
	for i := range n {
		if rnd.Intn(4) == 0 {
			e.clock.Advance(time.Duration(rnd.Intn(3000)) * time.Millisecond)
		}
		caller := &access.Identity{Owner: parityCreators[rnd.Intn(len(parityCreators))], Service: access.ServiceShare}
		project := parityProjects[rnd.Intn(len(parityProjects))]
		var in *CreateRequest
		switch rnd.Intn(5) {
		case 0, 1:
			in = &CreateRequest{Type: TypeIssue, IssueID: str(parityIssues[rnd.Intn(len(parityIssues))])}
			if rnd.Intn(3) > 0 {
				in.ProjectID = str(project)
			}
		case 2:
			in = &CreateRequest{Type: TypeBoard, ProjectID: str(project), Board: &Board{ID: strconv.Itoa(i)}}
		case 3:
			in = &CreateRequest{Type: TypeJQL, ProjectID: str(project), JQL: str("project = " + project)}
		default:
			in = &CreateRequest{Type: TypeTimeline, ProjectID: str(project)}
		}
		switch rnd.Intn(4) {
		case 0:
			in.Expiration = i64(e.nowMs() + int64(rnd.Intn(5)+1)*1000) // ties, and some expire below
		case 1:
			in.ExpirationExpression = &ExpirationExpression{Days: rnd.Intn(30) + 1}
		}
		sh, err := e.store.Create(ctx, caller, in)
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		made = append(made, sh)
	}
	admin := &access.Identity{Owner: "root", Service: access.ServiceShare, AdminProjects: []string{"*"}}
	for range n / 10 {
		e.clock.Advance(time.Duration(rnd.Intn(2000)) * time.Millisecond)
		sh := made[rnd.Intn(len(made))]
		in := &CreateRequest{Type: sh.Type, IssueID: sh.IssueID, ProjectID: sh.ProjectID, Board: sh.Board, JQL: sh.JQL}
		if _, err := e.store.Update(ctx, admin, sh.UUID, in); err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
	}
	for range n / 20 {
		sh := made[rnd.Intn(len(made))]
		if err := e.store.Delete(ctx, admin, sh.UUID); err != nil && !isNotFound(err) {
			t.Fatal(err)
		}
	}
	for round := range 3 {
		for range n {
			sh := made[rnd.Intn(len(made))]
			e.store.recordPageEvent(sh.ID, Activity{Timestamp: e.nowMs(), Source: activitySource, Action: ActionViewed}, true)
		}
		if round < 2 { // the last round stays pending
			if err := e.store.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Openings of a share deleted before the flush are dropped.
	gone := made[0]
	e.store.recordPageEvent(gone.ID, Activity{Timestamp: e.nowMs(), Source: activitySource, Action: ActionViewed}, true)
	_ = e.store.Delete(ctx, admin, gone.UUID)
	e.clock.Advance(3 * time.Second) // expires some
}

func isNotFound(err error) bool {
	d, ok := err.(interface{ Error() string })
	return ok && bytes.Contains([]byte(d.Error()), []byte("no share with this uuid"))
}

// parityQueries generates the list calls compared: every sort in both
// directions under every filter combination, for callers of each kind,
// whole pages and cut ones.
func parityQueries() []struct {
	caller *access.Identity
	q      ListQuery
} {
	rnd := rand.New(rand.NewSource(paritySeed + 2))
	callers := []*access.Identity{
		{Owner: "root", AdminProjects: []string{"*"}},
		{Owner: "Alice", AdminProjects: []string{"P1", "proj-A", "Z"}},
		{Owner: "émile", AdminProjects: []string{"p1"}},
		{Owner: "bob"},
		{Owner: "nobody"},
	}
	pick := func(vals []string) string {
		if rnd.Intn(3) == 0 {
			return ""
		}
		if rnd.Intn(10) == 0 {
			return "missing"
		}
		return vals[rnd.Intn(len(vals))]
	}
	var out []struct {
		caller *access.Identity
		q      ListQuery
	}
	for _, c := range callers {
		for f := range 12 {
			base := ListQuery{}
			switch f {
			case 0: // none
			case 1:
				base.ProjectID = pick(parityProjects)
			case 2:
				base.UserID = pick(parityCreators)
			case 3:
				base.IssueID = pick(parityIssues)
			case 4:
				base.UserID = c.Owner
			default:
				base.ProjectID, base.UserID, base.IssueID = pick(parityProjects), pick(parityCreators), pick(parityIssues)
			}
			for _, sort := range SortFields {
				for _, desc := range []bool{false, true} {
					for _, page := range [][2]int{{1000, 0}, {7, rnd.Intn(40)}, {1 + rnd.Intn(200), rnd.Intn(1500)}} {
						q := base
						q.Sort, q.Desc, q.Limit, q.Offset = sort, desc, page[0], page[1]
						out = append(out, struct {
							caller *access.Identity
							q      ListQuery
						}{c, q})
					}
				}
			}
		}
	}
	return out
}

// TestListParity loads one randomized data set into a bbolt and a
// PostgreSQL store and compares the replies of every generated list call:
// records, order and total.
func TestListParity(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 300
	}
	bolt := newEnv(t, storetest.OpenBolt(t))
	bolt.bolt.MaxBatchDelay = 0 // one writer: do not wait for others to join a batch
	pg := newEnv(t, storetest.OpenPostgres(t))
	start := time.Now()
	parityLoad(t, bolt, n)
	t.Logf("bolt loaded in %v", time.Since(start))
	start = time.Now()
	parityLoad(t, pg, n)
	t.Logf("postgres loaded in %v", time.Since(start))
	start = time.Now()
	defer func() { t.Logf("compared in %v", time.Since(start)) }()
	ctx := context.Background()
	queries := parityQueries()
	matched, refused := 0, 0
	for i, c := range queries {
		b, bt, berr := bolt.store.List(ctx, c.caller, c.q)
		p, pt, perr := pg.store.List(ctx, c.caller, c.q)
		if fmt.Sprint(berr) != fmt.Sprint(perr) {
			t.Fatalf("query %d %s %+v: errors differ: bolt %v, postgres %v", i, c.caller.Owner, c.q, berr, perr)
		}
		bj, _ := json.Marshal(b)
		pj, _ := json.Marshal(p)
		if bt != pt || !bytes.Equal(bj, pj) {
			t.Fatalf("query %d %s %+v: replies differ\nbolt (%d): %.600s\npostgres (%d): %.600s", i, c.caller.Owner, c.q, bt, bj, pt, pj)
		}
		if bt > 0 {
			matched++
		}
		if berr != nil {
			refused++
		}
	}
	t.Logf("%d shares, %d list calls compared: %d with matches, %d refused", n, len(queries), matched, refused)
	if matched < len(queries)/3 {
		t.Fatalf("only %d of %d calls matched anything: the data set does not exercise the list", matched, len(queries))
	}
	// A flush of openings for a share deleted meanwhile writes nothing.
	for _, e := range []*env{bolt, pg} {
		before := e.activityEntries()
		err := e.db.Update(ctx, func(tx storage.Tx) error {
			return e.store.be.AddOpenings(tx, uint64(n+100), 5, []Activity{{Timestamp: e.nowMs(), Source: activitySource, Action: ActionViewed}})
		})
		if err != nil {
			t.Fatalf("%s: openings of a deleted share: %v", e.db.Backend(), err)
		}
		if r, _ := e.storedByID(uint64(n + 100)); r != nil || e.activityEntries() != before {
			t.Fatalf("%s: openings of a deleted share were written", e.db.Backend())
		}
	}
	// Openings and activity agree too.
	for _, id := range []uint64{1, 2, 3, uint64(n / 2), uint64(n)} {
		rb, _ := bolt.storedByID(id)
		rp, _ := pg.storedByID(id)
		if (rb == nil) != (rp == nil) || rb != nil && rb.OpenedCount != rp.OpenedCount {
			t.Fatalf("share %d: stored openings differ: %+v / %+v", id, rb, rp)
		}
	}
	if a, b := bolt.activityEntries(), pg.activityEntries(); a != b {
		t.Fatalf("activity entries: bolt %d, postgres %d", a, b)
	}
}

// storedByID reads share id as stored (flushed openings only).
func (e *env) storedByID(id uint64) (*Record, error) {
	var r *Record
	err := e.db.View(context.Background(), func(tx storage.Tx) error {
		var err error
		r, err = e.store.be.ShareByID(tx, id)
		return err
	})
	return r, err
}
