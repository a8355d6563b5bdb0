package share

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/eventstest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/testclock"
)

// Callers of the tests: alice and carol own shares; bob administers P1;
// root administers everything; dave has no rights at all.
var (
	alice = &access.Identity{KeyID: "k-alice", Owner: "alice", Service: access.ServiceShare}
	carol = &access.Identity{KeyID: "k-carol", Owner: "carol", Service: access.ServiceShare}
	bob   = &access.Identity{KeyID: "k-bob", Owner: "bob", Service: access.ServiceShare, AdminProjects: []string{"P1"}}
	root  = &access.Identity{KeyID: "k-root", Owner: "root", Service: access.ServiceShare, AdminProjects: []string{"*"}}
	dave  = &access.Identity{KeyID: "k-dave", Owner: "dave", Service: access.ServiceShare}
)

var testStart = time.Date(2025, 11, 24, 12, 0, 0, 0, time.UTC)

// cheapArgon keeps the tests fast; TestPasswordHashFormat checks the
// default parameters.
var cheapArgon = Argon2Params{Memory: 64, Time: 1, Threads: 1}

type env struct {
	t      *testing.T
	db     storage.DB
	bolt   *bbolt.DB // the bbolt file on bolt, else nil
	pg     *pgdb.DB  // the database on postgres, else nil
	clock  *testclock.Clock
	store  *Store
	api    http.Handler
	viewer http.Handler
	// events records the share events the store emits, in db.
	events *eventstest.Recorder
	// cfg is the store's config, for another store on the same data.
	cfg Config
}

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// newEnv builds the store on db with the Backend of db's backend.
func newEnv(t *testing.T, db storage.DB) *env {
	t.Helper()
	e := envOn(t, db)
	e.t = t
	return e
}

func envOn(tb testing.TB, db storage.DB) *env {
	tb.Helper()
	e := &env{db: db, clock: testclock.New(testStart)}
	var be Backend
	switch d := db.(type) {
	case *boltdb.DB:
		d.Bolt.NoSync = true
		b, err := NewBoltBackend(d)
		if err != nil {
			tb.Fatal(err)
		}
		be, e.bolt = b, d.Bolt
	case *pgdb.DB:
		be, e.pg = NewPostgresBackend(d), d
	default:
		tb.Fatalf("no share backend for %s", db.Backend())
	}
	e.events = eventstest.New(tb, db)
	e.cfg = Config{DB: db, Backend: be, PublicBaseURL: "http://localhost:8080/", CookieKey: bytes.Repeat([]byte{7}, 32),
		Now: e.clock.Now, PasswordParams: cheapArgon, Events: e.events}
	s, err := NewStore(e.cfg)
	if err != nil {
		tb.Fatal(err)
	}
	e.store, e.api, e.viewer = s, NewHandler(s), NewViewer(s, nil)
	return e
}

func (e *env) nowMs() int64 { return e.clock.Now().UnixMilli() }

// call sends an API request as caller (nil: no identity in context).
func (e *env) call(caller *access.Identity, method, path string, body any) *httptest.ResponseRecorder {
	e.t.Helper()
	var rd *bytes.Reader
	switch b := body.(type) {
	case nil:
		rd = bytes.NewReader(nil)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, rd)
	req.RemoteAddr = "198.51.100.7:40000"
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if caller != nil {
		req = req.WithContext(access.WithIdentity(req.Context(), caller))
	}
	w := httptest.NewRecorder()
	e.api.ServeHTTP(w, req)
	return w
}

// create makes a share through the store and fails the test on error.
func (e *env) create(caller *access.Identity, in *CreateRequest) *Share {
	e.t.Helper()
	sh, err := e.store.Create(context.Background(), caller, in)
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
	return sh
}

func (e *env) stored(uuid string) *Record {
	e.t.Helper()
	var r *Record
	if err := e.db.View(context.Background(), func(tx storage.Tx) error {
		var err error
		r, err = e.store.loadByUUID(tx, uuid)
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return r
}

func str(s string) *string { return &s }
func i64(v int64) *int64   { return &v }

func issueShare(issue, project string) *CreateRequest {
	in := &CreateRequest{Type: TypeIssue, IssueID: str(issue)}
	if project != "" {
		in.ProjectID = str(project)
	}
	return in
}

func decode[T any](t *testing.T, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decoding %q: %v", w.Body.String(), err)
	}
	return v
}

// wantProblem checks a problem reply's status, code and field errors
// (field:code pairs, in any order).
func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, code string, fields ...string) problem.Details {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d: %s", w.Code, status, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, problem.ContentType)
	}
	problemtest.SecureHeaders(t, status, w.Header())
	d := decode[problem.Details](t, w)
	if d.Code != code || d.Status != status || d.Detail == "" {
		t.Fatalf("problem %+v, want code %s", d, code)
	}
	var got []string
	for _, fe := range d.Errors {
		got = append(got, fe.Field+":"+fe.Code)
	}
	slices.Sort(got)
	want := slices.Clone(fields)
	slices.Sort(want)
	if len(fields) > 0 && !slices.Equal(got, want) {
		t.Fatalf("field errors %v, want %v", got, want)
	}
	return d
}

// checkIndexes rebuilds every index entry and counter from the stored
// records and compares them with what the buckets hold. PostgreSQL keeps
// its indexes itself: there it checks that the columns agree with the
// records.
func (e *env) checkIndexes() {
	e.t.Helper()
	if e.pg != nil {
		e.checkColumns()
		return
	}
	err := e.bolt.View(func(tx *bbolt.Tx) error {
		want := map[string]string{}
		counts := map[string]uint64{}
		uuids := 0
		err := tx.Bucket(bucketShares).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			for d := range numDims {
				dv, ok := dimValue(&r, d)
				if !ok {
					continue
				}
				for o := range numOrders {
					want[string(indexBuckets[d][o])+"|"+string(indexKey(d, o, dv, &r))] = string(encodeMeta(&r))
				}
			}
			for _, ck := range recordCountKeys(&r) {
				counts[string(ck)]++
			}
			uuids++
			return nil
		})
		if err != nil {
			return err
		}
		got := map[string]string{}
		for d := range numDims {
			for o := range numOrders {
				name := indexBuckets[d][o]
				_ = tx.Bucket(name).ForEach(func(k, v []byte) error {
					got[string(name)+"|"+string(k)] = string(v)
					return nil
				})
			}
		}
		if len(got) != len(want) {
			e.t.Fatalf("index holds %d entries, want %d", len(got), len(want))
		}
		for k, v := range want {
			if got[k] != v {
				e.t.Fatalf("index entry %q is wrong or missing", k)
			}
		}
		gotCounts := map[string]uint64{}
		_ = tx.Bucket(bucketShareCounts).ForEach(func(k, v []byte) error {
			gotCounts[string(k)] = readCount(tx.Bucket(bucketShareCounts), k)
			return nil
		})
		if len(gotCounts) != len(counts) {
			e.t.Fatalf("counters %v, want %v", gotCounts, counts)
		}
		for k, n := range counts {
			if gotCounts[k] != n {
				e.t.Fatalf("counter %q = %d, want %d", k, gotCounts[k], n)
			}
		}
		if n := tx.Bucket(bucketShareUUIDs).Stats().KeyN; n != uuids {
			e.t.Fatalf("uuid index holds %d, want %d", n, uuids)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// activityEntries counts the stored activity entries of every share.
func (e *env) activityEntries() int {
	n := 0
	if e.pg != nil {
		e.t.Helper()
		if err := e.pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM share_activity").Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		return n
	}
	_ = e.bolt.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(bucketShareActivity).Stats().KeyN
		return nil
	})
	return n
}

// checkColumns checks, on PostgreSQL, that every row's indexed columns
// say what its record says.
func (e *env) checkColumns() {
	e.t.Helper()
	rows, err := e.pg.Pool.Query(context.Background(), `SELECT id, uuid::text, type, issue_id, project_id,
		created_by, created_at, updated_at, expiration, opened_count, record FROM shares`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id uint64
		var u, typ, issue, project, creator string
		var created, updated, exp, opened int64
		var raw []byte
		if err := rows.Scan(&id, &u, &typ, &issue, &project, &creator, &created, &updated, &exp, &opened, &raw); err != nil {
			e.t.Fatal(err)
		}
		var r Record
		if err := json.Unmarshal(raw, &r); err != nil {
			e.t.Fatal(err)
		}
		if r.ID != id || r.UUID != u || r.Type != typ || r.IssueID != issue || r.ProjectID != project ||
			r.CreatedBy != creator || r.CreatedAt != created || r.UpdatedAt != updated || r.Expiration != exp {
			e.t.Fatalf("share %d: columns disagree with its record %s", id, raw)
		}
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	// The counters hold what the rows give, and no zero rows.
	var wrong int
	err = e.pg.Pool.QueryRow(context.Background(), `WITH want AS (
		SELECT 'a' AS kind, '' AS a, '' AS b, count(*) AS n FROM shares
		UNION ALL SELECT 'c', created_by, '', count(*) FROM shares GROUP BY created_by
		UNION ALL SELECT 'p', project_id, '', count(*) FROM shares WHERE project_id <> '' GROUP BY project_id
		UNION ALL SELECT 'x', project_id, created_by, count(*) FROM shares WHERE project_id <> '' GROUP BY project_id, created_by
		UNION ALL SELECT 'i', issue_id, '', count(*) FROM shares WHERE issue_id <> '' GROUP BY issue_id)
		SELECT count(*) FROM want FULL JOIN share_counts c USING (kind, a, b)
		WHERE want.n IS DISTINCT FROM c.n AND NOT (want.n = 0 AND c.n IS NULL AND want.kind = 'a')`).Scan(&wrong)
	if err != nil {
		e.t.Fatal(err)
	}
	if wrong != 0 {
		e.t.Fatalf("%d share counters disagree with the rows", wrong)
	}
}
