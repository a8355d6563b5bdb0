package migrate

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/stores"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testclock"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
	"github.com/keygate/keygate/upstreams/signing"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// t0 is where the worlds' clock starts.
var t0 = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)

const baseURL = "http://gateway.example.com"

// world is a gateway's stores and handlers on one database, built as
// caddymodule builds them, with a key check in front of the APIs: what a
// client sees of a gateway, without Caddy.
type world struct {
	t      *testing.T
	db     storage.DB
	clock  *testclock.Clock
	keys   *keystore.Keys
	tpl    *contracts.Templates
	svc    *signing.Service
	outbox *notify.Outbox
	shares *share.Store
	idem   *idempotency.Store

	contractsAPI, signPages, shareAPI, shareViewer http.Handler
}

// derived is a key for one purpose derived from the master key, as the
// gateway derives them (caddymodule state.derivedKey).
func derived(masterKey []byte, purpose string) []byte {
	m := hmac.New(sha256.New, masterKey)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// openWorld builds the stores on db (a bbolt or PostgreSQL storage.DB).
func openWorld(t *testing.T, db storage.DB, masterKey []byte, clock *testclock.Clock) *world {
	t.Helper()
	w := &world{t: t, db: db, clock: clock}
	sealer, err := seal.New(masterKey)
	if err != nil {
		t.Fatal(err)
	}
	var st *stores.Stores
	switch d := db.(type) {
	case *boltdb.DB:
		if st, err = stores.OpenBolt(d, "test"); err != nil {
			t.Fatal(err)
		}
	case *pgdb.DB:
		st = stores.OpenPostgres(d, "test")
	default:
		t.Fatalf("no stores for backend %s", db.Backend())
	}
	kb, cb, ob, sb, ib := st.Keys, st.Contracts, st.Outbox, st.Shares, st.Idempotency
	if w.keys, err = keystore.Open(kb, sealer, clock.Now); err != nil {
		t.Fatal(err)
	}
	if w.tpl, err = contracts.NewTemplates(db, st.Templates); err != nil {
		t.Fatal(err)
	}
	if w.outbox, err = notify.NewOutbox(db, ob, sealer); err != nil {
		t.Fatal(err)
	}
	if w.idem, err = idempotency.NewStore(idempotency.Config{DB: db, Backend: ib, Sealer: sealer, Now: clock.Now}); err != nil {
		t.Fatal(err)
	}
	w.svc, err = signing.New(contracts.Config{DB: db, Backend: cb, Templates: w.tpl, Sealer: sealer,
		PublicBaseURL: baseURL, SMSConfigured: true, Now: clock.Now, Idempotency: w.idem},
		signing.Config{Outbox: w.outbox, OTPKey: derived(masterKey, "keygate signing one-time password v1")})
	if err != nil {
		t.Fatal(err)
	}
	w.shares, err = share.NewStore(share.Config{DB: db, Backend: sb, PublicBaseURL: baseURL,
		CookieKey: derived(masterKey, "keygate share unlock cookie v1"), Now: clock.Now,
		PasswordParams: share.Argon2Params{Memory: 64, Time: 1, Threads: 1}, Idempotency: w.idem})
	if err != nil {
		t.Fatal(err)
	}
	w.contractsAPI = contracts.NewHandler(w.svc.Contracts())
	w.signPages = w.svc.Handler()
	w.shareAPI = share.NewHandler(w.shares)
	w.shareViewer = share.NewViewer(w.shares, nil)
	return w
}

// stop flushes what the stores hold in memory, as a gateway's stop does.
func (w *world) stop() {
	w.t.Helper()
	if _, err := w.keys.FlushUsage(); err != nil {
		w.t.Fatal(err)
	}
	if err := w.shares.Flush(); err != nil {
		w.t.Fatal(err)
	}
}

// reply is what a client sees of an answer: its status, the headers that
// carry data, and its body.
type reply struct {
	Status  int
	Headers map[string]string
	Body    string
}

var replyHeaders = []string{"Content-Type", "X-Total-Count", "Etag", "Content-Disposition", "Location", idempotency.ReplayedHeader}

// do sends a request to the world. Requests under /webapi/ carry token as
// their bearer key and go through the key check, which counts the use;
// the pages need none.
func (w *world) do(token, method, target, contentType, body string, cookies ...*http.Cookie) (reply, *httptest.ResponseRecorder) {
	w.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.RemoteAddr = "198.51.100.7:40000"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	r.Header.Set("Accept", "application/json")
	for _, c := range cookies {
		r.AddCookie(c)
	}
	return w.serve(token, r)
}

// postKey is do for a JSON POST with an Idempotency-Key.
func (w *world) postKey(token, target, body, key string) reply {
	w.t.Helper()
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.RemoteAddr = "198.51.100.7:40000"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set(idempotency.Header, key)
	out, _ := w.serve(token, r)
	return out
}

// serve hands r to the world as do describes.
func (w *world) serve(token string, r *http.Request) (reply, *httptest.ResponseRecorder) {
	w.t.Helper()
	method, target := r.Method, r.URL.String()
	rec := httptest.NewRecorder()
	var h http.Handler
	var table *access.Table
	switch {
	case strings.HasPrefix(r.URL.Path, contracts.Prefix):
		h, table = w.contractsAPI, &contracts.Operations
	case strings.HasPrefix(r.URL.Path, share.Prefix):
		h, table = w.shareAPI, &share.Operations
	case strings.HasPrefix(r.URL.Path, signing.Prefix+"/"):
		h = w.signPages
	case strings.HasPrefix(r.URL.Path, "/s/"):
		h = w.shareViewer
	default:
		w.t.Fatalf("no handler for %s", target)
	}
	if table != nil {
		now := w.clock.Now()
		d := keystore.Authorize(&keystore.Request{Service: table.Service, Authorization: []string{"Bearer " + token},
			ClientIP: netip.MustParseAddr("198.51.100.7"), Method: method, Path: r.URL.Path, Now: now}, table, w.keys.Lookup)
		if !d.Authorized() {
			return reply{Status: d.Status, Body: d.Reason}, rec
		}
		w.keys.Use(d.Entry, now)
		r = r.WithContext(access.WithIdentity(r.Context(), d.Identity()))
	}
	h.ServeHTTP(rec, r)
	out := reply{Status: rec.Code, Headers: map[string]string{}, Body: rec.Body.String()}
	for _, name := range replyHeaders {
		if v := rec.Header().Get(name); v != "" {
			out.Headers[name] = v
		}
	}
	return out, rec
}

// get is do for a GET without body.
func (w *world) get(token, target string, cookies ...*http.Cookie) reply {
	w.t.Helper()
	r, _ := w.do(token, http.MethodGet, target, "", "", cookies...)
	return r
}

// must sends a JSON request and fails the test unless it answers want;
// it decodes a JSON reply into out (nil: none).
func (w *world) must(want int, token, method, target string, body any, out any) {
	w.t.Helper()
	var raw string
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			w.t.Fatal(err)
		}
		raw = string(b)
	}
	ct := ""
	if raw != "" {
		ct = "application/json"
	}
	r, _ := w.do(token, method, target, ct, raw)
	if r.Status != want {
		w.t.Fatalf("%s %s: %d %s, want %d", method, target, r.Status, r.Body, want)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(r.Body), out); err != nil {
			w.t.Fatalf("%s %s: %v", method, target, err)
		}
	}
}

// captured collects what a delivery worker sends.
type captured struct {
	mu   sync.Mutex
	msgs map[uint64]notify.Message
}

func (c *captured) Send(_ context.Context, m notify.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Queued as PostgreSQL keeps it.
	m.Queued = m.Queued.UTC().Truncate(time.Microsecond)
	c.msgs[m.ID] = m
	return nil
}

// deliver runs a worker on w's outbox until n messages are sent and
// returns them by id.
func (w *world) deliver(n int) map[uint64]notify.Message {
	w.t.Helper()
	return w.deliverUntil(func(ms map[uint64]notify.Message) bool { return len(ms) >= n })
}

// deliverUntil runs a worker on w's outbox until the messages sent
// satisfy done, and returns them by id.
func (w *world) deliverUntil(done func(map[uint64]notify.Message) bool) map[uint64]notify.Message {
	w.t.Helper()
	c := &captured{msgs: map[uint64]notify.Message{}}
	worker := notify.NewWorker(w.outbox, notify.WorkerConfig{Email: c, SMS: c, PollInterval: 20 * time.Millisecond,
		BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})
	go worker.Run(context.Background())
	defer worker.Stop()
	testwait.For(w.t, testwait.Generous, "the outbox to deliver its messages", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return done(c.msgs)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.msgs)
}

// openBolt opens (creating) the bbolt file at path as a storage.DB.
func openBolt(t *testing.T, path string) *boltdb.DB {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return boltdb.New(db)
}

// openSchema opens a fresh schema of the test server, migrated.
func openSchema(t *testing.T) (*pgdb.DB, pgdb.Config) {
	t.Helper()
	srv := pgtest.Shared(t)
	cfg := pgdb.Config{DSN: srv.DSN, Schema: srv.Schema(t), MaxConns: 4}
	db, err := pgdb.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db, cfg
}

// fileBytes reads path.
func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// copyFile copies src to a new file in dir and returns its path.
func copyFile(t *testing.T, src, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(dst, fileBytes(t, src), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}
