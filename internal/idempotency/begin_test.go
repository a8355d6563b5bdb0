package idempotency

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
)

// api is a create endpoint built on a Store as the APIs build theirs:
// its "create" stores nothing but the record, and counts itself.
type api struct {
	t       *testing.T
	db      storage.DB
	store   *Store
	clock   *testclock.Clock
	created atomic.Int64
	// inTx and afterSave, when set, run in the create's transaction
	// before and after Save.
	inTx, afterSave func()
}

func newAPI(t *testing.T, db storage.DB) *api {
	t.Helper()
	a := &api{t: t, db: db, clock: testclock.New(t0)}
	var err error
	a.store, err = NewStore(Config{DB: db, Backend: newBackend(t, db), Sealer: testSealer(t), Now: a.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	owner := r.Header.Get("Test-Owner")
	call, ok := a.store.Begin(w, r, owner, r.URL.Path)
	if !ok {
		return
	}
	if call != nil {
		defer call.Done()
	}
	in, _ := io.ReadAll(r.Body)
	if bytes.Contains(in, []byte("invalid")) {
		problem.Write(w, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "refused"))
		return
	}
	n := a.created.Add(1)
	rep := Reply{Status: http.StatusCreated, Location: fmt.Sprintf("%s/%d", r.URL.Path, n),
		Body: fmt.Appendf(nil, `{"id":%d,"secret":"s3cr3t-%d","sent":%q}`+"\n", n, n, in)}
	if call == nil {
		w.Header().Set("Location", rep.Location)
		w.WriteHeader(rep.Status)
		w.Write(rep.Body)
		return
	}
	err := a.db.Batch(r.Context(), func(tx storage.Tx) error {
		if a.inTx != nil {
			a.inTx()
		}
		if err := call.Save(r.Context(), tx, rep); err != nil {
			return err
		}
		if a.afterSave != nil {
			a.afterSave()
		}
		return nil
	})
	if err != nil {
		a.created.Add(-1) // undone
		if !call.Recorded(w, r, err) {
			problem.WriteError(w, err)
		}
		return
	}
	call.Write(w, rep)
}

// post sends body to path as owner with the Idempotency-Key values given.
func post(h http.Handler, owner, path, body string, keys ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Test-Owner", owner)
	for _, k := range keys {
		r.Header.Add(Header, k)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func wantProblem(t *testing.T, w *httptest.ResponseRecorder, status int, code string) problem.Details {
	t.Helper()
	if w.Code != status || w.Header().Get("Content-Type") != problem.ContentType {
		t.Fatalf("status %d (%s), want %d problem; body %s", w.Code, w.Header().Get("Content-Type"), status, w.Body)
	}
	var d problem.Details
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != code || d.Detail == "" {
		t.Fatalf("problem %+v, want code %s with a detail", d, code)
	}
	return d
}

// sameReply fails unless replay is first sent again, marked.
func sameReply(t *testing.T, first, replay *httptest.ResponseRecorder) {
	t.Helper()
	if first.Code != http.StatusCreated || first.Header().Get(ReplayedHeader) != "" {
		t.Fatalf("first reply %d, %s %q", first.Code, ReplayedHeader, first.Header().Get(ReplayedHeader))
	}
	if replay.Code != first.Code || replay.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("replay %d, %s %q; body %s", replay.Code, ReplayedHeader, replay.Header().Get(ReplayedHeader), replay.Body)
	}
	for _, h := range []string{"Location", "Content-Type", "Cache-Control", "X-Content-Type-Options"} {
		if replay.Header().Get(h) != first.Header().Get(h) {
			t.Errorf("%s: replay %q, first %q", h, replay.Header().Get(h), first.Header().Get(h))
		}
	}
	if !bytes.Equal(replay.Body.Bytes(), first.Body.Bytes()) {
		t.Errorf("replay body %q, first %q", replay.Body, first.Body)
	}
}

// holds reports whether any value stored in db contains s in clear.
func holds(t *testing.T, db storage.DB, s string) bool {
	t.Helper()
	found := false
	err := db.View(ctx(), func(tx storage.Tx) error {
		switch db.Backend() {
		case boltdb.Name:
			var walk func(b *bbolt.Bucket)
			walk = func(b *bbolt.Bucket) {
				_ = b.ForEach(func(k, v []byte) error {
					if v == nil {
						walk(b.Bucket(k))
					}
					found = found || bytes.Contains(v, []byte(s)) || bytes.Contains(k, []byte(s))
					return nil
				})
			}
			return boltdb.Of(tx).ForEach(func(_ []byte, b *bbolt.Bucket) error { walk(b); return nil })
		default:
			rows, err := pgdb.Of(tx).Query(ctx(), `SELECT table_name FROM information_schema.tables
				WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`)
			if err != nil {
				return err
			}
			tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			for _, table := range tables {
				var n int
				if err := pgdb.Of(tx).QueryRow(ctx(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+
					" t WHERE strpos(t::text, $1) > 0 OR strpos(t::text, encode(convert_to($1, 'UTF8'), 'hex')) > 0", s).Scan(&n); err != nil {
					return err
				}
				found = found || n > 0
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestIdempotentCreate(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		a := newAPI(t, db)
		const path, body = "/webapi/things", `{"name":"one"}`

		first := post(a, "alice", path, body, "key-1")
		if first.Code != http.StatusCreated || a.created.Load() != 1 {
			t.Fatalf("first: %d %s, %d created", first.Code, first.Body, a.created.Load())
		}
		if holds(t, db, "s3cr3t-1") {
			t.Error("the stored reply holds the body in clear")
		}
		before := storetest.Digest(t, db)

		t.Run("same key, same body: the stored reply, marked, nothing created", func(t *testing.T) {
			for range 2 {
				sameReply(t, first, post(a, "alice", path, body, "key-1"))
			}
			if n := a.created.Load(); n != 1 {
				t.Fatalf("%d created", n)
			}
		})
		t.Run("same key, another body: 422, nothing created", func(t *testing.T) {
			for _, other := range []string{`{"name":"two"}`, body + " ", "", "not even JSON"} {
				wantProblem(t, post(a, "alice", path, other, "key-1"), http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused)
			}
			if n := a.created.Load(); n != 1 {
				t.Fatalf("%d created", n)
			}
		})
		if storetest.Digest(t, db) != before {
			t.Fatal("a replay or a refusal changed the database")
		}

		t.Run("the same key of another owner, or on another path, is another key", func(t *testing.T) {
			for _, c := range []struct{ owner, path string }{{"bob", path}, {"alice", "/webapi/others"}} {
				w := post(a, c.owner, c.path, body, "key-1")
				if w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" || bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
					t.Fatalf("%s on %s: %d %s %s", c.owner, c.path, w.Code, w.Header(), w.Body)
				}
			}
			if n := a.created.Load(); n != 3 {
				t.Fatalf("%d created, want 3", n)
			}
		})

		t.Run("without a key nothing is read or stored", func(t *testing.T) {
			before := storetest.Digest(t, db)
			w := post(a, "alice", path, body)
			if w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			if storetest.Digest(t, db) != before {
				t.Fatal("a create without a key stored a record")
			}
		})

		t.Run("a failed request stores nothing: its retry is processed afresh", func(t *testing.T) {
			before := storetest.Digest(t, db)
			for range 2 {
				wantProblem(t, post(a, "alice", path, `{"name":"invalid"}`, "key-2"), http.StatusBadRequest, problem.CodeInvalidRequest)
			}
			if storetest.Digest(t, db) != before {
				t.Fatal("a refused request stored a record")
			}
			if w := post(a, "alice", path, `{"name":"valid now"}`, "key-2"); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" {
				t.Fatalf("the corrected retry: %d %s", w.Code, w.Body)
			}
		})

		t.Run("after 24 h the key is free again and the record is purged", func(t *testing.T) {
			n := a.created.Load()
			a.clock.Advance(TTL - time.Millisecond)
			sameReply(t, first, post(a, "alice", path, body, "key-1"))
			if p, err := a.store.Purge(ctx(), 0); err != nil || p != 0 {
				t.Fatalf("purge before 24 h: %d, %v", p, err)
			}
			a.clock.Advance(time.Millisecond)
			// Read, ignored though not purged yet.
			again := post(a, "alice", path, body, "key-1")
			if again.Code != http.StatusCreated || again.Header().Get(ReplayedHeader) != "" || a.created.Load() != n+1 {
				t.Fatalf("after 24 h: %d %s %s", again.Code, again.Header(), again.Body)
			}
			// The others of the first hour are purged; the new one stays.
			a.clock.Advance(time.Hour)
			p, err := a.store.Purge(ctx(), 0)
			if err != nil || p != 3 {
				t.Fatalf("purge: %d, %v; want the 3 records of the first hour", p, err)
			}
			if p, err := a.store.Purge(ctx(), 0); err != nil || p != 0 {
				t.Fatalf("second purge: %d, %v", p, err)
			}
			sameReply(t, again, post(a, "alice", path, body, "key-1"))
			for _, c := range []struct{ owner, path, key string }{{"bob", path, "key-1"}, {"alice", "/webapi/others", "key-1"}, {"alice", path, "key-2"}} {
				if r := lookup(t, db, a.store.be, ScopeID(c.owner, c.path, c.key), t0); r != nil {
					t.Errorf("%+v: not purged", c)
				}
			}
		})
	})
}

func TestBadKeys(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		a := newAPI(t, db)
		before := storetest.Digest(t, db)
		for _, c := range []struct {
			name string
			keys []string
			code string
		}{
			{"256 characters", []string{strings.Repeat("k", 256)}, "too_long"},
			{"empty", []string{""}, "required"},
			{"a control character", []string{"key\x01"}, "invalid"},
			{"a tab", []string{"key\tone"}, "invalid"},
			{"DEL", []string{"key\x7f"}, "invalid"},
			{"not ASCII", []string{"schlüssel"}, "invalid"},
			{"two headers", []string{"a", "b"}, "invalid"},
		} {
			t.Run(c.name, func(t *testing.T) {
				d := wantProblem(t, post(a, "alice", "/webapi/things", `{}`, c.keys...), http.StatusBadRequest, problem.CodeInvalidRequest)
				if len(d.Errors) != 1 || d.Errors[0].Field != Header || d.Errors[0].Code != c.code || d.Errors[0].Message != d.Detail {
					t.Errorf("errors %+v, want one of field %s, code %s", d.Errors, Header, c.code)
				}
			})
		}
		if a.created.Load() != 0 || storetest.Digest(t, db) != before {
			t.Fatal("a bad key created or stored something")
		}
		for _, key := range []string{strings.Repeat("k", 255), `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, " ~!{}", "x"} {
			if w := post(a, "alice", "/webapi/things", `{}`, key); w.Code != http.StatusCreated {
				t.Errorf("key %q: %d %s", key, w.Code, w.Body)
			}
		}
	})
}

func TestStillRunning(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		a := newAPI(t, db)
		g := newGate(t)
		a.inTx = g.wait
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(a, "alice", "/webapi/things", `{"n":1}`, "slow") }()
		<-g.entered
		for range 2 {
			r := post(a, "alice", "/webapi/things", `{"n":1}`, "slow")
			wantProblem(t, r, http.StatusConflict, problem.CodeConflict)
			if r.Header().Get("Retry-After") != "1" {
				t.Errorf("Retry-After %q", r.Header().Get("Retry-After"))
			}
		}
		g.release()
		first := <-done
		sameReply(t, first, post(a, "alice", "/webapi/things", `{"n":1}`, "slow"))
		if n := a.created.Load(); n != 1 {
			t.Fatalf("%d created, want 1", n)
		}
	})
}

// gate holds the first caller of wait until release, which the test's
// end calls too, so that a failing test leaves no transaction open.
type gate struct {
	entered, released chan struct{}
	in, out           sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}), released: make(chan struct{})}
	t.Cleanup(g.release)
	return g
}

func (g *gate) wait() { g.in.Do(func() { close(g.entered); <-g.released }) }

func (g *gate) release() { g.out.Do(func() { close(g.released) }) }

// concurrent sends n requests of one key and body at once through the
// handlers (round robin) and checks that exactly one created: every
// reply is that create's 201, first or replayed, or a 409.
func concurrent(t *testing.T, n int, handlers []http.Handler, created func() int64) {
	t.Helper()
	replies := make([]*httptest.ResponseRecorder, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = post(handlers[i%len(handlers)], "alice", "/webapi/things", `{"same":true}`, "one-key")
		}()
	}
	close(start)
	wg.Wait()
	var fresh *httptest.ResponseRecorder
	counts := map[string]int{}
	for _, r := range replies {
		switch {
		case r.Code == http.StatusCreated && r.Header().Get(ReplayedHeader) == "":
			counts["created"]++
			fresh = r
		case r.Code == http.StatusCreated:
			counts["replayed"]++
		case r.Code == http.StatusConflict:
			counts["conflict"]++
		default:
			t.Fatalf("reply %d %s", r.Code, r.Body)
		}
	}
	t.Logf("%d at once: %v", n, counts)
	if counts["created"] != 1 || created() != 1 {
		t.Fatalf("%d fresh 201s, %d created; want exactly 1 (%v)", counts["created"], created(), counts)
	}
	for _, r := range replies {
		if r.Code == http.StatusCreated && r != fresh {
			sameReply(t, fresh, r)
		}
	}
}

func TestConcurrentDuplicates(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		a := newAPI(t, db)
		concurrent(t, 50, []http.Handler{a}, a.created.Load)
	})
}

// TestInstances: two Stores on one PostgreSQL schema, as two gateway
// instances, each with its own in-memory set: the advisory lock tells
// one that the other's transaction holds the key, at once.
func TestInstances(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.Schema(t)
	open := func() storage.DB {
		db, err := pgdb.Open(ctx(), pgdb.Config{DSN: srv.DSN, Schema: schema, MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	one, two := newAPI(t, open()), newAPI(t, open())
	created := func() int64 { return one.created.Load() + two.created.Load() }

	t.Run("while one instance's create runs, the other answers 409", func(t *testing.T) {
		g := newGate(t)
		one.afterSave = g.wait
		defer func() { one.afterSave = nil }()
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(one, "alice", "/webapi/things", `{"n":1}`, "held") }()
		<-g.entered
		// one's record is not committed, so two's lookup finds none and
		// its own set holds nothing: its Save meets one's lock.
		wantProblem(t, post(two, "alice", "/webapi/things", `{"n":1}`, "held"), http.StatusConflict, problem.CodeConflict)
		g.release()
		first := <-done
		sameReply(t, first, post(two, "alice", "/webapi/things", `{"n":1}`, "held"))
		if n := created(); n != 1 {
			t.Fatalf("%d created, want 1", n)
		}
	})

	t.Run("a lock held by another transaction is ErrRunning at once", func(t *testing.T) {
		rec := record("locked", t0, "x")
		g := newGate(t)
		errc := make(chan error, 1)
		go func() {
			errc <- one.db.Update(ctx(), func(tx storage.Tx) error {
				if _, err := one.store.be.Save(ctx(), tx, rec, t0); err != nil {
					return err
				}
				g.wait()
				return nil
			})
		}()
		<-g.entered
		err := two.db.Update(ctx(), func(tx storage.Tx) error {
			_, err := two.store.be.Save(ctx(), tx, record("locked", t0, "y"), t0)
			return err
		})
		if err != ErrRunning {
			t.Fatalf("save while another transaction holds the key: %v, want ErrRunning", err)
		}
		g.release()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		var live *Record
		if err := two.db.Update(ctx(), func(tx storage.Tx) error {
			var err error
			live, err = two.store.be.Save(ctx(), tx, record("locked", t0, "z"), t0)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		sameRecord(t, live, rec)
	})

	t.Run("50 at once over both instances: exactly one create", func(t *testing.T) {
		one.created.Store(0)
		two.created.Store(0)
		concurrent(t, 50, []http.Handler{one, two}, created)
	})

	t.Run("a record committed by the other instance since the lookup is replayed, not created again", func(t *testing.T) {
		// one's create waits in its transaction, before its Save, until
		// two has created and committed with the same key.
		before := created()
		g := newGate(t)
		one.inTx = g.wait
		defer func() { one.inTx = nil }()
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- post(one, "alice", "/webapi/things", `{"n":2}`, "raced") }()
		<-g.entered
		fresh := post(two, "alice", "/webapi/things", `{"n":2}`, "raced")
		g.release()
		sameReply(t, fresh, <-done)
		if n := created() - before; n != 1 {
			t.Fatalf("%d created, want 1", n)
		}
	})
}
