package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// outcomes counts OnOutcome's calls.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) add(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[s]++
}

func (o *outcomes) get(s string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[s]
}

// startCountingWorker runs a worker of fastConfig on s until the test
// ends, counting its outcomes.
func startCountingWorker(t testing.TB, s *Store) *outcomes {
	out := new(outcomes)
	cfg := fastConfig()
	cfg.OnOutcome = out.add
	startWorker(t, s, cfg)
	return out
}

func TestDelivery(t *testing.T) { storetest.Run(t, testDelivery) }

func testDelivery(t *testing.T, db storage.DB) {
	s := newStore(t, db, nil)
	out := startCountingWorker(t, s)

	t.Run("a delivery is a signed Standard Webhooks POST", func(t *testing.T) {
		ep := newEndpoint(t, nil)
		sub := subscribe(t, s, ep.URL+"/hooks?tenant=1", []string{"contract.signed"}, nil)
		before := time.Now()
		emit(t, s, "contract.signed", "alice", map[string]string{"contractId": "c-1", "signerId": "s-1"})
		r := ep.waitRequests(t, 1)[0]
		verify(t, sub.Secret, r)
		h := r.header
		ts, _ := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
		if !strings.HasPrefix(h.Get("webhook-id"), "msg_") || ts < before.Unix() || ts > time.Now().Unix() ||
			h.Get("Content-Type") != "application/json" || !strings.Contains(h.Get("User-Agent"), "keygate") ||
			!strings.HasPrefix(h.Get("webhook-signature"), "v1,") || strings.Contains(h.Get("webhook-signature"), " ") {
			t.Errorf("headers %v", h)
		}
		var b struct {
			Type      string
			Timestamp string
			Data      map[string]string
		}
		if err := json.Unmarshal(r.body, &b); err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339Nano, b.Timestamp)
		if b.Type != "contract.signed" || err != nil || at.Location() != time.UTC || b.Data["contractId"] != "c-1" ||
			b.Data["signerId"] != "s-1" || !strings.HasPrefix(string(r.body), `{"type":"contract.signed","timestamp":"`) {
			t.Errorf("body %s", r.body)
		}
		testwait.For(t, testwait.Generous, "the attempt in the log", func() bool { return len(attempts(t, s, sub.ID)) == 1 })
		a := attempts(t, s, sub.ID)[0]
		if a.MessageID != h.Get("webhook-id") || a.Event != "contract.signed" || a.Attempt != 1 || a.Status != 204 ||
			a.Error != "" || a.Timestamp.Unix() != ts || a.DurationMs < 0 {
			t.Errorf("log %+v", a)
		}
		testwait.For(t, testwait.Generous, "nothing pending", func() bool { d, e := pending(t, s); return d == 0 && e == 0 })
		if out.get(OutcomeSent) < 1 {
			t.Errorf("outcomes %v", out.n)
		}
		deleteSub(t, s, sub.ID)
	})

	t.Run("failed attempts are retried with the same message until a 2xx", func(t *testing.T) {
		ep := newEndpoint(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader([]int{500, 503, 200}[min(n, 3)-1])
		})
		sub := subscribe(t, s, ep.URL, []string{"share.viewed"}, nil)
		retries := out.get(OutcomeRetry)
		emit(t, s, "share.viewed", "bob", map[string]string{"shareId": "sh-1"})
		got := ep.waitRequests(t, 3)
		for i, r := range got {
			verify(t, sub.Secret, r)
			if r.header.Get("webhook-id") != got[0].header.Get("webhook-id") || string(r.body) != string(got[0].body) {
				t.Errorf("attempt %d: id %s body %s; first %s %s", i+1, r.header.Get("webhook-id"), r.body,
					got[0].header.Get("webhook-id"), got[0].body)
			}
		}
		testwait.For(t, testwait.Generous, "three attempts logged", func() bool { return len(attempts(t, s, sub.ID)) == 3 })
		log := attempts(t, s, sub.ID)
		for i, want := range []struct {
			attempt, status int
			err             string
		}{{3, 200, ""}, {2, 503, "HTTP 503"}, {1, 500, "HTTP 500"}} {
			if a := log[i]; a.Attempt != want.attempt || a.Status != want.status || a.Error != want.err ||
				a.MessageID != got[0].header.Get("webhook-id") {
				t.Errorf("log[%d] = %+v, want %+v", i, a, want)
			}
		}
		if !log[0].Timestamp.After(log[2].Timestamp) {
			t.Errorf("log not newest first: %v", log)
		}
		if n := out.get(OutcomeRetry) - retries; n != 2 {
			t.Errorf("%d retries counted, want 2", n)
		}
		deleteSub(t, s, sub.ID)
	})

	t.Run("a redirect is a failed attempt, not followed", func(t *testing.T) {
		target := newEndpoint(t, nil)
		ep := newEndpoint(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL, http.StatusFound)
		})
		sub := subscribe(t, s, ep.URL, []string{"contract.created"}, nil)
		emit(t, s, "contract.created", "alice", map[string]string{})
		ep.waitRequests(t, 2) // retried
		testwait.For(t, testwait.Generous, "the attempt logged", func() bool { return len(attempts(t, s, sub.ID)) >= 1 })
		a := attempts(t, s, sub.ID)
		last := a[len(a)-1]
		if last.Status != 302 || !strings.Contains(last.Error, "redirects are not followed") {
			t.Errorf("log %+v", last)
		}
		deleteSub(t, s, sub.ID)
		if n := len(target.requests()); n != 0 {
			t.Errorf("the redirect was followed %d times", n)
		}
	})

	t.Run("rollback of the emitting transaction: no delivery", func(t *testing.T) {
		ep := newEndpoint(t, nil)
		sub := subscribe(t, s, ep.URL, []string{"contract.deleted"}, nil)
		rollback := errors.New("the change failed")
		err := db.Update(context.Background(), func(tx storage.Tx) error {
			if err := s.Emit(tx, eventOf("contract.deleted", `{"contractId":"rolled-back"}`)); err != nil {
				return err
			}
			return rollback
		})
		if !errors.Is(err, rollback) {
			t.Fatal(err)
		}
		emit(t, s, "contract.deleted", "alice", map[string]string{"contractId": "committed"})
		ep.waitRequests(t, 1)
		testwait.For(t, testwait.Generous, "nothing pending", func() bool { d, e := pending(t, s); return d == 0 && e == 0 })
		if got := ep.requests(); len(got) != 1 || !strings.Contains(string(got[0].body), `"committed"`) {
			t.Errorf("delivered %d: %s", len(got), got[0].body)
		}
		deleteSub(t, s, sub.ID)
	})

	t.Run("events and owners filters, disabled subscriptions", func(t *testing.T) {
		epA, epB, epC := newEndpoint(t, nil), newEndpoint(t, nil), newEndpoint(t, nil)
		a := subscribe(t, s, epA.URL, []string{"contract.signed"}, []string{"alice"})
		b := subscribe(t, s, epB.URL, []string{"contract.signed", "share.viewed"}, nil)
		c := subscribe(t, s, epC.URL, []string{"contract.signed", "share.viewed", "contract.created"}, nil)
		if _, err := s.Update(context.Background(), c.ID, &Input{Enabled: patch.Some(false)}); err != nil {
			t.Fatal(err)
		}
		emit(t, s, "contract.signed", "alice", map[string]string{"n": "1"})
		emit(t, s, "contract.signed", "bob", map[string]string{"n": "2"})
		emit(t, s, "share.viewed", "alice", map[string]string{"n": "3"})
		emit(t, s, "contract.created", "alice", map[string]string{"n": "4"})
		epB.waitRequests(t, 3)
		testwait.For(t, testwait.Generous, "nothing pending", func() bool { d, e := pending(t, s); return d == 0 && e == 0 })
		bodies := func(ep *endpoint) string {
			var ns []string
			for _, r := range ep.requests() {
				var b struct{ Data map[string]string }
				_ = json.Unmarshal(r.body, &b)
				ns = append(ns, b.Data["n"])
			}
			return strings.Join(ns, ",")
		}
		if got := bodies(epA); got != "1" {
			t.Errorf("alice's contract.signed subscription got %q", got)
		}
		if got := bodies(epB); len(got) != 5 || strings.Contains(got, "4") {
			t.Errorf("every owner's contract.signed and share.viewed got %q", got)
		}
		if got := bodies(epC); got != "" {
			t.Errorf("the disabled subscription got %q", got)
		}
		for _, id := range []string{a.ID, b.ID, c.ID} {
			deleteSub(t, s, id)
		}
	})

	for _, how := range []string{"deleted", "disabled"} {
		t.Run("a "+how+" subscription's deliveries stop", func(t *testing.T) {
			ep := newEndpoint(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) })
			sub := subscribe(t, s, ep.URL, []string{"share.deleted"}, nil)
			emit(t, s, "share.deleted", "alice", map[string]string{})
			ep.waitRequests(t, 2)
			if how == "deleted" {
				deleteSub(t, s, sub.ID)
			} else if _, err := s.Update(context.Background(), sub.ID, &Input{Enabled: patch.Some(false)}); err != nil {
				t.Fatal(err)
			}
			n := len(ep.requests())
			if d, _ := pending(t, s); d != 0 {
				t.Errorf("%d deliveries still pending", d)
			}
			// Several retry delays later, at most the attempt that was in
			// flight has come.
			other := newEndpoint(t, nil)
			o := subscribe(t, s, other.URL, []string{"share.deleted"}, nil)
			for i := range 3 {
				emit(t, s, "share.deleted", "alice", map[string]string{})
				other.waitRequests(t, i+1)
				time.Sleep(fastConfig().MaxDelay)
			}
			if got := len(ep.requests()); got > n+1 {
				t.Errorf("%d attempts after the subscription was %s", got-n, how)
			}
			deleteSub(t, s, o.ID)
			if how == "disabled" {
				deleteSub(t, s, sub.ID)
			}
		})
	}
}

func deleteSub(t testing.TB, s *Store, id string) {
	t.Helper()
	if err := s.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// TestAttemptLimits: timeouts, the https rule, https itself, and the
// concurrency bound per endpoint. One backend is enough: none of it is
// storage.
func TestAttemptLimits(t *testing.T) {
	db := storetest.OpenBolt(t)
	s := newStore(t, db, nil)
	cfg := fastConfig()
	// Only the first subtest is about the timeout, and has a worker of
	// its own; here an attempt (a TLS handshake too) may take as long as
	// a loaded machine makes it.
	cfg.AttemptTimeout = testwait.Generous
	cfg.Concurrency, cfg.PerEndpoint = 4, 2
	tlsServer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }))
	t.Cleanup(tlsServer.Close)
	pool := x509.NewCertPool()
	pool.AddCert(tlsServer.Certificate())
	cfg.TLSConfig = &tls.Config{RootCAs: pool}
	w := startWorker(t, s, cfg)

	t.Run("an attempt times out", func(t *testing.T) {
		// A store of its own, so that this worker alone attempts.
		s := newStore(t, storetest.OpenBolt(t), nil)
		cfg := fastConfig()
		cfg.AttemptTimeout = 300 * time.Millisecond
		startWorker(t, s, cfg)
		release := make(chan struct{})
		defer close(release)
		ep := newEndpoint(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		sub := subscribe(t, s, ep.URL, []string{"contract.expired"}, nil)
		emit(t, s, "contract.expired", "alice", map[string]string{})
		testwait.For(t, testwait.Generous, "the attempt logged", func() bool { return len(attempts(t, s, sub.ID)) >= 1 })
		a := attempts(t, s, sub.ID)
		if last := a[len(a)-1]; last.Status != 0 || last.Error != "no reply within 300ms" || last.DurationMs < 250 {
			t.Errorf("log %+v", last)
		}
		deleteSub(t, s, sub.ID)
	})

	t.Run("https deliveries", func(t *testing.T) {
		sub := subscribe(t, s, tlsServer.URL, []string{"contract.archived"}, nil)
		emit(t, s, "contract.archived", "alice", map[string]string{})
		testwait.For(t, testwait.Generous, "the attempt logged", func() bool { return len(attempts(t, s, sub.ID)) >= 1 })
		if a := attempts(t, s, sub.ID)[0]; a.Status != 200 || a.Error != "" {
			t.Errorf("log %+v", a)
		}
		deleteSub(t, s, sub.ID)
	})

	t.Run("plain http goes to loopback hosts and addresses only", func(t *testing.T) {
		// A URL stored before the rule (or by hand) is refused unsent.
		r := &Record{Subscription: Subscription{ID: "legacy", URL: "http://192.0.2.1/hook", Events: []string{"contract.completed"},
			Owners: []string{}, Enabled: true, CreationTime: time.Now()}, SealedSecret: testSealer.Seal([]byte(newSecret()), sealAAD("legacy"))}
		if err := db.Update(context.Background(), func(tx storage.Tx) error { return s.backend.PutSubscription(tx, r) }); err != nil {
			t.Fatal(err)
		}
		emit(t, s, "contract.completed", "alice", map[string]string{})
		testwait.For(t, testwait.Generous, "the attempt logged", func() bool { return len(attempts(t, s, "legacy")) >= 1 })
		if a := attempts(t, s, "legacy")[0]; a.Status != 0 || !strings.Contains(a.Error, "neither https nor http to a loopback host") {
			t.Errorf("log %+v", a)
		}
		deleteSub(t, s, "legacy")
		// A name that resolves to another address is refused at the dial,
		// before a packet is sent, even in a network the operator allows.
		s.SetTargets(&Targets{Allow: append([]netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, loopbackTargets.Allow...)})
		defer s.SetTargets(loopbackTargets)
		req, _ := http.NewRequest("POST", "http://192.0.2.1:9/", nil)
		if _, err := w.plain.Do(req); err == nil || !strings.Contains(err.Error(), "loopback addresses only") {
			t.Errorf("plain client dialled a non-loopback address: %v", err)
		}
	})

	t.Run("a dead endpoint holds up no other endpoint", func(t *testing.T) {
		release := make(chan struct{})
		var inFlight, most atomic.Int32
		dead := newEndpoint(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			defer inFlight.Add(-1)
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		live := newEndpoint(t, nil)
		d := subscribe(t, s, dead.URL, []string{"share.created"}, nil)
		l := subscribe(t, s, live.URL, []string{"share.updated"}, nil)
		for range 8 {
			emit(t, s, "share.created", "alice", map[string]string{})
		}
		dead.waitRequests(t, 2)
		emit(t, s, "share.updated", "alice", map[string]string{})
		live.waitRequests(t, 1)
		if m := most.Load(); m > 2 {
			t.Errorf("%d attempts at once to one endpoint, bound 2", m)
		}
		close(release)
		deleteSub(t, s, d.ID)
		deleteSub(t, s, l.ID)
	})
}

// TestRotation: both secrets sign until the old one's 24 h are over.
func TestRotation(t *testing.T) { storetest.Run(t, testRotation) }

func testRotation(t *testing.T, db storage.DB) {
	clock := testclock.New(time.Now())
	s := newStore(t, db, clock.Now)
	startWorker(t, s, fastConfig())
	ep := newEndpoint(t, nil)
	sub := subscribe(t, s, ep.URL, []string{"contract.opened"}, nil)
	rotated, err := s.RotateSecret(context.Background(), sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, s, "contract.opened", "alice", map[string]string{})
	r := ep.waitRequests(t, 1)[0]
	if sigs := strings.Split(r.header.Get("webhook-signature"), " "); len(sigs) != 2 {
		t.Fatalf("signatures %q, want the new and the old", r.header.Get("webhook-signature"))
	}
	verify(t, rotated.Secret, r)
	verify(t, sub.Secret, r)
	newSig, _ := Sign(rotated.Secret, r.header.Get("webhook-id"), clock.Now().Unix(), r.body)
	if !strings.HasPrefix(r.header.Get("webhook-signature"), newSig+" ") {
		t.Errorf("the new secret's signature is not first: %q", r.header.Get("webhook-signature"))
	}

	clock.Advance(RotationOverlap + time.Second)
	emit(t, s, "contract.opened", "alice", map[string]string{})
	r = ep.waitRequests(t, 2)[1]
	if sigs := strings.Split(r.header.Get("webhook-signature"), " "); len(sigs) != 1 {
		t.Fatalf("signatures %q after the old secret's expiry", r.header.Get("webhook-signature"))
	}
	for secret, ok := range map[string]bool{rotated.Secret: true, sub.Secret: false} {
		wh, _ := standardwebhooks.NewWebhook(secret)
		// The test clock is a day ahead: the timestamp is not checked.
		if err := wh.VerifyIgnoringTimestamp(r.body, r.header); (err == nil) != ok {
			t.Errorf("verification with the %s secret: %v", map[bool]string{true: "new", false: "old"}[ok], err)
		}
	}
}

// TestGiveUp: a message that failed until 24 h after its event is given
// up, logged and counted.
func TestGiveUp(t *testing.T) { storetest.Run(t, testGiveUp) }

func testGiveUp(t *testing.T, db storage.DB) {
	clock := testclock.New(time.Now())
	s := newStore(t, db, clock.Now)
	out := startCountingWorker(t, s)
	ep := newEndpoint(t, func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(500) })
	sub := subscribe(t, s, ep.URL, []string{"contract.rejected"}, nil)
	emit(t, s, "contract.rejected", "alice", map[string]string{})
	ep.waitRequests(t, 2)
	clock.Advance(MaxAge + time.Minute)
	testwait.For(t, testwait.Generous, "given up", func() bool { return out.get(OutcomeFailed) == 1 })
	if d, e := pending(t, s); d != 0 || e != 0 {
		t.Errorf("still pending: %d deliveries, %d events", d, e)
	}
	log := attempts(t, s, sub.ID)
	if log[0].Status != 500 || log[0].Attempt != len(log) || out.get(OutcomeRetry) != len(log)-1 {
		t.Errorf("log %+v, outcomes %v", log, out.n)
	}
}

// TestOutcomeAfterTheLog: an attempt's outcome is counted once the
// attempt is in the log, and a message ended (sent or given up) no longer
// pending, so that the metric never runs ahead of what the admin API
// shows.
func TestOutcomeAfterTheLog(t *testing.T) { storetest.Run(t, testOutcomeAfterTheLog) }

func testOutcomeAfterTheLog(t *testing.T, db storage.DB) {
	s := newStore(t, db, nil)
	var mu sync.Mutex
	var subID string
	var seen []string // outcome: attempts logged, deliveries pending
	cfg := fastConfig()
	cfg.OnOutcome = func(o string) {
		mu.Lock()
		defer mu.Unlock()
		log, err := s.Deliveries(context.Background(), subID, 1000, 0)
		var pending int
		if err == nil {
			pending, _, err = countPending(s)
		}
		seen = append(seen, fmt.Sprintf("%s: %d logged, %d pending, %v", o, len(log), pending, err))
	}
	startWorker(t, s, cfg)
	ep := newEndpoint(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mu.Lock()
	subID = subscribe(t, s, ep.URL, []string{"contract.signed"}, nil).ID
	mu.Unlock()
	emit(t, s, "contract.signed", "alice", map[string]string{})
	testwait.For(t, testwait.Generous, "two outcomes", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{"retry: 1 logged, 1 pending, <nil>", "sent: 2 logged, 0 pending, <nil>"}
	if !slices.Equal(seen, want) {
		t.Errorf("at each outcome %q, want %q", seen, want)
	}
}

// TestSeveralWorkers: workers of three processes on one PostgreSQL
// database deliver each event once.
func TestSeveralWorkers(t *testing.T) {
	first := storetest.OpenPostgres(t).(*pgdb.DB)
	srv := pgtest.Shared(t)
	stores := []*Store{newStore(t, first, nil)}
	for range 2 {
		db, err := pgdb.Open(context.Background(), pgdb.Config{DSN: srv.DSN, Schema: first.Schema(), MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		stores = append(stores, newStore(t, db, nil))
	}
	// A 5xx now and then: retries must not be doubled either.
	var count atomic.Int32
	ep := newEndpoint(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		if count.Add(1)%7 == 0 {
			w.WriteHeader(502)
			return
		}
		w.WriteHeader(200)
	})
	sub := subscribe(t, stores[0], ep.URL, []string{"share.updated", "contract.completed"}, nil)
	for _, s := range stores {
		startWorker(t, s, fastConfig())
	}
	const n = 60
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			emit(t, stores[i%3], []string{"share.updated", "contract.completed"}[i%2], "alice", map[string]int{"i": i})
		}()
	}
	wg.Wait()
	testwait.For(t, testwait.Generous, "every event delivered", func() bool {
		d, e := pending(t, stores[0])
		return d == 0 && e == 0
	})
	delivered := map[string]int{}
	ids := map[string]bool{}
	for _, r := range ep.requests() {
		verify(t, sub.Secret, r)
		ids[r.header.Get("webhook-id")] = true
		if strings.Contains(r.header.Get("webhook-id"), "msg_") {
			var b struct{ Data map[string]int }
			_ = json.Unmarshal(r.body, &b)
			delivered[fmt.Sprint(b.Data["i"])]++
		}
	}
	log := attempts(t, stores[1], sub.ID)
	ok := 0
	for _, a := range log {
		if a.Status == 200 {
			ok++
		}
	}
	if len(ids) != n || ok != n {
		t.Errorf("%d message ids, %d successful attempts logged, want %d each", len(ids), ok, n)
	}
	if len(ep.requests()) != len(log) {
		t.Errorf("%d requests, %d attempts logged: an attempt was made twice", len(ep.requests()), len(log))
	}
	for i := range n {
		if c := delivered[fmt.Sprint(i)]; c < 1 {
			t.Errorf("event %d delivered %d times", i, c)
		}
	}
}
