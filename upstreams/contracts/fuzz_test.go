package contracts

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
)

// fuzzTarget is newFixture for a fuzz function, on one backend: one
// database for every input (opening one per input would make fuzzing
// crawl).
type fuzzTarget struct {
	name string // the backend's
	s    *Store
	h    http.Handler
	// before is the database's digest after the fuzz function's setup,
	// for those whose inputs must change nothing.
	before [32]byte
}

// fuzzTargets opens a store on each backend an input runs on
// (storetest.FuzzBackends).
func fuzzTargets(f *testing.F) []*fuzzTarget {
	f.Helper()
	var out []*fuzzTarget
	for _, b := range storetest.FuzzBackends() {
		s, h := fuzzStore(f, b.Open(f))
		out = append(out, &fuzzTarget{name: b.Name, s: s, h: h})
	}
	return out
}

// eachTarget runs fn on each target, as subtests named after the
// backends.
func eachTarget(t *testing.T, targets []*fuzzTarget, fn func(t *testing.T, x *fuzzTarget)) {
	for _, x := range targets {
		t.Run(x.name, func(t *testing.T) { fn(t, x) })
	}
}

// fuzzStore is the store and handler on db, with NoSync on bbolt since a
// crash of the test loses nothing worth keeping.
func fuzzStore(tb testing.TB, db storage.DB) (*Store, http.Handler) {
	tb.Helper()
	if d, ok := db.(*boltdb.DB); ok {
		d.Bolt.NoSync = true
	}
	b := newBackend(tb, db)
	tpl, err := NewTemplates(db, b)
	if err != nil {
		tb.Fatal(err)
	}
	for _, x := range []Template{
		{ID: "PAGE-1", CollectionID: "SPACE-A", Title: "Lease", Body: "The tenant shall pay."},
		{ID: "PAGE-2", CollectionID: "SPACE-B", Title: "NDA", Body: "Keep it secret."},
	} {
		if _, err := tpl.Put(x); err != nil {
			tb.Fatal(err)
		}
	}
	sealer, err := seal.New([]byte(strings.Repeat("k", 32)))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := NewStore(Config{DB: db, Backend: b, Templates: tpl, Sealer: sealer, PublicBaseURL: baseURL,
		SMSConfigured: true, Now: testclock.New(t0).Now})
	if err != nil {
		tb.Fatal(err)
	}
	return s, NewHandler(s)
}

// fuzzServe sends a request as alice's key.
func fuzzServe(h http.Handler, method, target, contentType string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/", bytes.NewReader(body))
	r.Method, r.RequestURI = method, target
	r.URL.Path, r.URL.RawQuery, _ = strings.Cut(target, "?")
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "key-alice", Owner: alice, Service: access.ServiceContracts}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// checkProblem fails unless w is a 4xx problem body with its code set.
func checkProblem(t *testing.T, w *httptest.ResponseRecorder) problem.Details {
	t.Helper()
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("status %d, want 4xx; body %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("status %d with Content-Type %q", w.Code, ct)
	}
	var d problem.Details
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || d.Code == "" || d.Status != w.Code {
		t.Fatalf("problem body %s: %v", w.Body, err)
	}
	return d
}

// contractCount counts every contract, stacked or archived, of any status.
func contractCount(t *testing.T, s *Store) int {
	t.Helper()
	res, err := s.Search(ctx(), Query{Order: OrderCreationDateAsc, Page: 1, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	return res.TotalCount
}

// FuzzCreate posts arbitrary bodies to the create handler. Property: no
// panic; a 201 whose contract reads back by its id exactly as created, or
// a 4xx problem body with the database unchanged. Deleting the created
// contract must leave the database as it was before (no index entry,
// template copy or outbox message left behind). The seed corpus in
// testdata/fuzz/FuzzCreate holds the valid body and each invalid-field
// case.
func FuzzCreate(f *testing.F) {
	targets := fuzzTargets(f)
	f.Add("application/json", []byte(fullBody))
	f.Add("application/json", []byte(`{"templateId":"PAGE-1","name":"x","signers":[{"fullName":"A","accessKind":"url"}]}`))
	f.Add("text/plain", []byte(`{}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		eachTarget(t, targets, func(t *testing.T, x *fuzzTarget) {
			s, h := x.s, x.h
			before := storetest.Digest(t, s.db)
			w := fuzzServe(h, http.MethodPost, Prefix, contentType, body)
			if w.Code == http.StatusCreated {
				var v struct {
					ID         string            `json:"id"`
					TemplateID string            `json:"templateId"`
					Signers    []json.RawMessage `json:"signers"`
					Watchers   []json.RawMessage `json:"watchers"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v.ID == "" {
					t.Fatalf("201 body %s: %v", w.Body, err)
				}
				// What was sent is what was stored: the template and as many
				// signers and watchers.
				var sent struct {
					TemplateID string            `json:"templateId"`
					Signers    []json.RawMessage `json:"signers"`
					Watchers   []json.RawMessage `json:"watchers"`
				}
				if err := json.Unmarshal(body, &sent); err != nil || sent.TemplateID != v.TemplateID ||
					len(sent.Signers) != len(v.Signers) || len(sent.Watchers) != len(v.Watchers) {
					t.Fatalf("sent %s, created %s (%v)", body, w.Body, err)
				}
				if w.Header().Get("Location") != Prefix+"/"+v.ID {
					t.Fatalf("Location %q for %s", w.Header().Get("Location"), v.ID)
				}
				if g := fuzzServe(h, http.MethodGet, Prefix+"/"+v.ID, "", nil); g.Code != http.StatusOK || g.Body.String() != w.Body.String() {
					t.Fatalf("created %s, reads back as %d %s", w.Body, g.Code, g.Body)
				}
				if storetest.Digest(t, s.db) == before {
					t.Fatal("201, but the database is unchanged")
				}
				// Keep the database small so the fuzzer stays fast.
				if d := fuzzServe(h, http.MethodDelete, Prefix+"/"+v.ID, "", nil); d.Code != http.StatusNoContent {
					t.Fatalf("delete: %d %s", d.Code, d.Body)
				}
				if storetest.Digest(t, s.db) != before {
					t.Fatalf("deleting the contract of %s left data behind", body)
				}
				return
			}
			checkProblem(t, w)
			if storetest.Digest(t, s.db) != before {
				t.Fatalf("a %d changed the database", w.Code)
			}
		})
	})
}

// FuzzSearch sends arbitrary query strings to the search handler over a
// few stored contracts. Property: no panic; a 200 page no larger than
// page-size whose total is at least its length, or a 4xx problem body; a
// query string that does not decode (bad escape, semicolon) is a 400,
// never a search with the broken parameter left out; nothing is stored.
func FuzzSearch(f *testing.F) {
	targets := fuzzTargets(f)
	for _, x := range targets {
		s, h := x.s, x.h
		for _, b := range []string{
			`{"templateId":"PAGE-1","name":"Zoë lease","signers":[{"fullName":"A","accessKind":"url"}]}`,
			`{"templateId":"PAGE-2","name":"nda","signers":[{"fullName":"B","accessKind":"url"}]}`,
			`{"templateId":"PAGE-1","name":"ÅNGSTRÖM","signers":[{"fullName":"C","accessKind":"url"}]}`,
		} {
			if w := fuzzServe(h, http.MethodPost, Prefix, "application/json", []byte(b)); w.Code != http.StatusCreated {
				f.Fatalf("create: %d %s", w.Code, w.Body)
			}
		}
		if err := s.Archive(ctx(), firstID(f, s)); err != nil {
			f.Fatal(err)
		}
		x.before = storetest.Digest(f, s.db)
	}
	f.Add("order=name-asc&page-size=100")
	f.Add("time-zone=UTC%2B14:00&date-range=2026-11-22")
	f.Add("date-range=2026-11-23~2026-11-22")
	f.Fuzz(func(t *testing.T, query string) {
		eachTarget(t, targets, func(t *testing.T, x *fuzzTarget) {
			w := fuzzServe(x.h, http.MethodGet, Prefix+"?"+query, "", nil)
			if storetest.Digest(t, x.s.db) != x.before {
				t.Fatalf("a search (%d) changed the database", w.Code)
			}
			if _, err := url.ParseQuery(query); err != nil && w.Code != http.StatusBadRequest {
				t.Fatalf("query %q (%v) answered %d %s", query, err, w.Code, w.Body)
			}
			if w.Code != http.StatusOK {
				checkProblem(t, w)
				return
			}
			var page struct {
				TotalCount int               `json:"totalCount"`
				Contracts  []json.RawMessage `json:"contracts"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil {
				t.Fatalf("200 body %s: %v", w.Body, err)
			}
			if len(page.Contracts) > page.TotalCount || len(page.Contracts) > MaxPageSize || page.TotalCount > 3 {
				t.Fatalf("%d contracts of total %d", len(page.Contracts), page.TotalCount)
			}
		})
	})
}

func firstID(tb testing.TB, s *Store) string {
	res, err := s.Search(ctx(), Query{Order: OrderCreationDateAsc, Page: 1, PageSize: 1})
	if err != nil || len(res.Contracts) == 0 {
		tb.Fatalf("search: %v", err)
	}
	return res.Contracts[0].ID
}
