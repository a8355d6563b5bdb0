package contracts

import (
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/problem"
)

func TestTemplateValidate(t *testing.T) {
	cases := []struct {
		name string
		tpl  Template
		want []string
	}{
		{"valid", Template{ID: "P-1", CollectionID: "S", Title: "Lease", Body: ""}, nil},
		{"empty", Template{}, []string{"id=required", "collectionId=required", "title=required"}},
		{"non-ASCII ids", Template{ID: "Pä", CollectionID: "S\t", Title: "T"}, []string{"id=invalid", "collectionId=invalid"}},
		{"id 256 long", Template{ID: strings.Repeat("p", 256), CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"a tracker's ids", Template{ID: "PAGE-42", CollectionID: "S", Title: "T"}, nil},
		{"digits", Template{ID: "10001", CollectionID: "S", Title: "T"}, nil},
		{"every unreserved character", Template{ID: "aZ09._~-", CollectionID: "S", Title: "T"}, nil},
		{"id 255 long", Template{ID: strings.Repeat("p", 255), CollectionID: "S", Title: "T"}, nil},
		{"dot-dot", Template{ID: "..", CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"dot", Template{ID: ".", CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"slash", Template{ID: "a/b", CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"space", Template{ID: "a b", CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"percent", Template{ID: "a%2Fb", CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"query", Template{ID: "a?b", CollectionID: "S", Title: "T"}, []string{"id=invalid"}},
		{"collectionId keeps the API's rule", Template{ID: "P", CollectionID: "My space/1", Title: "T"}, nil},
		{"title only spaces", Template{ID: "P", CollectionID: "S", Title: "  "}, []string{"title=invalid"}},
		{"body too big", Template{ID: "P", CollectionID: "S", Title: "T", Body: strings.Repeat("b", maxTemplateBody+1)}, []string{"body=invalid"}},
		{"body not UTF-8", Template{ID: "P", CollectionID: "S", Title: "T", Body: "\xff"}, []string{"body=invalid"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.tpl.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			d, ok := err.(*problem.Details)
			if !ok || d.Status != http.StatusBadRequest {
				t.Fatalf("error %v", err)
			}
			if got := fieldCodes(*d); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("errors %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTemplateRegistry(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		r := f.templates
		created, err := r.Put(Template{ID: "PAGE-0", CollectionID: "SPACE-Z", Title: "First", Body: "b"})
		if err != nil || !created {
			t.Fatalf("put: %v %v", created, err)
		}
		created, err = r.Put(Template{ID: "PAGE-0", CollectionID: "SPACE-Z", Title: "Second", Body: "b"})
		if err != nil || created {
			t.Fatalf("replace: %v %v", created, err)
		}
		if _, err := r.Put(Template{ID: "bad id\n"}); err == nil {
			t.Error("invalid template stored")
		}
		got, err := r.Get("PAGE-0")
		if err != nil || got.Title != "Second" {
			t.Errorf("get: %+v %v", got, err)
		}
		if _, err := r.Get("PAGE-9"); !problem.IsNotFound(err) {
			t.Errorf("get unknown: %v", err)
		}
		list, err := r.List()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, x := range list {
			ids = append(ids, x.ID)
		}
		if !reflect.DeepEqual(ids, []string{"PAGE-0", "PAGE-1", "PAGE-2"}) {
			t.Errorf("list %v", ids)
		}
		if err := r.Delete("PAGE-0"); err != nil {
			t.Fatal(err)
		}
		if err := r.Delete("PAGE-0"); !problem.IsNotFound(err) {
			t.Errorf("second delete: %v", err)
		}
		if n := f.bucketLen(bucketTemplateDigests); n != 2 {
			t.Errorf("%d digests for 2 templates", n)
		}
	})
}

// TestTemplateLegacyIDs: ids stored before the template id rule ("..",
// "a/b") are refused for new templates and replacements, yet can still be
// read, listed and removed.
func TestTemplateLegacyIDs(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		r := f.templates
		ctx := t.Context()
		for _, id := range []string{"..", ".", "a/b"} {
			tpl := Template{ID: id, CollectionID: "S", Title: "Old " + id, Body: "b"}
			if _, err := r.Put(tpl); err == nil {
				t.Errorf("Put(%q) accepted", id)
			}
			if err := r.Add(tpl); err == nil {
				t.Errorf("Add(%q) accepted", id)
			}
			// As an earlier version stored it, past the rule.
			if err := db.Update(ctx, func(tx storage.Tx) error {
				_, err := r.backend.PutTemplate(ctx, tx, &tpl, documentDigest(tpl.Title, tpl.Body), false)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if got, err := r.Get(id); err != nil || got.Title != "Old "+id {
				t.Errorf("Get(%q) = %+v, %v", id, got, err)
			}
			if _, err := r.Put(tpl); err == nil {
				t.Errorf("Put(%q) replaced a legacy template", id)
			}
		}
		if list, err := r.List(); err != nil || len(list) != 2+3 {
			t.Errorf("List: %d templates, %v", len(list), err)
		}
		for _, id := range []string{"..", ".", "a/b"} {
			if err := r.Delete(id); err != nil {
				t.Errorf("Delete(%q): %v", id, err)
			}
			if _, err := r.Get(id); !problem.IsNotFound(err) {
				t.Errorf("Get(%q) after delete: %v", id, err)
			}
		}
	})
}

// TestTemplateCopiedAtCreation: a contract keeps the text of its template
// as it was, whatever happens to the template later.
func TestTemplateCopiedAtCreation(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		before := f.createNamed(alice, "PAGE-1", "Before")
		if _, err := f.templates.Put(Template{ID: "PAGE-1", CollectionID: "SPACE-C", Title: "Lease v2", Body: "Pay twice."}); err != nil {
			t.Fatal(err)
		}
		after := f.createNamed(alice, "PAGE-1", "After")
		for _, tc := range []struct{ id, title, body, collection string }{
			{before, "Lease", "The tenant shall pay.", "SPACE-A"},
			{after, "Lease v2", "Pay twice.", "SPACE-C"},
		} {
			c := mustGet(t, f, tc.id)
			doc, err := f.store.Document(ctx(), c)
			if err != nil || doc.Title != tc.title || doc.Body != tc.body || c.CollectionID != tc.collection {
				t.Errorf("%s: %+v %q %v", c.Name, doc, c.CollectionID, err)
			}
		}
		if err := f.templates.Delete("PAGE-1"); err != nil {
			t.Fatal(err)
		}
		if _, err := f.store.Document(ctx(), mustGet(t, f, before)); err != nil {
			t.Errorf("document gone with its template: %v", err)
		}
		if n := f.bucketLen(bucketDocuments); n != 2 {
			t.Errorf("%d documents for two template versions", n)
		}
	})
}

func TestDocumentDigestSeparatesTitleAndBody(t *testing.T) {
	if documentDigest("ab", "c") == documentDigest("a", "bc") {
		t.Error("title/body boundary not part of the digest")
	}
}

func TestFold(t *testing.T) {
	for in, want := range map[string]string{"STRASSE": "strasse", "Straße": "strasse", "ΣΊΣΥΦΟΣ": "σίσυφοσ", "ς": "σ", "\u212a": "k"} {
		if got := fold(in); got != want {
			t.Errorf("fold(%q) = %q, want %q", in, got, want)
		}
	}
}
