package migrate

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/webhook"
	"github.com/keygate/keygate/keystore"
)

// TestCopyWebhooks: subscriptions (a rotated secret, a disabled one),
// deliveries waiting for a retry, events not yet fanned out and the
// delivery log move to PostgreSQL as they were, and the gateway there
// delivers with the same secrets.
// loopback lets the stores deliver to the test's receiver.
var loopback = &webhook.Targets{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

func TestCopyWebhooks(t *testing.T) {
	ctx := context.Background()
	boltPath := filepath.Join(t.TempDir(), "webapi.db")
	masterKey := make([]byte, 32)
	rand.Read(masterKey)
	sealer, err := seal.New(masterKey)
	if err != nil {
		t.Fatal(err)
	}

	var ok atomic.Bool
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, b)
		mu.Unlock()
		if !ok.Load() {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(ep.Close)
	requests := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}

	src := openBolt(t, boltPath)
	if _, err := keystore.NewBoltBackend(src); err != nil { // a keygate file is one with keys
		t.Fatal(err)
	}
	bb, err := webhook.NewBoltBackend(src)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := webhook.NewStore(webhook.Config{DB: src, Backend: bb, Sealer: sealer, Targets: loopback})
	if err != nil {
		t.Fatal(err)
	}
	create := func(evs, owners []string) webhook.Subscription {
		sub, err := s1.Create(ctx, &webhook.Input{URL: patch.Some(ep.URL + "/hook"), Events: patch.Some(evs),
			Owners: patch.Some(owners), Description: patch.Some("migrated")})
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	a := create([]string{events.ContractSigned}, []string{"alice"})
	b := create([]string{events.ShareViewed}, []string{})
	c := create([]string{events.ContractCreated}, []string{})
	rotated, err := s1.RotateSecret(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Update(ctx, c.ID, &webhook.Input{Enabled: patch.Some(false)}); err != nil {
		t.Fatal(err)
	}
	emit := func(s *webhook.Store, db storage.DB, typ string) {
		t.Helper()
		err := db.Update(ctx, func(tx storage.Tx) error {
			return s.Emit(tx, events.Event{Type: typ, Owner: "alice", At: time.Now(), Data: json.RawMessage(`{"n":1}`)})
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Two attempts fail on bbolt; their retries are an hour away.
	w1 := webhook.NewWorker(s1, webhook.WorkerConfig{BaseDelay: time.Hour, PollInterval: 50 * time.Millisecond})
	done := make(chan error, 1)
	go func() { done <- w1.Run(ctx) }()
	if _, err := s1.Test(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	emit(s1, src, events.ContractSigned)
	testwait.For(t, testwait.Generous, "two failed attempts", func() bool { return requests() == 2 })
	testwait.For(t, testwait.Generous, "two attempts logged", func() bool {
		log, _ := s1.Deliveries(ctx, a.ID, 10, 0)
		return len(log) == 2
	})
	w1.Stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Two events wait in the outbox, not fanned out.
	emit(s1, src, events.ShareViewed)
	emit(s1, src, events.ShareViewed)
	listBefore, err := s1.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logBefore, err := s1.Deliveries(ctx, a.ID, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}

	dst, cfg := openSchema(t)
	rep, err := BoltToPostgres(ctx, Config{BoltPath: boltPath, MasterKey: masterKey, Postgres: cfg})
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for _, c := range rep.Copied {
		lines[c.Kind] = strings.TrimSpace(strings.Join([]string{itoa(c.N), c.Note}, " "))
	}
	for kind, want := range map[string]string{
		"webhooks":           "3 2 enabled",
		"webhook deliveries": "2 pending; and 2 events not yet fanned out",
		"webhook log":        "2 delivery attempts",
	} {
		if lines[kind] != want {
			t.Errorf("report line %s: %q, want %q", kind, lines[kind], want)
		}
	}

	s2, err := webhook.NewStore(webhook.Config{DB: dst, Backend: webhook.NewPostgresBackend(dst), Sealer: sealer, Targets: loopback})
	if err != nil {
		t.Fatal(err)
	}
	listAfter, err := s2.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logAfter, err := s2.Deliveries(ctx, a.ID, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	if x, y := mustJSON(t, listBefore), mustJSON(t, listAfter); x != y {
		t.Errorf("subscriptions differ:\nbbolt    %s\npostgres %s", x, y)
	}
	if x, y := mustJSON(t, logBefore), mustJSON(t, logAfter); x != y {
		t.Errorf("delivery logs differ:\nbbolt    %s\npostgres %s", x, y)
	}

	// On PostgreSQL: the waiting events fan out, and a test message goes,
	// each signed by the rotated secret and the one it replaced.
	ok.Store(true)
	w2 := webhook.NewWorker(s2, webhook.WorkerConfig{BaseDelay: time.Hour, PollInterval: 50 * time.Millisecond})
	go func() { done <- w2.Run(ctx) }()
	t.Cleanup(func() { w2.Stop(); <-done })
	if _, err := s2.Test(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "three deliveries on postgres", func() bool { return requests() == 5 })
	mu.Lock()
	defer mu.Unlock()
	for i := 2; i < 5; i++ {
		sigs := strings.Split(got[i].Header.Get("webhook-signature"), " ")
		if len(sigs) != 2 {
			t.Errorf("delivery %d: signatures %q, want two", i, sigs)
		}
		for _, secret := range []string{b.Secret, rotated.Secret} {
			wh, _ := standardwebhooks.NewWebhook(secret)
			if err := wh.Verify(bodies[i], got[i].Header); err != nil {
				t.Errorf("delivery %d does not verify: %v", i, err)
			}
		}
	}
	// The failed ones wait for their retry, with their message ids.
	var pending, attempts int64
	row := dst.Pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(attempts), 0) FROM webhook_deliveries WHERE next_attempt > now() + interval '25 minutes'")
	if err := row.Scan(&pending, &attempts); err != nil {
		t.Fatal(err)
	}
	if pending != 2 || attempts != 2 {
		t.Errorf("%d deliveries waiting for their retry with %d attempts, want 2 and 2", pending, attempts)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
