package share

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/idemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// newIdempotencyEnv is newEnv with a store that keeps idempotent
// replies.
func newIdempotencyEnv(t *testing.T, db storage.DB) *env {
	t.Helper()
	e := newEnv(t, db)
	be := storetest.Pick[idempotency.Backend](t, db,
		func(d *boltdb.DB) (idempotency.Backend, error) { return idempotency.NewBoltBackend(d) },
		func(d *pgdb.DB) idempotency.Backend { return idempotency.NewPostgresBackend(d) })
	sealer, err := seal.New(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	idem, err := idempotency.NewStore(idempotency.Config{DB: db, Backend: be, Sealer: sealer, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStore(Config{DB: db, Backend: e.store.be, PublicBaseURL: "http://localhost:8080/", CookieKey: bytes.Repeat([]byte{7}, 32),
		Now: e.clock.Now, PasswordParams: cheapArgon, Idempotency: idem})
	if err != nil {
		t.Fatal(err)
	}
	e.store, e.api, e.viewer = s, NewHandler(s), NewViewer(s, nil)
	return e
}

// post creates body as caller, with the Idempotency-Key key unless it is
// nil.
func (e *env) post(caller *access.Identity, body string, key *string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, Prefix, strings.NewReader(body))
	req.RemoteAddr = "198.51.100.7:40000"
	req.Header.Set("Content-Type", "application/json")
	if key != nil {
		req.Header.Set(idempotency.Header, *key)
	}
	req = req.WithContext(access.WithIdentity(req.Context(), caller))
	w := httptest.NewRecorder()
	e.api.ServeHTTP(w, req)
	return w
}

const shareBody = `{"type":"ISSUE","issueId":"10001","projectId":"P1","password":"open sesame"}`

func TestIdempotencyKey(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newIdempotencyEnv(t, db)
		k := func(s string) *string { return &s }
		first := e.post(alice, shareBody, k("share-1"))
		if first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		uuid := decode[Share](t, first).UUID
		if loc := first.Header().Get("Location"); loc != Prefix+"/"+uuid {
			t.Fatalf("Location %q", loc)
		}
		e.clock.Advance(time.Minute) // a second create would show another time
		before := storetest.Digest(t, db)

		for _, c := range []struct {
			name   string
			body   string
			key    *string
			status int
			code   string
		}{
			{"same key, same body: the stored reply", shareBody, k("share-1"), http.StatusCreated, ""},
			{"same key, same body again", shareBody, k("share-1"), http.StatusCreated, ""},
			{"same key, another body", `{"type":"ISSUE","issueId":"10002"}`, k("share-1"), http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused},
			{"same key, another password", strings.Replace(shareBody, "open sesame", "open sesame!", 1), k("share-1"), http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused},
			{"a key of 256 characters", shareBody, k(strings.Repeat("s", 256)), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"an empty key", shareBody, k(""), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"a key with a control character", shareBody, k("share\x1b1"), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"a key that is not ASCII", shareBody, k("teilen-ä"), http.StatusBadRequest, problem.CodeInvalidRequest},
		} {
			t.Run(c.name, func(t *testing.T) {
				w := e.post(alice, c.body, c.key)
				if c.code == "" {
					idemtest.WantReplay(t, first, w)
					return
				}
				d := wantProblem(t, w, c.status, c.code)
				if c.status == http.StatusBadRequest && (len(d.Errors) != 1 || d.Errors[0].Field != idempotency.Header) {
					t.Errorf("errors %+v, want one naming %s", d.Errors, idempotency.Header)
				}
			})
		}
		if n := e.count(); n != 1 {
			t.Fatalf("%d shares, want 1", n)
		}
		if storetest.Digest(t, db) != before {
			t.Fatal("a replay or a refusal changed the database (a share, an activity entry or a record)")
		}

		t.Run("the same key of another owner is another key", func(t *testing.T) {
			w := e.post(carol, shareBody, k("share-1"))
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" || decode[Share](t, w).UUID == uuid {
				t.Fatalf("carol: %d %s", w.Code, w.Body)
			}
			if n := e.count(); n != 2 {
				t.Fatalf("%d shares, want 2", n)
			}
		})

		t.Run("a refused create stores nothing: its retry is processed afresh", func(t *testing.T) {
			before := storetest.Digest(t, db)
			for range 2 {
				wantProblem(t, e.post(alice, `{"type":"ISSUE"}`, k("share-2")), http.StatusBadRequest, problem.CodeInvalidRequest)
			}
			if storetest.Digest(t, db) != before {
				t.Fatal("a refused create stored something")
			}
			if w := e.post(alice, `{"type":"ISSUE","issueId":"10003"}`, k("share-2")); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" {
				t.Fatalf("the corrected retry: %d %s", w.Code, w.Body)
			}
		})

		t.Run("after 24 h the key is free again and the record is purged", func(t *testing.T) {
			n := e.count()
			e.clock.Advance(idempotency.TTL - time.Minute) // 24 h since the first
			w := e.post(alice, shareBody, k("share-1"))
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" || decode[Share](t, w).UUID == uuid {
				t.Fatalf("after 24 h: %d %s", w.Code, w.Body)
			}
			if e.count() != n+1 {
				t.Fatalf("%d shares, want %d", e.count(), n+1)
			}
			e.clock.Advance(time.Minute) // carol's share-1 and alice's share-2 are 24 h old
			purged, err := e.store.idem.Purge(t.Context(), 0)
			if err != nil || purged != 2 {
				t.Fatalf("purge: %d, %v; want 2", purged, err)
			}
			idemtest.WantReplay(t, w, e.post(alice, shareBody, k("share-1")))
		})
		e.checkIndexes()
	})
}

func TestIdempotencyKeyConcurrent(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newIdempotencyEnv(t, db)
		key := "burst"
		idemtest.Burst(t, 50, func() *httptest.ResponseRecorder { return e.post(alice, shareBody, &key) })
		if n := e.count(); n != 1 {
			t.Fatalf("%d shares, want 1", n)
		}
		e.checkIndexes()
	})
}
