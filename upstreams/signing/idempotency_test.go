package signing

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

// newIdempotency is the idempotency store of db's kind.
func newIdempotency(tb testing.TB, db storage.DB, sealer *seal.Sealer, now func() time.Time) *idempotency.Store {
	tb.Helper()
	be := storetest.Pick[idempotency.Backend](tb, db,
		func(d *boltdb.DB) (idempotency.Backend, error) { return idempotency.NewBoltBackend(d) },
		func(d *pgdb.DB) idempotency.Backend { return idempotency.NewPostgresBackend(d) })
	s, err := idempotency.NewStore(idempotency.Config{DB: db, Backend: be, Sealer: sealer, Now: now})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// postKey creates body as alice with an Idempotency-Key.
func (f *fixture) postKey(body, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, contracts.Prefix, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idempotency.Header, key)
	r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "key-alice", Owner: "alice", Service: access.ServiceContracts}))
	w := httptest.NewRecorder()
	f.api.ServeHTTP(w, r)
	return w
}

func invitingBody(signer, watcher string) string {
	return fmt.Sprintf(`{"templateId":"PAGE-1","name":"Lease","signers":[{"fullName":"Sia Signer","accessKind":"email","email":%q}],`+
		`"watchers":[{"name":"Wes Watcher","email":%q,"notificationKinds":"created"}]}`, signer, watcher)
}

// TestIdempotentCreateMailsOnce: a replayed create, and a burst of one
// key at once, queue the invitation and the watcher's notice once: the
// replies come from the stored record, and the creates that lost the
// race were undone with what they queued.
func TestIdempotentCreateMailsOnce(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		first := f.postKey(invitingBody("sia@example.com", "wes@example.com"), "lease-1")
		if first.Code != http.StatusCreated {
			t.Fatalf("first: %d %s", first.Code, first.Body)
		}
		before := f.digest() // the first's mail delivered
		for range 3 {
			w := f.postKey(invitingBody("sia@example.com", "wes@example.com"), "lease-1")
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" || !bytes.Equal(w.Body.Bytes(), first.Body.Bytes()) {
				t.Fatalf("replay: %d %s", w.Code, w.Body)
			}
		}
		f.unchanged(t, before, "a replay")

		codes := make([]int, 30)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range codes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				codes[i] = f.postKey(invitingBody("burst@example.com", "burst-watch@example.com"), "lease-2").Code
			}()
		}
		close(start)
		wg.Wait()
		for _, c := range codes {
			if c != http.StatusCreated && c != http.StatusConflict {
				t.Fatalf("a burst reply %d", c)
			}
		}
		f.settle()
		want := map[string]int{
			"sia@example.com | Please sign “Lease”":               1,
			"wes@example.com | Contract created: “Lease”":         1,
			"burst@example.com | Please sign “Lease”":             1,
			"burst-watch@example.com | Contract created: “Lease”": 1,
		}
		got := countBy(f.smtp.All())
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%q sent %d times, want %d (all: %v)", k, got[k], n, got)
			}
		}
		if len(got) != len(want) {
			t.Errorf("mails %v, want %v", got, want)
		}
	})
}
