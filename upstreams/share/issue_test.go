package share

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// fakeTracker is a host.Host of issues and projects in memory, or one
// that fails.
type fakeTracker struct {
	issues    map[string]*host.Issue
	projects  map[string]bool // by identifier and number; nil: any
	files     map[string]string
	downloads int
	err       error
	// match decides which issues a query matches; nil: all.
	match func(*host.Issue, *host.Query) bool
}

func (*fakeTracker) Platform() string { return "fake" }
func (*fakeTracker) Account(context.Context) (*host.Account, error) {
	return &host.Account{Login: "keygate"}, nil
}
func (f *fakeTracker) Project(_ context.Context, id string) (*host.Project, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.projects != nil && !f.projects[id] {
		return nil, host.ErrNotFound
	}
	return &host.Project{ID: id}, nil
}
func (f *fakeTracker) UpdateField(_ context.Context, id, field, value string) error {
	if f.err != nil {
		return f.err
	}
	in, ok := f.issues[id]
	if !ok {
		return host.ErrNotFound
	}
	for i := range in.Fields {
		if in.Fields[i].ID == field {
			in.Fields[i].Value = value
			return nil
		}
	}
	return fmt.Errorf("%w: no field %s", host.ErrRejected, field)
}

func (f *fakeTracker) AddAttachment(_ context.Context, id, name, contentType string, content io.Reader, size int64) error {
	if f.err != nil {
		return f.err
	}
	in, ok := f.issues[id]
	if !ok {
		return host.ErrNotFound
	}
	b, err := io.ReadAll(content)
	if err != nil || int64(len(b)) != size {
		return fmt.Errorf("read %d of %d bytes: %v", len(b), size, err)
	}
	att := host.Attachment{ID: strconv.Itoa(100 + len(in.Attachments)), Name: name, Size: size, ContentType: contentType}
	in.Attachments = append(in.Attachments, att)
	if f.files == nil {
		f.files = map[string]string{}
	}
	f.files[att.ID] = string(b)
	return nil
}

// Search lists the issues of project in id order that match holds for
// (every one when match is nil).
func (f *fakeTracker) Search(_ context.Context, project string, q *host.Query, issueID string, offset, limit int) (*host.IssueList, error) {
	if f.err != nil {
		return nil, f.err
	}
	ids := slices.Sorted(maps.Keys(f.issues))
	out := &host.IssueList{Issues: []host.Issue{}}
	for _, id := range ids {
		in := f.issues[id]
		if in.Project.ID != project || (issueID != "" && id != issueID) || (f.match != nil && !f.match(in, q)) {
			continue
		}
		if out.Total >= offset && len(out.Issues) < limit {
			out.Issues = append(out.Issues, *in)
		}
		out.Total++
	}
	return out, nil
}

func (f *fakeTracker) Page(context.Context, string) (*host.Page, error) { return nil, host.ErrNotFound }

func (f *fakeTracker) Download(_ context.Context, id string) (io.ReadCloser, error) {
	f.downloads++
	if f.err != nil {
		return nil, f.err
	}
	content, ok := f.files[id]
	if !ok {
		return nil, host.ErrNotFound
	}
	return io.NopCloser(strings.NewReader(content)), nil
}

func (f *fakeTracker) AddComment(_ context.Context, id, body string) error {
	if f.err != nil {
		return f.err
	}
	in, ok := f.issues[id]
	if !ok {
		return host.ErrNotFound
	}
	in.Comments = append(in.Comments, host.Comment{ID: "new", Author: "Keygate", Body: body})
	return nil
}

func (f *fakeTracker) Issue(_ context.Context, id string) (*host.Issue, error) {
	if f.err != nil {
		return nil, fmt.Errorf("reading issue %s: %w", id, f.err)
	}
	in, ok := f.issues[id]
	if !ok {
		return nil, host.ErrNotFound
	}
	return in, nil
}

// trackerIssue is issue 42 of project acme (number 3) as a tracker
// answers it.
func trackerIssue() *host.Issue {
	at := time.Date(2026, 11, 20, 9, 30, 0, 0, time.UTC)
	return &host.Issue{ID: "42", Project: host.Project{ID: "acme", Number: "3", Name: "ACME"}, Markup: "markdown",
		Fields: []host.Field{
			{ID: "summary", Name: "Subject", Value: "Printer <b>jams</b>"},
			{ID: "description", Name: "Description", Value: "It jams\non page 2."},
			{ID: "status", Name: "Status", Value: "In progress (internal)"},
			{ID: "customfield_7", Name: "Cost centre", Value: "CC-99"},
		},
		Comments:    []host.Comment{{ID: "5", Author: "Support Agent", Created: at, Body: "We ordered a part."}},
		Attachments: []host.Attachment{{ID: "9", Name: "photo.jpg", Size: 204800, ContentType: "image/jpeg", Created: at}},
	}
}

// TestViewerWithTracker: with an issue tracker connected, the page of an
// ISSUE share shows the issue: only the fields the share lets an outside
// party view, the public comments and attachments when shared, as HTML
// and JSON; an issue gone is 404 saying so, a tracker that fails 503
// host_unavailable with Retry-After; without a tracker the page says
// none is connected.
func TestViewerWithTracker(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{"42": trackerIssue()}}
		withTracker := NewViewer(e.store, tracker)
		share := func(issue, project string, fields map[string][]string) string {
			fc := &FieldsConfig{FieldConfigs: map[string]FieldConfig{}}
			for id, perms := range fields {
				fc.FieldConfigs[id] = FieldConfig{FieldPermissions: perms}
			}
			return "/s/" + e.create(alice, &CreateRequest{Type: TypeIssue, IssueID: str(issue), ProjectID: str(project), FieldsConfig: fc}).UUID
		}
		viewed := share("42", "acme", map[string][]string{"summary": {PermView}, "description": {PermView, PermViewContent},
			"comment": {PermView}, "status": {PermEdit}})
		withAttachments := share("42", "3", map[string][]string{"attachment": {PermView}})
		gone := share("41", "acme", map[string][]string{"summary": {PermView}})
		moved := share("42", "other", map[string][]string{"summary": {PermView}})

		tests := []struct {
			name       string
			path       string
			fail       error
			status     int
			want, not  []string // in the HTML page
			jsonIssue  string   // the JSON's issue, "" for none
			retryAfter string
		}{
			{name: "viewable fields and comments", path: viewed, status: 200,
				want: []string{"Issue 42", "<dt>Subject</dt><dd>Printer &lt;b&gt;jams&lt;/b&gt;</dd>", "It jams\non page 2.",
					"Support Agent · 20 November 2026, 09:30 UTC", "We ordered a part."},
				not: []string{"In progress", "Cost centre", "CC-99", "photo.jpg", "<b>jams"},
				jsonIssue: `{"id":"42","fields":[{"id":"summary","name":"Subject","value":"Printer \u003cb\u003ejams\u003c/b\u003e"},` +
					`{"id":"description","name":"Description","value":"It jams\non page 2."}],"markup":"markdown",` +
					`"comments":[{"id":"5","author":"Support Agent","created":"2026-11-20T09:30:00Z","body":"We ordered a part."}]}`},
			{name: "attachments, the project by number", path: withAttachments, status: 200,
				want: []string{"photo.jpg", "200.0 KiB", "image/jpeg"}, not: []string{"Printer", "We ordered"},
				jsonIssue: `{"id":"42","fields":[],"markup":"markdown","attachments":[{"id":"9","name":"photo.jpg","size":204800,"contentType":"image/jpeg","created":"2026-11-20T09:30:00Z"}]}`},
			{name: "an issue the tracker no longer has", path: gone, status: 404,
				want: []string{"The shared item is no longer available on the issue tracker."}},
			{name: "an issue moved to another project", path: moved, status: 404,
				want: []string{"no longer available"}, not: []string{"Printer"}},
			{name: "the tracker does not answer", path: viewed, fail: host.ErrUnavailable, status: 503,
				want: []string{"The issue tracker did not answer"}, not: []string{"Printer"}, retryAfter: "30"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tracker.err = tt.fail
				e.viewer = withTracker
				w := e.page("GET", tt.path, htmlAccept, "", "", "203.0.113.9")
				body := w.Body.String()
				if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retryAfter {
					t.Fatalf("page: %d Retry-After %q, want %d %q\n%s", w.Code, w.Header().Get("Retry-After"), tt.status, tt.retryAfter, body)
				}
				for _, s := range tt.want {
					if !strings.Contains(body, s) {
						t.Errorf("page lacks %q:\n%s", s, body)
					}
				}
				for _, s := range tt.not {
					if strings.Contains(body, s) {
						t.Errorf("page shows %q", s)
					}
				}
				w = e.page("GET", tt.path, jsonAccept, "", "", "203.0.113.9")
				var got struct {
					Code    string          `json:"code"`
					Issue   json.RawMessage `json:"issue"`
					Tracker *bool           `json:"trackerConnected"`
				}
				if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || w.Code != tt.status {
					t.Fatalf("JSON: %d %v %s", w.Code, err, w.Body)
				}
				switch {
				case tt.status == 503 && got.Code != "host_unavailable":
					t.Errorf("JSON code %q, want host_unavailable", got.Code)
				case tt.status == 404 && got.Code != "not_found":
					t.Errorf("JSON code %q, want not_found", got.Code)
				case tt.status == 200 && (string(got.Issue) != tt.jsonIssue || got.Tracker == nil || !*got.Tracker):
					t.Errorf("JSON issue %s (tracker %v), want %s", got.Issue, got.Tracker, tt.jsonIssue)
				}
			})
		}

		t.Run("no tracker connected", func(t *testing.T) {
			e.viewer = NewViewer(e.store, nil)
			w := e.page("GET", viewed, htmlAccept, "", "", "203.0.113.9")
			if w.Code != 200 || !strings.Contains(w.Body.String(), "No issue tracker is connected") || strings.Contains(w.Body.String(), "Printer") {
				t.Errorf("page without a tracker: %d\n%s", w.Code, w.Body)
			}
		})
	})
}

// TestPlainDescription: without VIEW_CONTENT, the description is its
// text, escaped, whatever its markup.
func TestPlainDescription(t *testing.T) {
	s := &sharedIssue{Markup: "markdown", rich: map[string]bool{"description": false}}
	if got := string(s.Show(host.Field{ID: "description", Value: "**bold** <b>x</b>"})); !strings.Contains(got, "**bold** &lt;b&gt;x&lt;/b&gt;") {
		t.Errorf("plain description: %s", got)
	}
}

// TestCreateWithTracker: with a tracker connected, a share's create and
// update are checked against it once: the issue, the project (filled in
// from an ISSUE share's issue when the request names none), the shared
// fields and what may be edited; every problem comes in one 400, a
// tracker that does not answer is 503 host_unavailable, and nothing is
// stored either way.
func TestCreateWithTracker(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{"42": trackerIssue()}, projects: map[string]bool{"acme": true, "3": true}}
		cfg := e.cfg
		cfg.Host = tracker
		s, err := NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		stored := func() int {
			_, total, err := e.store.List(ctx, root, ListQuery{})
			if err != nil {
				t.Fatal(err)
			}
			return total
		}
		fields := func(perms map[string][]string) *FieldsConfig {
			fc := &FieldsConfig{FieldConfigs: map[string]FieldConfig{}}
			for id, p := range perms {
				fc.FieldConfigs[id] = FieldConfig{FieldPermissions: p}
			}
			return fc
		}
		tests := []struct {
			name    string
			in      CreateRequest
			down    bool
			project string   // the stored share's projectId
			errors  []string // field:code of the 400
			status  int      // of another refusal
		}{
			{name: "an issue's project filled in", in: CreateRequest{Type: TypeIssue, IssueID: str("42"),
				FieldsConfig: fields(map[string][]string{"summary": {PermView, PermEdit}, "customfield_7": {PermView, PermEdit}})}, project: "acme"},
			{name: "the project by number, kept by identifier", in: CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("3")}, project: "acme"},
			{name: "a JQL share of a known project", in: CreateRequest{Type: TypeJQL, ProjectID: str("acme"), JQL: str("status = Open")}, project: "acme"},
			{name: "every problem at once", in: CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("other"),
				FieldsConfig: fields(map[string][]string{"storypoints": {PermView}, "customfield_99": {PermView}, "status": {PermView, PermEdit},
					"comment": {PermView, PermEdit}, "duedate": {PermEdit}})},
				errors: []string{"projectId:project_mismatch", "fieldsConfig.fieldConfigs.comment:not_editable", "fieldsConfig.fieldConfigs.customfield_99:unknown_field",
					"fieldsConfig.fieldConfigs.status:not_editable", "fieldsConfig.fieldConfigs.storypoints:unknown_field"}},
			{name: "an unknown issue", in: CreateRequest{Type: TypeIssue, IssueID: str("41"), ProjectID: str("acme")},
				errors: []string{"issueId:unknown_issue"}},
			{name: "an unknown project", in: CreateRequest{Type: TypeJQL, ProjectID: str("nope"), JQL: str("status = Open")},
				errors: []string{"projectId:unknown_project"}},
			{name: "a query outside the subset", in: CreateRequest{Type: TypeJQL, ProjectID: str("acme"), JQL: str("status = Open OR labels = x")},
				errors: []string{"jql:invalid_jql"}},
			{name: "a query of another project", in: CreateRequest{Type: TypeJQL, ProjectID: str("acme"), JQL: str("project = other AND status = Open")},
				errors: []string{"jql:invalid_jql"}},
			{name: "the tracker down", in: CreateRequest{Type: TypeIssue, IssueID: str("42")}, down: true, status: 503},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tracker.err = nil
				if tt.down {
					tracker.err = host.ErrUnavailable
				}
				before := stored()
				sh, err := s.Create(ctx, alice, &tt.in)
				if tt.project != "" {
					if err != nil || sh.ProjectID == nil || *sh.ProjectID != tt.project {
						t.Fatalf("create: %+v %v, want project %q", sh, err, tt.project)
					}
					return
				}
				var d *problem.Details
				if !errors.As(err, &d) {
					t.Fatalf("create: %v, want a problem", err)
				}
				if tt.status != 0 && (d.Status != tt.status || d.Code != "host_unavailable" || d.RetryAfter == 0) {
					t.Errorf("refusal %d %s retry %d", d.Status, d.Code, d.RetryAfter)
				}
				if tt.errors != nil {
					var got []string
					for _, fe := range d.Errors {
						got = append(got, fe.Field+":"+fe.Code)
					}
					if !slices.Equal(got, tt.errors) {
						t.Errorf("errors %v, want %v", got, tt.errors)
					}
				}
				if n := stored(); n != before {
					t.Errorf("%d shares stored, want %d: a refused create stored one", n, before)
				}
			})
		}

		t.Run("an update keeps the project filled in", func(t *testing.T) {
			tracker.err = nil
			sh, err := s.Create(ctx, alice, &CreateRequest{Type: TypeIssue, IssueID: str("42")})
			if err != nil {
				t.Fatal(err)
			}
			up, err := s.Update(ctx, alice, sh.UUID, &CreateRequest{Type: TypeIssue, IssueID: str("42"),
				FieldsConfig: fields(map[string][]string{"summary": {PermView}})})
			if err != nil || up.ProjectID == nil || *up.ProjectID != "acme" {
				t.Fatalf("update: %+v %v", up, err)
			}
			_, err = s.Update(ctx, alice, sh.UUID, &CreateRequest{Type: TypeIssue, IssueID: str("42"),
				FieldsConfig: fields(map[string][]string{"priority": {PermEdit}})})
			var d *problem.Details
			if !errors.As(err, &d) || len(d.Errors) != 1 || d.Errors[0].Code != "not_editable" {
				t.Errorf("update with EDIT on priority: %v", err)
			}
		})
	})
}

// TestJQLPages: with a tracker connected, a JQL share's page lists the
// issues its query matches in its project, 50 a page, with the viewed
// fields as columns, each opening at /s/{uuid}/issues/{id} with the
// issue rules; an issue the query does not match, or of another project,
// is 404: a share never leads outside its query.
func TestJQLPages(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{}}
		for i := 1; i <= 60; i++ {
			in := trackerIssue()
			in.ID = strconv.Itoa(1000 + i)
			in.Fields[0].Value = "Issue number " + in.ID
			tracker.issues[in.ID] = in
		}
		elsewhere := trackerIssue()
		elsewhere.ID, elsewhere.Project = "2001", host.Project{ID: "other", Number: "9"}
		tracker.issues["2001"] = elsewhere
		// The query matches every issue but 1060.
		tracker.match = func(in *host.Issue, q *host.Query) bool { return q != nil && in.ID != "1060" }
		e.viewer = NewViewer(e.store, tracker)
		sh := e.create(alice, &CreateRequest{Type: TypeJQL, ProjectID: str("acme"), JQL: str("status = Open ORDER BY created DESC"),
			FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{"summary": {FieldPermissions: []string{PermView}},
				"description": {FieldPermissions: []string{PermView}}}}}).UUID

		page := e.page("GET", "/s/"+sh, htmlAccept, "", "", "203.0.113.3").Body.String()
		for _, want := range []string{"59 issues match.", `<a href="/s/` + sh + `/issues/1001">1001</a>`, "<th>Subject</th>",
			"Issue number 1050", "Page 1 of 2", `<a href="/s/` + sh + `?page=2">Next</a>`} {
			if !strings.Contains(page, want) {
				t.Errorf("the list lacks %q", want)
			}
		}
		if strings.Contains(page, "Issue number 1051") || strings.Contains(page, "<th>Status</th>") {
			t.Errorf("the first page shows the 51st issue or an unshared column")
		}
		if p2 := e.page("GET", "/s/"+sh+"?page=2", htmlAccept, "", "", "203.0.113.3").Body.String(); !strings.Contains(p2, "Issue number 1059") || strings.Contains(p2, "Issue number 1060") {
			t.Errorf("the second page:\n%s", p2)
		}
		w := e.page("GET", "/s/"+sh, jsonAccept, "", "", "203.0.113.3")
		if !strings.Contains(w.Body.String(), `"list":{"total":59,"page":1,"pages":2,"issues":[{"id":"1001","fields":[{"id":"summary"`) {
			t.Errorf("JSON list: %.300s", w.Body)
		}

		issue := e.page("GET", "/s/"+sh+"/issues/1010", htmlAccept, "", "", "203.0.113.3")
		if issue.Code != 200 || !strings.Contains(issue.Body.String(), "Issue number 1010") || strings.Contains(issue.Body.String(), "/comments") {
			t.Errorf("an issue of the list: %d", issue.Code)
		}
		for _, id := range []string{"1060", "2001", "9999", "abc"} {
			wantProblem(t, e.page("GET", "/s/"+sh+"/issues/"+id, jsonAccept, "", "", "203.0.113.3"), 404, "not_found")
		}
		tracker.err = host.ErrUnavailable
		wantProblem(t, e.page("GET", "/s/"+sh, jsonAccept, "", "", "203.0.113.3"), 503, "host_unavailable")
		tracker.err = nil

		// Writes and downloads on an issue opened from the list: only
		// while the query matches it.
		talk := e.create(alice, &CreateRequest{Type: TypeJQL, ProjectID: str("acme"), JQL: str("status = Open"),
			FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{"comment": {FieldPermissions: []string{PermView, PermAdd}},
				"attachment": {FieldPermissions: []string{PermView, PermViewContent}}}}}).UUID
		tracker.files = map[string]string{"9": "JPEG bytes"}
		if p := e.page("GET", "/s/"+talk+"/issues/1010", htmlAccept, "", "", "203.0.113.3").Body.String(); !strings.Contains(p, `action="/s/`+talk+`/issues/1010/comments"`) ||
			!strings.Contains(p, `href="/s/`+talk+`/issues/1010/attachments/9"`) {
			t.Errorf("the listed issue's forms and links:\n%s", p)
		}
		w = e.page("POST", "/s/"+talk+"/issues/1010/comments", htmlAccept, formType, "body=From+the+list", "203.0.113.3")
		if c := tracker.issues["1010"].Comments; w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/s/"+talk+"/issues/1010" ||
			!strings.HasSuffix(c[len(c)-1].Body, "From the list") {
			t.Errorf("a comment on a listed issue: %d %s", w.Code, w.Header())
		}
		before := len(tracker.issues["1060"].Comments)
		wantProblem(t, e.page("POST", "/s/"+talk+"/issues/1060/comments", jsonAccept, formType, "body=x", "203.0.113.3"), 404, "not_found")
		if len(tracker.issues["1060"].Comments) != before {
			t.Errorf("a comment reached an issue outside the query")
		}
		if dl := e.page("GET", "/s/"+talk+"/issues/1010/attachments/9", "", "", "", "203.0.113.3"); dl.Code != 200 || dl.Body.String() != "JPEG bytes" {
			t.Errorf("a download from a listed issue: %d", dl.Code)
		}
		wantProblem(t, e.page("GET", "/s/"+talk+"/issues/1060/attachments/9", jsonAccept, "", "", "203.0.113.3"), 404, "not_found")
		wantProblem(t, e.page("POST", "/s/"+talk+"/comments", jsonAccept, formType, "body=x", "203.0.113.3"), 404, "not_found")
	})
}

// TestBoardAndTimeline: with a tracker connected, a BOARD share shows
// its project's issues in a column per status, a TIMELINE share those
// with a start or due date as bars of an SVG drawn on the server; each
// issue opens while the share shows it, any other is 404.
func TestBoardAndTimeline(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{}}
		for i, st := range []string{"New", "In Progress", "New", "Closed"} {
			in := trackerIssue()
			in.ID = strconv.Itoa(101 + i)
			in.Fields[0].Value = "Card " + in.ID
			in.Fields[2].Value = st
			if i < 2 {
				in.Fields = append(in.Fields, host.Field{ID: "startdate", Name: "Start date", Value: "2026-11-0" + strconv.Itoa(2+i)},
					host.Field{ID: "duedate", Name: "Due date", Value: "2027-01-1" + strconv.Itoa(i)})
			}
			tracker.issues[in.ID] = in
		}
		e.viewer = NewViewer(e.store, tracker)
		fields := &FieldsConfig{FieldConfigs: map[string]FieldConfig{"summary": {FieldPermissions: []string{PermView}}, "status": {FieldPermissions: []string{PermView}},
			"startdate": {FieldPermissions: []string{PermView}}, "duedate": {FieldPermissions: []string{PermView}}}}
		board := e.create(alice, &CreateRequest{Type: TypeBoard, ProjectID: str("acme"), Board: &Board{ID: "7"}, FieldsConfig: fields}).UUID
		timeline := e.create(alice, &CreateRequest{Type: TypeTimeline, ProjectID: str("acme"), FieldsConfig: fields}).UUID
		// A share that lets the party view neither statuses nor dates
		// shows one column, and no bar.
		bare := &FieldsConfig{FieldConfigs: map[string]FieldConfig{"summary": {FieldPermissions: []string{PermView}}}}
		bareBoard := e.create(alice, &CreateRequest{Type: TypeBoard, ProjectID: str("acme"), Board: &Board{ID: "7"}, FieldsConfig: bare}).UUID
		bareTimeline := e.create(alice, &CreateRequest{Type: TypeTimeline, ProjectID: str("acme"), FieldsConfig: bare}).UUID
		if p := e.page("GET", "/s/"+bareBoard, htmlAccept, "", "", "203.0.113.4").Body.String(); strings.Contains(p, "In Progress") || !strings.Contains(p, "<h3>Issues</h3>") {
			t.Errorf("a board without VIEW on status shows statuses:\n%s", p)
		}
		if p := e.page("GET", "/s/"+bareTimeline, htmlAccept, "", "", "203.0.113.4").Body.String(); strings.Contains(p, "2026-11") || strings.Contains(p, "<svg") {
			t.Errorf("a timeline without VIEW on dates shows dates:\n%s", p)
		}

		page := e.page("GET", "/s/"+board, htmlAccept, "", "", "203.0.113.4").Body.String()
		for _, want := range []string{"<h3>New</h3>", "<h3>In Progress</h3>", "<h3>Closed</h3>", `<a href="/s/` + board + `/issues/103">103</a>`, "Card 104"} {
			if !strings.Contains(page, want) {
				t.Errorf("the board lacks %q", want)
			}
		}
		if strings.Index(page, "Card 101") > strings.Index(page, "<h3>In Progress</h3>") || strings.Index(page, "Card 103") > strings.Index(page, "<h3>In Progress</h3>") {
			t.Errorf("the New cards are not in the New column")
		}
		tl := e.page("GET", "/s/"+timeline, htmlAccept, "", "", "203.0.113.4").Body.String()
		for _, want := range []string{`<svg class="timeline"`, "Nov 2026", "Jan 2027", `<a href="/s/` + timeline + `/issues/101">`, "101: 2026-11-02 to 2027-01-10"} {
			if !strings.Contains(tl, want) {
				t.Errorf("the timeline lacks %q", want)
			}
		}
		if strings.Contains(tl, "/issues/103") || strings.Contains(tl, "<script") {
			t.Errorf("the timeline shows an issue without dates, or a script")
		}
		if w := e.page("GET", "/s/"+board+"/issues/104", jsonAccept, "", "", "203.0.113.4"); w.Code != 200 {
			t.Errorf("a card's issue: %d %s", w.Code, w.Body)
		}
		wantProblem(t, e.page("GET", "/s/"+timeline+"/issues/103", jsonAccept, "", "", "203.0.113.4"), 404, "not_found")
		wantProblem(t, e.page("GET", "/s/"+board+"/issues/999", jsonAccept, "", "", "203.0.113.4"), 404, "not_found")
	})
}

// TestHostileTrackerContent: a comment of 1 MiB with markup renders
// (cleaned) and a query matching 10,000 issues lists 50 a page, a board
// at most 500: the tracker's content cannot make a page unbounded.
func TestHostileTrackerContent(t *testing.T) {
	e := newEnv(t, storetest.OpenBolt(t))
	tracker := &fakeTracker{issues: map[string]*host.Issue{}}
	big := trackerIssue()
	big.Comments = []host.Comment{{ID: "1", Author: "Sam", Body: strings.Repeat("**x** <script>alert(1)</script> [y](javascript:z)\n", 1<<20/50)}}
	tracker.issues["42"] = big
	for i := range 10_000 {
		in := trackerIssue()
		in.ID = strconv.Itoa(100_000 + i)
		tracker.issues[in.ID] = in
	}
	e.viewer = NewViewer(e.store, tracker)
	fields := &FieldsConfig{FieldConfigs: map[string]FieldConfig{"summary": {FieldPermissions: []string{PermView}},
		"comment": {FieldPermissions: []string{PermView, PermViewContent}}, "status": {FieldPermissions: []string{PermView}}}}
	one := e.create(alice, &CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("acme"), FieldsConfig: fields}).UUID
	page := e.page("GET", "/s/"+one, htmlAccept, "", "", "203.0.113.5").Body.String()
	if strings.Count(page, "<strong>x</strong>") < 20_000 || strings.Contains(page, "<script>alert") || strings.Contains(page, "javascript:") {
		t.Errorf("the 1 MiB comment: %d bold, script %v", strings.Count(page, "<strong>x</strong>"), strings.Contains(page, "<script>alert"))
	}
	list := e.create(alice, &CreateRequest{Type: TypeJQL, ProjectID: str("acme"), JQL: str("status = Open"), FieldsConfig: fields}).UUID
	if p := e.page("GET", "/s/"+list+"?page=200", htmlAccept, "", "", "203.0.113.5").Body.String(); !strings.Contains(p, "10001 issues match.") || !strings.Contains(p, "Page 200 of 201") ||
		strings.Count(p, "/issues/") != 50 {
		t.Errorf("page 200 of the list: %d links", strings.Count(p, "/issues/"))
	}
	board := e.create(alice, &CreateRequest{Type: TypeBoard, ProjectID: str("acme"), Board: &Board{ID: "7"}, FieldsConfig: fields}).UUID
	if p := e.page("GET", "/s/"+board, htmlAccept, "", "", "203.0.113.5").Body.String(); strings.Count(p, `class="card"`) != maxBoard {
		t.Errorf("the board shows %d cards, want %d", strings.Count(p, `class="card"`), maxBoard)
	}
}
