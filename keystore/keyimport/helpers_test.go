package keyimport

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const validContracts = `"service":"contracts","name":"ci","owner":"alice","privileges":["get"]`

// env is a key store on a real database (a bbolt file or a PostgreSQL
// schema) with everything needed to open it again.
type env struct {
	db      storage.DB
	backend keystore.Backend
	sealer  *seal.Sealer
	master  []byte
	clock   *testclock.Clock
	keys    *keystore.Keys
}

// stored is every plan, consumer and key a fresh load of the backend
// finds, for tests that a refused or dry import stores nothing.
func (e *env) stored(t testing.TB) []string {
	t.Helper()
	k := e.reopen(t)
	var out []string
	for _, p := range k.ListPlans() {
		out = append(out, "plan "+p.ID)
	}
	for _, c := range k.ListConsumers() {
		out = append(out, "consumer "+c.ID)
	}
	for _, s := range []access.Service{access.ServiceContracts, access.ServiceShare} {
		for _, key := range k.List(s) {
			out = append(out, "key "+key.ID)
		}
	}
	return out
}

func randomKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// newBackend is the key Backend of db's kind.
func newBackend(t testing.TB, db storage.DB) keystore.Backend {
	t.Helper()
	return storetest.Pick[keystore.Backend](t, db,
		func(d *boltdb.DB) (keystore.Backend, error) { return keystore.NewBoltBackend(d) },
		func(d *pgdb.DB) keystore.Backend { return keystore.NewPostgresBackend(d) })
}

func newEnv(t testing.TB, db storage.DB) *env {
	t.Helper()
	master := randomKey(t)
	sealer, err := seal.New(master)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{db: db, backend: newBackend(t, db), sealer: sealer, master: master, clock: testclock.New(t0)}
	e.keys = e.reopen(t)
	return e
}

// reopen loads the keys of the same backend into a fresh Keys.
func (e *env) reopen(t testing.TB) *keystore.Keys {
	t.Helper()
	k, err := keystore.Open(e.backend, e.sealer, e.clock.Now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return k
}

// decodeInput decodes a JSON body into an input, as the admin API does.
func decodeInput[T any](t testing.TB, body string) *T {
	t.Helper()
	in := new(T)
	if err := json.Unmarshal([]byte(body), in); err != nil {
		t.Fatalf("decoding %s: %v", body, err)
	}
	return in
}

var (
	input         = decodeInput[keystore.KeyInput]
	planInput     = decodeInput[keystore.PlanInput]
	consumerInput = decodeInput[keystore.ConsumerInput]
)

func mustCreate(t testing.TB, k *keystore.Keys, body string) keystore.Key {
	t.Helper()
	key, err := k.Create(input(t, body))
	if err != nil {
		t.Fatalf("Create(%s): %v", body, err)
	}
	return key
}

func mustPlan(t testing.TB, k *keystore.Keys, body string) keystore.Plan {
	t.Helper()
	p, err := k.CreatePlan(planInput(t, body))
	if err != nil {
		t.Fatalf("CreatePlan(%s): %v", body, err)
	}
	return p
}

func mustConsumer(t testing.TB, k *keystore.Keys, body string) keystore.Consumer {
	t.Helper()
	c, err := k.CreateConsumer(consumerInput(t, body))
	if err != nil {
		t.Fatalf("CreateConsumer(%s): %v", body, err)
	}
	return c
}

// followingInstance is a second instance on e's PostgreSQL database, with
// a connection pool of its own, following the changes of others as a
// gateway does until the test ends. Its resync comes every hour: only
// the notifications can bring changes in time.
func followingInstance(t *testing.T, e *env) *keystore.Keys {
	t.Helper()
	db2, err := pgdb.Open(context.Background(), pgdb.Config{DSN: pgtest.Shared(t).DSN, Schema: e.db.(*pgdb.DB).Schema(), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	other, err := keystore.Open(keystore.NewPostgresBackend(db2), e.sealer, e.clock.Now)
	if err != nil {
		db2.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		other.Follow(ctx, time.Hour, func(err error) { t.Errorf("follow: %v", err) })
	}()
	t.Cleanup(func() { cancel(); <-done; db2.Close() })
	return other
}

// checkAt runs the key check of token at now.
func checkAt(keys *keystore.Keys, token string, now time.Time) keystore.Decision {
	return keystore.Authorize(&keystore.Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + token},
		ClientIP: netip.MustParseAddr("192.0.2.1"), Method: http.MethodGet, Path: "/webapi/contracts/x", Now: now},
		&contracts.Operations, keys.Lookup)
}

// sameID reports whether two optional ids are the same.
func sameID(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}
