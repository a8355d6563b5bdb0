package webhook

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/sealtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestMain stops the throwaway PostgreSQL that storetest starts.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var testSealer = sealtest.Sealer

// newBackend is the Backend of db's kind.
func newBackend(t testing.TB, db storage.DB) Backend {
	t.Helper()
	return storetest.Pick[Backend](t, db,
		func(d *boltdb.DB) (Backend, error) { return NewBoltBackend(d) },
		func(d *pgdb.DB) Backend { return NewPostgresBackend(d) })
}

// loopbackTargets allow the tests' receivers, on loopback.
var loopbackTargets = &Targets{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// newStore is a Store on db with clock now (time.Now if nil), whose
// deliveries may reach loopback.
func newStore(t testing.TB, db storage.DB, now func() time.Time) *Store {
	t.Helper()
	s, err := NewStore(Config{DB: db, Backend: newBackend(t, db), Sealer: testSealer, Now: now, Targets: loopbackTargets})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fastConfig is a worker configuration for tests: short delays, a short
// timeout, no long poll.
func fastConfig() WorkerConfig {
	return WorkerConfig{
		AttemptTimeout: 2 * time.Second,
		PollInterval:   200 * time.Millisecond,
		BaseDelay:      20 * time.Millisecond,
		MaxDelay:       100 * time.Millisecond,
	}
}

// startWorker runs a worker on s until the test ends.
func startWorker(t testing.TB, s *Store, cfg WorkerConfig) *Worker {
	t.Helper()
	w := NewWorker(s, cfg)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		w.Stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	return w
}

// received is one request an endpoint got.
type received struct {
	header http.Header
	body   []byte
}

// endpoint is a test receiver of deliveries: it answers with the status
// that reply gives for the request's number (from 1), 204 by default.
type endpoint struct {
	*httptest.Server
	mu    sync.Mutex
	got   []received
	reply func(n int, w http.ResponseWriter, r *http.Request)
}

func newEndpoint(t testing.TB, reply func(n int, w http.ResponseWriter, r *http.Request)) *endpoint {
	e := &endpoint{reply: reply}
	e.Server = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(e.Close)
	return e
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.got = append(e.got, received{header: r.Header.Clone(), body: b})
	n := len(e.got)
	e.mu.Unlock()
	if e.reply != nil {
		e.reply(n, w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (e *endpoint) requests() []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.got...)
}

// waitRequests waits until the endpoint has received n requests.
func (e *endpoint) waitRequests(t testing.TB, n int) []received {
	t.Helper()
	testwait.For(t, testwait.Generous, "deliveries to the endpoint", func() bool { return len(e.requests()) >= n })
	return e.requests()
}

// subscribe creates a subscription to url through the store.
func subscribe(t testing.TB, s *Store, url string, evs []string, owners []string) Subscription {
	t.Helper()
	in := &Input{URL: patch.Some(url), Events: patch.Some(evs)}
	if owners != nil {
		in.Owners = patch.Some(owners)
	}
	sub, err := s.Create(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// emit writes one event through the Sink in a transaction of its own.
func emit(t testing.TB, s *Store, typ, owner string, data any) {
	t.Helper()
	raw, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(context.Background(), func(tx storage.Tx) error {
		return s.Emit(tx, events.Event{Type: typ, Owner: owner, At: time.Now(), Data: raw})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// verify checks a request's signature with the Standard Webhooks library,
// an implementation independent of this package's.
func verify(t testing.TB, secret string, r received) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := wh.Verify(r.body, r.header); err != nil {
		t.Errorf("signature does not verify: %v (headers %v)", err, r.header)
	}
}

// attempts reads subscription id's log.
func attempts(t testing.TB, s *Store, id string) []Attempt {
	t.Helper()
	as, err := s.Deliveries(context.Background(), id, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	return as
}

// pending counts the deliveries and events still queued.
func pending(t testing.TB, s *Store) (deliveries, evs int) {
	t.Helper()
	deliveries, evs, err := countPending(s)
	if err != nil {
		t.Fatal(err)
	}
	return deliveries, evs
}

// countPending is pending for goroutines other than the test's.
func countPending(s *Store) (deliveries, evs int, err error) {
	err = s.db.View(context.Background(), func(tx storage.Tx) error {
		switch s.db.Backend() {
		case boltdb.Name:
			b, err := openBuckets(tx)
			if err != nil {
				return err
			}
			deliveries, evs = b.dlv.Stats().KeyN, b.ev.Stats().KeyN
			return nil
		default:
			q := pgdb.Of(tx)
			if err := q.QueryRow(context.Background(), "SELECT count(*) FROM webhook_deliveries").Scan(&deliveries); err != nil {
				return err
			}
			return q.QueryRow(context.Background(), "SELECT count(*) FROM webhook_events").Scan(&evs)
		}
	})
	return deliveries, evs, err
}

// pgOf is the pgx transaction of a PostgreSQL tx.
var pgOf = pgdb.Of

// eventOf is an event of type typ with data.
func eventOf(typ, data string) events.Event {
	return events.Event{Type: typ, Owner: "alice", At: time.Now(), Data: json.RawMessage(data)}
}
