package contracts

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testclock"
)

const (
	baseURL = "http://localhost:8080"
	alice   = "alice"
	bob     = "bob"
)

// t0 is the fake clock's start: 2026-11-22T10:15:00Z.
var t0 = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)

type fixture struct {
	t  *testing.T
	db storage.DB
	// bolt is db's bbolt file, nil on PostgreSQL.
	bolt      *bbolt.DB
	backend   Backend
	templates *Templates
	store     *Store
	h         http.Handler
	clock     *testclock.Clock
}

// newFixture opens a fresh database with two templates registered, SMS
// configured and the clock at t0. mod may change the config.
func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, storetest.OpenBolt(t), mod...)
}

// newBackend makes the contract backend of db's kind.
func newBackend(tb testing.TB, db storage.DB) contractBackend {
	tb.Helper()
	return storetest.Pick[contractBackend](tb, db,
		func(d *boltdb.DB) (contractBackend, error) { return NewBoltBackend(d) },
		func(d *pgdb.DB) contractBackend { return NewPostgresBackend(d) })
}

// contractBackend is what both backends of this package implement.
type contractBackend interface {
	Backend
	TemplateBackend
}

// newFixtureOn is newFixture on db.
func newFixtureOn(t *testing.T, db storage.DB, mod ...func(*Config)) *fixture {
	t.Helper()
	b := newBackend(t, db)
	tpl, err := NewTemplates(db, b)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []Template{
		{ID: "PAGE-1", CollectionID: "SPACE-A", Title: "Lease", Body: "The tenant shall pay."},
		{ID: "PAGE-2", CollectionID: "SPACE-B", Title: "NDA", Body: "Keep it secret."},
	} {
		if _, err := tpl.Put(x); err != nil {
			t.Fatal(err)
		}
	}
	sealer, err := seal.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(t0)
	cfg := Config{DB: db, Backend: b, Templates: tpl, Sealer: sealer, PublicBaseURL: baseURL, SMSConfigured: true, Now: clock.Now}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := NewStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, db: db, backend: b, templates: tpl, store: s, h: NewHandler(s), clock: clock}
	if d, ok := db.(*boltdb.DB); ok {
		f.bolt = d.Bolt
	}
	return f
}

// do sends a request as a key of owner; owner "" sends none.
func (f *fixture) do(owner, method, target, body string, header ...string) *httptest.ResponseRecorder {
	f.t.Helper()
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	if owner != "" {
		r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "key-" + owner, Owner: owner, Service: access.ServiceContracts}))
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, r)
	return w
}

// create posts body as owner and returns the 201 reply's object.
func (f *fixture) create(owner, body string) map[string]any {
	f.t.Helper()
	w := f.do(owner, http.MethodPost, Prefix, body)
	if w.Code != http.StatusCreated {
		f.t.Fatalf("create: status %d, body %s", w.Code, w.Body)
	}
	return decodeObject(f.t, w)
}

// createNamed makes a one-signer contract from template as owner.
func (f *fixture) createNamed(owner, template, name string) string {
	f.t.Helper()
	return f.create(owner, fmt.Sprintf(`{"templateId":%q,"name":%q,"signers":[{"fullName":"Sam Signer","accessKind":"url"}]}`, template, name))["id"].(string)
}

func decodeObject(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	return m
}

// decodeProblem checks a problem reply's status, media type and code.
func decodeProblem(t *testing.T, w *httptest.ResponseRecorder, status int, code string) problem.Details {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want %q", ct, problem.ContentType)
	}
	var d problem.Details
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Code != code || d.Status != status {
		t.Fatalf("problem %+v, want code %s", d, code)
	}
	return d
}

// fieldCodes renders a problem's field errors as "field=code" lines.
func fieldCodes(d problem.Details) []string {
	var out []string
	for _, e := range d.Errors {
		out = append(out, e.Field+"="+e.Code)
	}
	return out
}

// pgCounts counts on PostgreSQL what a bucket holds on bbolt.
var pgCounts = map[string]string{
	string(bucketContracts):         "SELECT count(*) FROM contract_records",
	string(bucketRows):              "SELECT count(*) FROM contracts",
	string(bucketByTemplate):        "SELECT count(*) FROM contracts",
	string(bucketByCreator):         "SELECT count(*) FROM contracts",
	string(bucketByTemplateCreator): "SELECT count(*) FROM contracts",
	string(bucketByPlacement):       "SELECT count(*) FROM contracts",
	string(bucketByStatus):          "SELECT count(*) FROM contracts",
	string(bucketByExpiry):          "SELECT count(*) FROM contracts WHERE status IN (0, 1)",
	string(bucketSigningTokens):     "SELECT count(*) FROM signing_tokens",
	string(bucketDocuments):         "SELECT count(*) FROM contract_documents",
	string(bucketDocumentRefs):      "SELECT count(*) FROM contract_documents",
	string(bucketTemplates):         "SELECT count(*) FROM templates",
	string(bucketTemplateDigests):   "SELECT count(*) FROM templates",
	string(bucketAttachments):       "SELECT count(*) FROM contract_attachments",
	// The planner's counters are bbolt's own: none on PostgreSQL, whose
	// planner keeps its statistics itself.
	string(bucketCounts): "SELECT 0",
}

// bucketLen counts the keys of a bucket (the rows that stand for them on
// PostgreSQL).
func (f *fixture) bucketLen(name []byte) int {
	f.t.Helper()
	n := 0
	if f.bolt == nil {
		q, ok := pgCounts[string(name)]
		if !ok {
			f.t.Fatalf("bucketLen: no table for bucket %s", name)
		}
		err := f.db.View(ctx(), func(tx storage.Tx) error {
			return pgdb.Of(tx).QueryRow(ctx(), q).Scan(&n)
		})
		if err != nil {
			f.t.Fatal(err)
		}
		return n
	}
	if err := f.bolt.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(name).Stats().KeyN
		return nil
	}); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func ctx() context.Context { return context.Background() }

// writable tells whether tx may write.
func writable(tx storage.Tx) bool {
	switch tx.Backend() {
	case boltdb.Name:
		return boltdb.Of(tx).Writable()
	case pgdb.Name:
		var ro string
		err := pgdb.Of(tx).QueryRow(context.Background(), "SELECT current_setting('transaction_read_only')").Scan(&ro)
		return err == nil && ro == "off"
	}
	return false
}

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// assertNotStoredPG fails if any row of any table of the schema holds s
// in clear, as text or as bytes (bytea shows as hex).
func assertNotStoredPG(t *testing.T, f *fixture, s string) {
	t.Helper()
	err := f.db.View(ctx(), func(tx storage.Tx) error {
		rows, err := pgdb.Of(tx).Query(ctx(), "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")
		if err != nil {
			return err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, table := range tables {
			var n int
			err := pgdb.Of(tx).QueryRow(ctx(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+
				" t WHERE strpos(t::text, $1) > 0 OR strpos(t::text, $2) > 0", s, hex.EncodeToString([]byte(s))).Scan(&n)
			if err != nil {
				return err
			}
			if n > 0 {
				t.Errorf("table %s holds the token in clear", table)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
