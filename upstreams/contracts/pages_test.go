package contracts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// trackerPages is an issue tracker's pages as a PageReader: what it holds
// now, how often it was asked, and an error to answer instead.
type trackerPages struct {
	mu    sync.Mutex
	pages map[string]host.Page
	err   error
	asked int
}

func (p *trackerPages) Page(_ context.Context, ref string) (*host.Page, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked++
	if p.err != nil {
		return nil, p.err
	}
	pg, ok := p.pages[ref]
	if !ok {
		return nil, fmt.Errorf("reading %s: %w", ref, host.ErrNotFound)
	}
	return &pg, nil
}

func (p *trackerPages) set(ref string, pg host.Page) {
	p.mu.Lock()
	p.pages[ref] = pg
	p.mu.Unlock()
}

func ndaPage(version string) host.Page {
	return host.Page{Ref: "wiki:acme:NDA", Title: "NDA", Body: "# Terms\n\nKeep it **secret**, version " + version + ".", Markup: "markdown", Project: "acme",
		Version: version, Source: "wiki page NDA of project acme, version " + version}
}

// TestTemplateFromTrackerPage: with a tracker, a templateId the registry
// lacks is the tracker's page, frozen into the contract with its version:
// a later edit there makes new contracts from the new version and leaves
// the old ones as they were; a registry template wins for the same id.
func TestTemplateFromTrackerPage(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		tracker := &trackerPages{pages: map[string]host.Page{
			"wiki:acme:NDA": ndaPage("3"),
			"42": {Title: "Service order\tfor Acme", Body: "Deliver by Friday.", Markup: "textile", Project: "ops",
				Version: "2026-11-20T09:00:00Z", Source: "issue 42 of project ops, updated 2026-11-20T09:00:00Z"},
			"PAGE-1": {Title: "Tracker's PAGE-1", Body: "not this", Project: "acme", Source: "issue PAGE-1"},
		}}
		f := newFixtureOn(t, db, func(c *Config) { c.Pages = tracker })

		v3 := f.create(alice, `{"templateId":"wiki:acme:NDA","name":"NDA v3","signers":[{"fullName":"Sam","accessKind":"url"}]}`)
		if v3["templateId"] != "wiki:acme:NDA" || v3["collectionId"] != "acme" || v3["templateSource"] != "wiki page NDA of project acme, version 3" {
			t.Errorf("contract from a wiki page: %v", v3)
		}
		tracker.set("wiki:acme:NDA", ndaPage("4"))
		v4 := f.create(alice, `{"templateId":"wiki:acme:NDA","name":"NDA v4","signers":[{"fullName":"Sam","accessKind":"url"}]}`)
		v4again := f.create(bob, `{"templateId":"wiki:acme:NDA","name":"NDA v4 again","signers":[{"fullName":"Kim","accessKind":"url"}]}`)
		for _, tc := range []struct {
			c      map[string]any
			body   string
			source string
		}{
			{v3, "version 3.", "version 3"},
			{v4, "version 4.", "version 4"},
			{v4again, "version 4.", "version 4"},
		} {
			c := mustGet(t, f, tc.c["id"].(string))
			doc, err := f.store.Document(ctx(), c)
			if err != nil || doc.Title != "NDA" || !strings.HasSuffix(doc.Body, tc.body) || doc.Markup != "markdown" ||
				!strings.HasSuffix(c.TemplateSource, tc.source) {
				t.Errorf("%s: %+v %q %v", c.Name, doc, c.TemplateSource, err)
			}
			if got := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+c.ID, ""))["templateSource"]; got != c.TemplateSource {
				t.Errorf("%s: the Contract Object shows templateSource %v", c.Name, got)
			}
		}
		// Another spelling of the same page (a project by its number, a
		// title's case) makes a contract of the tracker's name for it,
		// so that template-id finds them all.
		tracker.set("wiki:7:nda", ndaPage("4"))
		other := f.create(alice, `{"templateId":"wiki:7:nda","name":"NDA v4 spelt","signers":[{"fullName":"Sam","accessKind":"url"}]}`)
		if other["templateId"] != "wiki:acme:NDA" {
			t.Errorf("templateId %v, want the tracker's name wiki:acme:NDA", other["templateId"])
		}
		if page := searchPageOf(t, f, "template-id=wiki:acme:NDA"); *page.TotalCount != 4 {
			t.Errorf("template-id=wiki:acme:NDA finds %d of the page's 4 contracts", *page.TotalCount)
		}
		if w := f.do(alice, http.MethodDelete, Prefix+"/"+other["id"].(string), ""); w.Code != http.StatusNoContent {
			t.Fatalf("delete: %d %s", w.Code, w.Body)
		}

		// Two versions, two documents, each stored once.
		if n := f.bucketLen(bucketDocuments); n != 2 {
			t.Errorf("%d documents for two page versions", n)
		}

		// An issue: subject (control characters as spaces) and
		// description; a markup keygate does not render is plain text.
		issue := mustGet(t, f, f.createNamed(alice, "42", "Order"))
		if doc, err := f.store.Document(ctx(), issue); err != nil || doc.Title != "Service order for Acme" || doc.Body != "Deliver by Friday." ||
			doc.Markup != "" || issue.CollectionID != "ops" || issue.TemplateSource != "issue 42 of project ops, updated 2026-11-20T09:00:00Z" {
			t.Errorf("contract from an issue: %+v %+v %v", doc, issue, err)
		}

		// The registry wins for an id it has, without asking the tracker.
		asked := tracker.asked
		reg := mustGet(t, f, f.createNamed(alice, "PAGE-1", "Registry"))
		if doc, _ := f.store.Document(ctx(), reg); doc.Title != "Lease" || reg.TemplateSource != "" || reg.CollectionID != "SPACE-A" || tracker.asked != asked {
			t.Errorf("registry template: %+v %+v, tracker asked %d times more", doc, reg, tracker.asked-asked)
		}
		if _, ok := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+reg.ID, ""))["templateSource"]; ok {
			t.Error("a registry template's contract shows a templateSource")
		}

		// Deleting the contracts releases the page's documents too.
		for _, del := range []struct {
			owner string
			c     map[string]any
		}{{alice, v3}, {alice, v4}, {bob, v4again}} {
			if w := f.do(del.owner, http.MethodDelete, Prefix+"/"+del.c["id"].(string), ""); w.Code != http.StatusNoContent {
				t.Fatalf("delete: %d %s", w.Code, w.Body)
			}
		}
		if n := f.bucketLen(bucketDocuments); n != 2 { // the issue's and the registry's
			t.Errorf("%d documents left, want 2", n)
		}
	})
}

// TestTemplateFromTrackerRefused: what the tracker has not, cannot give,
// or does not answer creates nothing; a request refused anyway does not
// ask it.
func TestTemplateFromTrackerRefused(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		tracker := &trackerPages{pages: map[string]host.Page{
			"wiki:acme:Huge":  {Title: "Huge", Body: strings.Repeat("x", maxTemplateBody+1), Project: "acme"},
			"wiki:acme:Bytes": {Title: "Bytes", Body: "\xff\xfe", Project: "acme"},
			"wiki:odd:Page":   {Title: "Odd", Body: "b", Project: "Prøject"},
		}}
		f := newFixtureOn(t, db, func(c *Config) { c.Pages = tracker })
		const one = `,"name":"x","signers":[{"fullName":"Sam","accessKind":"url"}]}`
		for _, tc := range []struct {
			name, id string
			err      error
			status   int
			code     string
			fields   []string
		}{
			{"unknown page", "wiki:acme:Nope", nil, 400, "invalid_request", []string{"templateId=unknown_template"}},
			{"unknown issue", "999", nil, 400, "invalid_request", []string{"templateId=unknown_template"}},
			{"too large", "wiki:acme:Huge", nil, 400, "invalid_request", []string{"templateId=invalid"}},
			{"not UTF-8", "wiki:acme:Bytes", nil, 400, "invalid_request", []string{"templateId=invalid"}},
			{"project id not ASCII", "wiki:odd:Page", nil, 400, "invalid_request", []string{"templateId=invalid"}},
			{"tracker down", "wiki:acme:NDA", fmt.Errorf("reading: %w", host.ErrUnavailable), 503, "host_unavailable", nil},
			{"keygate's account refused", "wiki:acme:NDA", errors.New("reading: the tracker refused keygate's API key"), 503, "host_unavailable", nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tracker.mu.Lock()
				tracker.err = tc.err
				tracker.mu.Unlock()
				w := f.do(alice, http.MethodPost, Prefix, `{"templateId":"`+tc.id+`"`+one)
				d := decodeProblem(t, w, tc.status, tc.code)
				if got := fieldCodes(d); fmt.Sprint(got) != fmt.Sprint(tc.fields) && tc.fields != nil {
					t.Errorf("errors %v, want %v", got, tc.fields)
				}
				if tc.status == 503 && w.Header().Get("Retry-After") == "" {
					t.Error("503 without Retry-After")
				}
				if strings.Contains(w.Body.String(), "reading") {
					t.Errorf("the tracker's error reached the client: %s", w.Body)
				}
			})
		}
		tracker.err = nil
		if n := f.bucketLen(bucketContracts); n != 0 {
			t.Errorf("%d contracts stored by refused creates", n)
		}
		if n := f.bucketLen(bucketDocuments); n != 0 {
			t.Errorf("%d documents stored by refused creates", n)
		}

		// Invalid otherwise: refused without a word to the tracker.
		asked := tracker.asked
		w := f.do(alice, http.MethodPost, Prefix, `{"templateId":"wiki:acme:NDA","name":"","signers":[]}`)
		d := decodeProblem(t, w, 400, "invalid_request")
		for _, e := range d.Errors {
			if e.Field == "templateId" {
				t.Errorf("a template that may be the tracker's is called unknown: %v", e)
			}
		}
		if tracker.asked != asked {
			t.Error("a request refused anyway asked the tracker")
		}
	})
}

// slowTracker holds every page read until release is closed, telling
// entered of each.
type slowTracker struct {
	trackerPages
	entered chan struct{}
	release chan struct{}
}

func (p *slowTracker) Page(ctx context.Context, ref string) (*host.Page, error) {
	p.entered <- struct{}{}
	<-p.release
	return p.trackerPages.Page(ctx, ref)
}

// TestTemplateFromTrackerFlood: at most MaxPageReads creates read the
// tracker at once; one more is refused at once (503, Retry-After 1),
// without a call, and those in flight complete.
func TestTemplateFromTrackerFlood(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		tracker := &slowTracker{trackerPages: trackerPages{pages: map[string]host.Page{"wiki:acme:NDA": ndaPage("1")}},
			entered: make(chan struct{}, MaxPageReads+1), release: make(chan struct{})}
		f := newFixtureOn(t, db, func(c *Config) { c.Pages = tracker })
		const body = `{"templateId":"wiki:acme:NDA","name":"x","signers":[{"fullName":"Sam","accessKind":"url"}]}`
		done := make(chan int, MaxPageReads)
		for range MaxPageReads {
			go func() { done <- f.do(alice, http.MethodPost, Prefix, body).Code }()
		}
		for range MaxPageReads {
			<-tracker.entered
		}
		w := f.do(alice, http.MethodPost, Prefix, body)
		decodeProblem(t, w, http.StatusServiceUnavailable, "host_unavailable")
		if w.Header().Get("Retry-After") != "1" || len(tracker.entered) != 0 {
			t.Errorf("one create too many: Retry-After %q, %d more reads", w.Header().Get("Retry-After"), len(tracker.entered))
		}
		close(tracker.release)
		for range MaxPageReads {
			if code := <-done; code != http.StatusCreated {
				t.Errorf("a create in flight: %d", code)
			}
		}
		if n := f.bucketLen(bucketContracts); n != MaxPageReads {
			t.Errorf("%d contracts, want %d", n, MaxPageReads)
		}
	})
}
