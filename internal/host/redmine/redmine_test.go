package redmine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

const testKey = "0123456789abcdef0123456789abcdef01234567"

// issueJSON is issue 42 as Redmine answers it, with a private note, a
// journal of field changes alone, a list custom field and an attachment.
const issueJSON = `{"issue":{"id":42,"project":{"id":3,"name":"ACME"},"tracker":{"id":1,"name":"Bug"},
"status":{"id":2,"name":"In Progress"},"priority":{"id":4,"name":"Normal"},"author":{"id":5,"name":"Ann Author"},
"assigned_to":{"id":6,"name":"Sam Support"},"subject":"Printer jams","description":"It **jams**.","start_date":"2026-11-01",
"due_date":null,"is_private":false,"created_on":"2026-11-01T08:00:00Z","updated_on":"2026-11-20T09:30:00Z",
"custom_fields":[{"id":7,"name":"Sites","multiple":true,"value":["Berlin","Oslo"]},{"id":8,"name":"Cost centre","value":"CC-9"}],
"journals":[{"id":10,"user":{"id":6,"name":"Sam Support"},"notes":"We ordered a part.","created_on":"2026-11-02T10:00:00Z","private_notes":false},
{"id":11,"user":{"id":6,"name":"Sam Support"},"notes":"Customer is difficult.","created_on":"2026-11-03T10:00:00Z","private_notes":true},
{"id":12,"user":{"id":6,"name":"Sam Support"},"notes":"","created_on":"2026-11-04T10:00:00Z","private_notes":false}],
"attachments":[{"id":9,"filename":"photo.jpg","filesize":2048,"content_type":"image/jpeg","created_on":"2026-11-02T10:00:00Z"}]}}`

const projectJSON = `{"project":{"id":3,"name":"ACME","identifier":"acme"}}`

// fakeRedmine answers as Redmine does for the paths the connector reads,
// checking the key; answer overrides the issue's reply.
func fakeRedmine(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Redmine-API-Key") != testKey {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if answer != nil && answer(w, r) {
			return
		}
		switch r.URL.Path {
		case "/issues/42.json":
			if r.URL.Query().Get("include") != "journals,attachments" {
				t.Errorf("include %q", r.URL.Query().Get("include"))
			}
			w.Write([]byte(issueJSON))
		case "/projects/3.json":
			w.Write([]byte(projectJSON))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

// connect is a connector to url whose calls may take as long as a loaded
// machine makes them.
func connect(t *testing.T, url, key string) *Redmine {
	t.Helper()
	return connectWithin(t, url, key, testwait.Generous)
}

// connectWithin is a connector to url whose calls time out after timeout.
func connectWithin(t *testing.T, url, key string, timeout time.Duration) *Redmine {
	t.Helper()
	r, err := New(Config{URL: url, APIKey: key, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestIssue: an issue read by Jira's field ids, its public comments only
// (no private note, no journal of field changes), its project by
// identifier and number.
func TestIssue(t *testing.T) {
	srv, _ := fakeRedmine(t, nil)
	in, err := connect(t, srv.URL, testKey).Issue(context.Background(), "42")
	if err != nil {
		t.Fatal(err)
	}
	if in.ID != "42" || in.Project != (host.Project{ID: "acme", Number: "3", Name: "ACME"}) || in.Markup != "markdown" {
		t.Errorf("issue %+v", in)
	}
	for id, want := range map[string]string{"summary": "Printer jams", "description": "It **jams**.", "status": "In Progress",
		"issuetype": "Bug", "assignee": "Sam Support", "reporter": "Ann Author", "startdate": "2026-11-01", "duedate": "",
		"customfield_7": "Berlin, Oslo", "customfield_8": "CC-9"} {
		if f, ok := in.Field(id); !ok || f.Value != want {
			t.Errorf("field %s: %+v, want %q", id, f, want)
		}
	}
	if len(in.Comments) != 1 || in.Comments[0].Body != "We ordered a part." || in.Comments[0].Author != "Sam Support" {
		t.Errorf("comments %+v, want the public one only", in.Comments)
	}
	if len(in.Attachments) != 1 || in.Attachments[0] != (host.Attachment{ID: "9", Name: "photo.jpg", Size: 2048,
		ContentType: "image/jpeg", Created: time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)}) {
		t.Errorf("attachments %+v", in.Attachments)
	}
}

// TestIssueRefusals: what the connector answers for each way a call can
// go wrong, and that no error carries the API key.
func TestIssueRefusals(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a redirect was followed, with key %q", r.Header.Get("X-Redmine-API-Key"))
	}))
	defer elsewhere.Close()
	tests := []struct {
		name    string
		id      string
		key     string
		answer  func(w http.ResponseWriter, r *http.Request) bool
		want    error
		calls   int64         // -1: any
		timeout time.Duration // of the connector; 0: connect's
	}{
		{name: "private issue", id: "42", answer: func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != "/issues/42.json" {
				return false
			}
			w.Write([]byte(strings.Replace(issueJSON, `"is_private":false`, `"is_private":true`, 1)))
			return true
		}, want: host.ErrNotFound, calls: 1},
		{name: "unknown issue", id: "41", want: host.ErrNotFound, calls: 1},
		{name: "not a number", id: "../users/current", want: host.ErrNotFound, calls: 0},
		{name: "forbidden", id: "42", answer: func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusForbidden)
			return true
		}, want: host.ErrNotFound, calls: 1},
		{name: "key refused", id: "42", key: "wrong-key-wrong-key-wrong-key-wrong-key0", want: ErrRefused, calls: 1},
		{name: "server error", id: "42", answer: func(w http.ResponseWriter, r *http.Request) bool {
			w.WriteHeader(http.StatusBadGateway)
			return true
		}, want: host.ErrUnavailable, calls: 1},
		{name: "redirect elsewhere", id: "42", answer: func(w http.ResponseWriter, r *http.Request) bool {
			http.Redirect(w, r, elsewhere.URL+"/issues/42.json", http.StatusFound)
			return true
		}, want: host.ErrNotFound, calls: 1}, // not followed: not here (a renamed wiki page's old title is such)
		{name: "no answer in time", id: "42", answer: func(w http.ResponseWriter, r *http.Request) bool {
			<-r.Context().Done()
			return true
		}, want: host.ErrUnavailable, calls: -1, timeout: 500 * time.Millisecond},
		{name: "not JSON", id: "42", answer: func(w http.ResponseWriter, r *http.Request) bool {
			w.Write([]byte("<html>maintenance</html>"))
			return true
		}, want: host.ErrUnavailable, calls: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, calls := fakeRedmine(t, tt.answer)
			key := testKey
			if tt.key != "" {
				key = tt.key
			}
			timeout := testwait.Generous
			if tt.timeout != 0 { // the case is about the timeout
				timeout = tt.timeout
			}
			_, err := connectWithin(t, srv.URL, key, timeout).Issue(context.Background(), tt.id)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Issue(%q) = %v, want %v", tt.id, err, tt.want)
			}
			if tt.calls >= 0 && calls.Load() != tt.calls {
				t.Errorf("%d calls to Redmine, want %d", calls.Load(), tt.calls)
			}
			if strings.Contains(err.Error(), key) {
				t.Errorf("the error carries the API key: %v", err)
			}
		})
	}
}

// TestNew: what a config may name.
func TestNew(t *testing.T) {
	for _, tt := range []struct {
		url, key string
		ok       bool
	}{
		{"http://redmine.internal:3000", testKey, true},
		{"https://redmine.example.com/redmine/", testKey, true},
		{"ftp://redmine.internal", testKey, false},
		{"http://user:pass@redmine.internal", testKey, false},
		{"http://redmine.internal/?a=1", testKey, false},
		{"redmine.internal", testKey, false},
		{"http://redmine.internal", " ", false},
	} {
		_, err := New(Config{URL: tt.url, APIKey: tt.key})
		if (err == nil) != tt.ok {
			t.Errorf("New(%q): %v, want ok %v", tt.url, err, tt.ok)
		}
		if err != nil && strings.Contains(err.Error(), testKey) {
			t.Errorf("the error carries the key: %v", err)
		}
	}
}
