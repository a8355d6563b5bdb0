package contracts

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/idemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// newIdempotency is the idempotency store of db's kind on the clock now.
func newIdempotency(tb testing.TB, db storage.DB, cfg *Config) *idempotency.Store {
	tb.Helper()
	be := storetest.Pick[idempotency.Backend](tb, db,
		func(d *boltdb.DB) (idempotency.Backend, error) { return idempotency.NewBoltBackend(d) },
		func(d *pgdb.DB) idempotency.Backend { return idempotency.NewPostgresBackend(d) })
	s, err := idempotency.NewStore(idempotency.Config{DB: db, Backend: be, Sealer: cfg.Sealer, Now: cfg.Now})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// withIdempotency is a fixture whose API keeps idempotent replies.
func withIdempotency(t *testing.T, db storage.DB) *fixture {
	t.Helper()
	return newFixtureOn(t, db, func(c *Config) { c.Idempotency = newIdempotency(t, db, c) })
}

// wantReplay fails unless replay is first sent again, marked as such.
const otherBody = `{"templateId":"PAGE-2","name":"Another","signers":[{"fullName":"Sam Signer","accessKind":"url"}]}`

func TestIdempotencyKey(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := withIdempotency(t, db)
		key := func(k string) []string { return []string{idempotency.Header, k} }
		first := f.do(alice, http.MethodPost, Prefix, fullBody, key("order-1")...)
		if first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		id := decodeObject(t, first)["id"].(string)
		contracts := func() int { return f.bucketLen(bucketContracts) }
		before := storetest.Digest(t, db)

		for _, c := range []struct {
			name   string
			body   string
			header []string
			status int
			code   string
		}{
			{"same key, same body: the stored reply", fullBody, key("order-1"), http.StatusCreated, ""},
			{"same key, same body again", fullBody, key("order-1"), http.StatusCreated, ""},
			{"same key, another body", otherBody, key("order-1"), http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused},
			{"same key, the same JSON spaced otherwise", strings.ReplaceAll(fullBody, "\t", " "), key("order-1"), http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused},
			{"same key, a body that is refused anyway", `{"templateId":"nope"}`, key("order-1"), http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused},
			{"a key of 256 characters", fullBody, key(strings.Repeat("x", 256)), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"an empty key", fullBody, key(""), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"a key with a control character", fullBody, key("order\x01"), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"a key with a tab", fullBody, key("order\t1"), http.StatusBadRequest, problem.CodeInvalidRequest},
			{"a key that is not ASCII", fullBody, key("bestellung-ü"), http.StatusBadRequest, problem.CodeInvalidRequest},
		} {
			t.Run(c.name, func(t *testing.T) {
				w := f.do(alice, http.MethodPost, Prefix, c.body, c.header...)
				if c.code == "" {
					idemtest.WantReplay(t, first, w)
					return
				}
				d := decodeProblem(t, w, c.status, c.code)
				if d.Detail == "" {
					t.Error("no detail")
				}
				if c.status == http.StatusBadRequest && (len(d.Errors) != 1 || d.Errors[0].Field != idempotency.Header) {
					t.Errorf("errors %+v, want one naming %s", d.Errors, idempotency.Header)
				}
			})
		}
		if n := contracts(); n != 1 {
			t.Fatalf("%d contracts, want 1", n)
		}
		if storetest.Digest(t, db) != before {
			t.Fatal("a replay or a refusal changed the database")
		}
		// The replayed links are the contract's own, and the stored reply
		// holds none in clear.
		got := f.do(alice, http.MethodGet, Prefix+"/"+id, "")
		for _, sg := range decodeObject(t, first)["signers"].([]any) {
			link := sg.(map[string]any)["accessUrl"].(string)
			if !bytes.Contains(got.Body.Bytes(), []byte(link)) {
				t.Errorf("the stored reply's link %s is not the contract's", link)
			}
			assertNotStored(t, f, strings.TrimPrefix(link, baseURL+"/sign/"))
		}

		t.Run("the same key of another owner is another key", func(t *testing.T) {
			w := f.do(bob, http.MethodPost, Prefix, fullBody, key("order-1")...)
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" || decodeObject(t, w)["id"] == id {
				t.Fatalf("bob: %d %s", w.Code, w.Body)
			}
			idemtest.WantReplay(t, w, f.do(bob, http.MethodPost, Prefix, fullBody, key("order-1")...))
			if n := contracts(); n != 2 {
				t.Fatalf("%d contracts, want 2", n)
			}
		})

		t.Run("a refused create stores nothing: its retry is processed afresh", func(t *testing.T) {
			bad := strings.Replace(fullBody, `"PAGE-1"`, `"PAGE-404"`, 1)
			before := storetest.Digest(t, db)
			for range 2 {
				decodeProblem(t, f.do(alice, http.MethodPost, Prefix, bad, key("order-2")...), http.StatusBadRequest, problem.CodeInvalidRequest)
			}
			if storetest.Digest(t, db) != before {
				t.Fatal("a refused create stored something")
			}
			w := f.do(alice, http.MethodPost, Prefix, fullBody, key("order-2")...)
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" {
				t.Fatalf("the corrected retry: %d %s", w.Code, w.Body)
			}
		})

		t.Run("without a key every create creates", func(t *testing.T) {
			n := contracts()
			for range 2 {
				if w := f.do(alice, http.MethodPost, Prefix, fullBody); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" {
					t.Fatalf("%d %s", w.Code, w.Body)
				}
			}
			if contracts() != n+2 {
				t.Fatalf("%d contracts, want %d", contracts(), n+2)
			}
		})

		t.Run("after 24 h the key is free again and the record is purged", func(t *testing.T) {
			n := contracts()
			f.clock.Advance(idempotency.TTL - time.Millisecond)
			idemtest.WantReplay(t, first, f.do(alice, http.MethodPost, Prefix, fullBody, key("order-1")...))
			f.clock.Advance(time.Millisecond)
			w := f.do(alice, http.MethodPost, Prefix, fullBody, key("order-1")...)
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" || decodeObject(t, w)["id"] == id {
				t.Fatalf("after 24 h: %d %s", w.Code, w.Body)
			}
			if contracts() != n+1 {
				t.Fatalf("%d contracts, want %d", contracts(), n+1)
			}
			// bob's order-1 and alice's order-2 are 24 h old now.
			purged, err := f.store.cfg.Idempotency.Purge(ctx(), 0)
			if err != nil || purged != 2 {
				t.Fatalf("purge: %d, %v; want 2", purged, err)
			}
			idemtest.WantReplay(t, w, f.do(alice, http.MethodPost, Prefix, fullBody, key("order-1")...))
		})
	})
}

// TestIdempotencyKeyConcurrent: 50 requests of one key and body at once
// make exactly one contract; each is answered its 201 (first or
// replayed) or 409.
func TestIdempotencyKeyConcurrent(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := withIdempotency(t, db)
		idemtest.Burst(t, 50, func() *httptest.ResponseRecorder {
			return f.do(alice, http.MethodPost, Prefix, fullBody, idempotency.Header, "burst")
		})
		if n := f.bucketLen(bucketContracts); n != 1 {
			t.Fatalf("%d contracts, want 1", n)
		}
	})
}
