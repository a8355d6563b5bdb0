package contracts

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/token"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

func TestConcurrentCreates(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		var created sync.Map
		f := newFixtureOn(t, db, func(c *Config) {
			c.OnCreate = func(tx storage.Tx, c *Contract, _ Origin) error {
				if !writable(tx) {
					return fmt.Errorf("read-only tx")
				}
				created.Store(c.ID, true)
				return nil
			}
		})
		const workers, each = 16, 8
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; i < each; i++ {
					_, err := f.store.Create(ctx(), fmt.Sprintf("owner-%d", w%4), &CreateRequest{
						TemplateID: []string{"PAGE-1", "PAGE-2"}[i%2], Name: fmt.Sprintf("C %d/%d", w, i),
						Signers: []SignerRequest{{FullName: "S", AccessKind: "url"}, {FullName: "T", AccessKind: "email", Email: "t@example.com"}}})
					errs <- err
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		const n = workers * each
		if got := searchCount(t, f, ""); got != n {
			t.Errorf("search counts %d, want %d", got, n)
		}
		if got := searchCount(t, f, "template-id=PAGE-1&creator-id=owner-1"); got != n/8 {
			t.Errorf("template+creator counts %d, want %d", got, n/8)
		}
		if got := f.bucketLen(bucketSigningTokens); got != 2*n {
			t.Errorf("%d signing tokens", got)
		}
		hooked := 0
		created.Range(func(any, any) bool { hooked++; return true })
		if hooked != n {
			t.Errorf("OnCreate saw %d contracts", hooked)
		}
		if f.bolt == nil {
			var refs int
			d := documentDigest("Lease", "The tenant shall pay.")
			f.db.View(ctx(), func(tx storage.Tx) error {
				return pgdb.Of(tx).QueryRow(ctx(), "SELECT count(*) FROM contracts WHERE document_digest = $1", d[:]).Scan(&refs)
			})
			if refs != n/2 {
				t.Errorf("document refs = %d", refs)
			}
			if got := f.bucketLen(bucketContracts); got != n {
				t.Errorf("contracts = %d", got)
			}
			return
		}
		f.bolt.View(func(tx *bbolt.Tx) error {
			if got := readCount(tx.Bucket(bucketCounts), []byte(countAll)); got != n {
				t.Errorf("counter all = %d", got)
			}
			if got := readCount(tx.Bucket(bucketDocumentRefs), func() []byte {
				d := documentDigest("Lease", "The tenant shall pay.")
				return d[:]
			}()); got != n/2 {
				t.Errorf("document refs = %d", got)
			}
			return nil
		})
	})
}

func TestNewStoreChecksConfig(t *testing.T) {
	f := newFixture(t)
	sealer, _ := seal.New(make([]byte, 32))
	for name, cfg := range map[string]Config{
		"no db":             {Templates: f.templates, Sealer: sealer},
		"no backend":        {DB: f.db, Templates: f.templates, Sealer: sealer},
		"no templates":      {DB: f.db, Backend: f.backend, Sealer: sealer},
		"no sealer":         {DB: f.db, Backend: f.backend, Templates: f.templates},
		"negative validity": {DB: f.db, Backend: f.backend, Templates: f.templates, Sealer: sealer, ContractValidity: -time.Hour},
	} {
		if _, err := NewStore(cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	s, err := NewStore(Config{DB: f.db, Backend: f.backend, Templates: f.templates, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.ContractValidity != DefaultContractValidity || s.cfg.Now == nil || s.cfg.Logger == nil {
		t.Errorf("defaults not filled: %+v", s.cfg)
	}
}

func TestCreateRefusesBadOwner(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		for _, owner := range []string{"", "a\x00b"} {
			if _, err := f.store.Create(ctx(), owner, &CreateRequest{TemplateID: "PAGE-1", Name: "N",
				Signers: []SignerRequest{{FullName: "S", AccessKind: "url"}}}); err == nil {
				t.Errorf("owner %q accepted", owner)
			}
		}
	})
}

func TestSigningTokenLookup(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		if _, _, err := f.store.BySigningToken(ctx(), token.Random()); !problem.IsNotFound(err) {
			t.Errorf("unknown token: %v", err)
		}
		c, err := f.store.Create(ctx(), alice, &CreateRequest{TemplateID: "PAGE-1", Name: "N",
			Signers: []SignerRequest{{FullName: "A", AccessKind: "url"}, {FullName: "B", AccessKind: "url"}}})
		if err != nil {
			t.Fatal(err)
		}
		got, i, err := f.store.ByTokenHash(ctx(), c.Signers[1].TokenHash)
		if err != nil || got.ID != c.ID || i != 1 || got.Signers[1].FullName != "B" {
			t.Errorf("lookup: %v %d %v", got, i, err)
		}
		f.clock.Advance(DefaultContractValidity)
		if got, _, _ := f.store.ByTokenHash(ctx(), c.Signers[0].TokenHash); got.Status != StatusExpired {
			t.Errorf("status %s after expiry", got.Status)
		}
	})
}

// TestTemplateChangedByAnotherInstance: an instance that remembers a
// template from its last create (PostgresBackend.HoldTemplate) still
// copies what another instance changed since: a new collection and text,
// a deleted template, a document deleted with its last contract.
func TestTemplateChangedByAnotherInstance(t *testing.T) {
	db := storetest.OpenPostgres(t)
	a, b := newFixtureOn(t, db), newFixtureOn(t, db)
	ctx := context.Background()
	document := func(id string) (string, string) {
		t.Helper()
		c, err := a.store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := a.store.Document(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return c.CollectionID, doc.Title + "|" + doc.Body
	}

	first := a.createNamed(alice, "PAGE-1", "first")
	if coll, doc := document(first); coll != "SPACE-A" || doc != "Lease|The tenant shall pay." {
		t.Fatalf("first: %s %s", coll, doc)
	}
	if _, err := b.templates.Put(Template{ID: "PAGE-1", CollectionID: "SPACE-Z", Title: "Lease", Body: "The tenant shall pay twice."}); err != nil {
		t.Fatal(err)
	}
	second := a.createNamed(alice, "PAGE-1", "second")
	if coll, doc := document(second); coll != "SPACE-Z" || doc != "Lease|The tenant shall pay twice." {
		t.Fatalf("after another instance's change: %s %s", coll, doc)
	}

	// The document of PAGE-2 goes with its only contract, deleted through
	// the other instance; the next create stores it again.
	only := a.createNamed(alice, "PAGE-2", "only")
	if err := b.store.Delete(ctx, only); err != nil {
		t.Fatal(err)
	}
	if got := a.bucketLen(bucketDocuments); got != 2 {
		t.Fatalf("%d documents after the delete, want PAGE-1's two", got)
	}
	again := a.createNamed(alice, "PAGE-2", "again")
	if coll, doc := document(again); coll != "SPACE-B" || doc != "NDA|Keep it secret." {
		t.Fatalf("after the document went: %s %s", coll, doc)
	}

	if err := b.templates.Delete("PAGE-1"); err != nil {
		t.Fatal(err)
	}
	w := a.do(alice, http.MethodPost, Prefix, `{"templateId":"PAGE-1","name":"x","signers":[{"fullName":"S","accessKind":"url"}]}`)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), codeUnknownTemplate) {
		t.Fatalf("create from a template deleted by another instance: %d %s", w.Code, w.Body)
	}
}
