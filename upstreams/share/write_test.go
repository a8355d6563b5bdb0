package share

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// TestCommentFromPage: a comment posted on a shared issue's page goes to
// the tracker through keygate's account, beginning with a line naming
// who wrote it and through which share; it is recorded in the share's
// activity and announced as share.commented. It needs ADD on comment,
// what reading needs (the unlock), a request from the page's own origin,
// a body of text within 32 KiB, and 10 a minute per client at most.
func TestCommentFromPage(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{"42": trackerIssue()}}
		e.viewer = NewViewer(e.store, tracker)
		create := func(perms []string, password string) string {
			in := &CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("acme"),
				FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{"comment": {FieldPermissions: perms}}}}
			if password != "" {
				in.Password = Password(password)
			}
			return e.create(alice, in).UUID
		}
		open := create([]string{PermView, PermAdd}, "")
		viewOnly := create([]string{PermView}, "")
		locked := create([]string{PermView, PermAdd}, "open sesame")
		post := func(uuid, contentType, body, ip string, header ...string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("POST", "/s/"+uuid+"/comments", strings.NewReader(body))
			req = req.WithContext(clientip.With(req.Context(), netip.MustParseAddr(ip)))
			req.Header.Set("Content-Type", contentType)
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			return serve(e.viewer, req)
		}
		form := func(text string) string { return url.Values{"body": {text}}.Encode() }
		sameOrigin := []string{"Origin", "http://localhost:8080", "Sec-Fetch-Site", "same-origin"}
		last := func() string {
			c := tracker.issues["42"].Comments
			return c[len(c)-1].Body
		}

		t.Run("a comment from the page", func(t *testing.T) {
			e.events.Reset(t)
			w := post(open, formType, form("Thanks, it works now."), "203.0.113.7", sameOrigin...)
			if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/s/"+open {
				t.Fatalf("form: %d %s %s", w.Code, w.Header(), w.Body)
			}
			if want := "From an unnamed visitor via shared link " + open[:4] + "…\n\nThanks, it works now."; last() != want {
				t.Errorf("on the tracker: %q, want %q", last(), want)
			}
			acts, _ := e.store.Activity(context.Background(), alice, open, 0, 0)
			if acts[0].Action != ActionCommented || *acts[0].IP != "203.0.113.7" {
				t.Errorf("activity %s", mustJSON(t, acts))
			}
			got := e.events.Take(t)
			if len(got) != 1 || got[0].Type != events.ShareCommented || !strings.Contains(string(got[0].Data), open) {
				t.Errorf("events %+v", got)
			}
			// Chromium's own form under the page's no-referrer policy.
			if w := post(open, formType, form("From the form."), "203.0.113.7", "Sec-Fetch-Site", "same-origin", "Origin", "null"); w.Code != http.StatusSeeOther {
				t.Errorf("the page's own form: %d %s", w.Code, w.Body)
			}
			w = post(open, "application/json", `{"body":"And a second one."}`, "203.0.113.7", "Accept", "application/json")
			if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"body":"And a second one."`) {
				t.Errorf("JSON: %d %s", w.Code, w.Body)
			}
		})

		t.Run("the page shows the form only with ADD", func(t *testing.T) {
			if w := e.page("GET", "/s/"+open, htmlAccept, "", "", "203.0.113.7"); !strings.Contains(w.Body.String(), `action="/s/`+open+`/comments"`) {
				t.Errorf("no comment form:\n%s", w.Body)
			}
			if w := e.page("GET", "/s/"+viewOnly, htmlAccept, "", "", "203.0.113.7"); strings.Contains(w.Body.String(), "/comments") {
				t.Errorf("a comment form without ADD")
			}
		})

		refusals := []struct {
			name    string
			uuid    string
			body    string
			header  []string
			status  int
			code    string
			tracker error
			noHost  bool
		}{
			{name: "from another site", uuid: open, body: form("x"), header: []string{"Sec-Fetch-Site", "cross-site"}, status: 403, code: "forbidden"},
			{name: "another origin", uuid: open, body: form("x"), header: []string{"Origin", "https://evil.example"}, status: 403, code: "forbidden"},
			{name: "a null origin", uuid: open, body: form("x"), header: []string{"Origin", "null"}, status: 403, code: "forbidden"},
			{name: "a same-site page", uuid: open, body: form("x"), header: []string{"Sec-Fetch-Site", "same-site", "Origin", "http://localhost:8080"}, status: 403, code: "forbidden"},
			{name: "without ADD", uuid: viewOnly, body: form("x"), status: 403, code: "forbidden"},
			{name: "not unlocked", uuid: locked, body: form("x"), status: 401, code: "forbidden"},
			{name: "empty", uuid: open, body: form("  \n "), status: 400, code: "invalid_request"},
			{name: "too long", uuid: open, body: form(strings.Repeat("a", 33<<10)), status: 400, code: "invalid_request"},
			{name: "the tracker down", uuid: open, body: form("x"), tracker: host.ErrUnavailable, status: 503, code: "host_unavailable"},
			{name: "no tracker", uuid: open, body: form("x"), noHost: true, status: 404, code: "not_found"},
		}
		for _, tt := range refusals {
			t.Run(tt.name, func(t *testing.T) {
				tracker.err = tt.tracker
				defer func() { tracker.err = nil; e.viewer = NewViewer(e.store, tracker) }()
				if tt.noHost {
					e.viewer = NewViewer(e.store, nil)
				}
				before := len(tracker.issues["42"].Comments)
				w := post(tt.uuid, formType, tt.body, "198.51.100.9", append([]string{"Accept", "application/json"}, tt.header...)...)
				wantProblem(t, w, tt.status, tt.code)
				if n := len(tracker.issues["42"].Comments); n != before {
					t.Errorf("a refused comment reached the tracker")
				}
			})
		}

		t.Run("10 a minute per client", func(t *testing.T) {
			passed := 0
			for range 12 {
				if w := post(open, formType, form("again"), "192.0.2.200"); w.Code == http.StatusSeeOther {
					passed++
				} else if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
					t.Fatalf("%d %s", w.Code, w.Body)
				}
			}
			if passed != 10 {
				t.Errorf("%d comments let through, want 10", passed)
			}
			if w := post(open, formType, form("from elsewhere"), "192.0.2.201"); w.Code != http.StatusSeeOther {
				t.Errorf("another client: %d", w.Code)
			}
		})
	})
}

// TestAttachmentDownload: where the share lets the party view the
// attachments' content, the page links them and each downloads from the
// tracker as an attachment the browser may not sniff, run or frame; only
// attachments of the shared issue, only with VIEW_CONTENT, only once
// unlocked.
func TestAttachmentDownload(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{"42": trackerIssue()}, files: map[string]string{"9": "JPEG bytes", "10": "another issue's"}}
		e.viewer = NewViewer(e.store, tracker)
		create := func(perms []string, password string) string {
			in := &CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("acme"),
				FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{"attachment": {FieldPermissions: perms}}}}
			if password != "" {
				in.Password = Password(password)
			}
			return e.create(alice, in).UUID
		}
		content := create([]string{PermView, PermViewContent}, "")
		names := create([]string{PermView}, "")
		locked := create([]string{PermView, PermViewContent}, "open sesame")

		if w := e.page("GET", "/s/"+content, htmlAccept, "", "", "203.0.113.7"); !strings.Contains(w.Body.String(), `href="/s/`+content+`/attachments/9"`) {
			t.Errorf("no download link:\n%s", w.Body)
		}
		if w := e.page("GET", "/s/"+names, htmlAccept, "", "", "203.0.113.7"); strings.Contains(w.Body.String(), "/attachments/") {
			t.Errorf("a download link without VIEW_CONTENT")
		}
		w := e.page("GET", "/s/"+content+"/attachments/9", "", "", "", "203.0.113.7")
		for h, want := range map[string]string{"Content-Type": "application/octet-stream", "Content-Disposition": `attachment; filename=photo.jpg`,
			"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox; default-src 'none'", "Cache-Control": "no-store"} {
			if got := w.Header().Get(h); got != want {
				t.Errorf("%s: %q, want %q", h, got, want)
			}
		}
		if w.Code != 200 || w.Body.String() != "JPEG bytes" {
			t.Errorf("download: %d %q", w.Code, w.Body)
		}
		for _, tt := range []struct {
			name, path string
			fail       error
			status     int
			code       string
			asked      bool // whether the tracker is asked for the content
		}{
			{name: "an attachment of another issue", path: "/s/" + content + "/attachments/10", status: 404, code: "not_found"},
			{name: "without VIEW_CONTENT", path: "/s/" + names + "/attachments/9", status: 404, code: "not_found"},
			{name: "not unlocked", path: "/s/" + locked + "/attachments/9", status: 401, code: "forbidden"},
			{name: "the tracker down", path: "/s/" + content + "/attachments/9", fail: host.ErrUnavailable, status: 503, code: "host_unavailable"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tracker.err = tt.fail
				defer func() { tracker.err = nil }()
				before := tracker.downloads
				wantProblem(t, e.page("GET", tt.path, jsonAccept, "", "", "203.0.113.7"), tt.status, tt.code)
				if tt.fail == nil && tracker.downloads != before {
					t.Errorf("the tracker was asked for the content")
				}
			})
		}
	})
}

// TestEditFromPage: a field with EDIT changes on the tracker from the
// page (summary, dates, description, custom fields), recorded as edited
// and announced as share.edited; a field keygate cannot write, one
// without EDIT, a bad date or a line break in a one-line field is
// refused and changes nothing.
func TestEditFromPage(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{"42": trackerIssue()}}
		e.viewer = NewViewer(e.store, tracker)
		sh := e.create(alice, &CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("acme"),
			FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{
				"summary":       {FieldPermissions: []string{PermView, PermEdit}},
				"customfield_7": {FieldPermissions: []string{PermView, PermEdit}},
				"description":   {FieldPermissions: []string{PermView}},
			}}}).UUID
		post := func(field, body string, header ...string) *httptest.ResponseRecorder {
			req := httptest.NewRequest("POST", "/s/"+sh+"/fields/"+field, strings.NewReader(body))
			req = req.WithContext(clientip.With(req.Context(), netip.MustParseAddr("203.0.113.8")))
			req.Header.Set("Content-Type", formType)
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			return serve(e.viewer, req)
		}
		value := func(id string) string { f, _ := tracker.issues["42"].Field(id); return f.Value }

		page := e.page("GET", "/s/"+sh, htmlAccept, "", "", "203.0.113.8").Body.String()
		if !strings.Contains(page, `action="/s/`+sh+`/fields/summary"`) || strings.Contains(page, `/fields/description"`) {
			t.Errorf("edit forms:\n%s", page)
		}
		e.events.Reset(t)
		if w := post("summary", "value=Printer+jams+on+duplex", "Origin", "http://localhost:8080"); w.Code != http.StatusSeeOther || value("summary") != "Printer jams on duplex" {
			t.Fatalf("summary: %d %s, now %q", w.Code, w.Body, value("summary"))
		}
		if got := e.events.Take(t); len(got) != 1 || got[0].Type != events.ShareEdited {
			t.Errorf("events %+v", got)
		}
		acts, _ := e.store.Activity(context.Background(), alice, sh, 0, 0)
		if !slices.ContainsFunc(acts, func(a Activity) bool { return a.Action == ActionEdited && *a.IP == "203.0.113.8" }) {
			t.Errorf("activity %s", mustJSON(t, acts))
		}
		if w := post("customfield_7", "value=CC-12", "Accept", "application/json"); w.Code != 200 || !strings.Contains(w.Body.String(), `"value":"CC-12"`) || value("customfield_7") != "CC-12" {
			t.Errorf("custom field: %d %s", w.Code, w.Body)
		}
		for _, tt := range []struct {
			name, field, body string
			header            []string
			status            int
			code              string
		}{
			{name: "without EDIT", field: "description", body: "value=x", status: 403, code: "forbidden"},
			{name: "a field keygate cannot write", field: "status", body: "value=Closed", status: 403, code: "forbidden"},
			{name: "a line break in the summary", field: "summary", body: "value=a%0Ab", status: 400, code: "invalid_request"},
			{name: "an empty summary", field: "summary", body: "value=+", status: 400, code: "invalid_request"},
			{name: "from another site", field: "summary", body: "value=x", header: []string{"Sec-Fetch-Site", "cross-site"}, status: 403, code: "forbidden"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				before := mustJSON(t, tracker.issues["42"].Fields)
				wantProblem(t, post(tt.field, tt.body, append([]string{"Accept", "application/json"}, tt.header...)...), tt.status, tt.code)
				if mustJSON(t, tracker.issues["42"].Fields) != before {
					t.Errorf("a refused edit changed the issue")
				}
			})
		}
	})
}

// TestUploadFromPage: with ADD on attachment, a file of at most 10 MiB
// attached from the page reaches the tracker under its base name, is
// recorded as attachment-added, and downloads back; refusals attach
// nothing.
func TestUploadFromPage(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		tracker := &fakeTracker{issues: map[string]*host.Issue{"42": trackerIssue()}}
		e.viewer = NewViewer(e.store, tracker)
		create := func(perms ...string) string {
			return e.create(alice, &CreateRequest{Type: TypeIssue, IssueID: str("42"), ProjectID: str("acme"),
				FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{"attachment": {FieldPermissions: perms}}}}).UUID
		}
		sh := create(PermView, PermViewContent, PermAdd)
		viewOnly := create(PermView)
		upload := func(uuid, filename string, content []byte, header ...string) *httptest.ResponseRecorder {
			var b bytes.Buffer
			mw := multipart.NewWriter(&b)
			if filename != "" {
				fw, _ := mw.CreateFormFile("file", filename)
				fw.Write(content)
			}
			mw.Close()
			req := httptest.NewRequest("POST", "/s/"+uuid+"/attachments", &b)
			req = req.WithContext(clientip.With(req.Context(), netip.MustParseAddr("203.0.113.9")))
			req.Header.Set("Content-Type", mw.FormDataContentType())
			for i := 0; i+1 < len(header); i += 2 {
				req.Header.Set(header[i], header[i+1])
			}
			return serve(e.viewer, req)
		}
		if page := e.page("GET", "/s/"+sh, htmlAccept, "", "", "203.0.113.9").Body.String(); !strings.Contains(page, `action="/s/`+sh+`/attachments" enctype="multipart/form-data"`) {
			t.Errorf("no upload form:\n%s", page)
		}
		w := upload(sh, `C:\Users\eve\..\report<1>.txt`, []byte("the log"), "Accept", "application/json")
		if w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"file":"report\u003c1\u003e.txt"`) {
			t.Fatalf("upload: %d %s", w.Code, w.Body)
		}
		atts := tracker.issues["42"].Attachments
		last := atts[len(atts)-1]
		if last.Name != "report<1>.txt" || last.Size != 7 {
			t.Errorf("on the tracker: %+v", last)
		}
		if dl := e.page("GET", "/s/"+sh+"/attachments/"+last.ID, "", "", "", "203.0.113.9"); dl.Code != 200 || dl.Body.String() != "the log" {
			t.Errorf("download back: %d %q", dl.Code, dl.Body)
		}
		acts, _ := e.store.Activity(context.Background(), alice, sh, 0, 0)
		if !slices.ContainsFunc(acts, func(a Activity) bool { return a.Action == ActionAttachmentAdded }) {
			t.Errorf("activity %s", mustJSON(t, acts))
		}
		for _, tt := range []struct {
			name, uuid, filename string
			content              []byte
			header               []string
			status               int
			code                 string
		}{
			{name: "without ADD", uuid: viewOnly, filename: "a.txt", content: []byte("x"), status: 403, code: "forbidden"},
			{name: "no file", uuid: sh, status: 400, code: "invalid_request"},
			{name: "an empty file", uuid: sh, filename: "a.txt", status: 400, code: "invalid_request"},
			{name: "over 10 MiB", uuid: sh, filename: "big.bin", content: bytes.Repeat([]byte("a"), 10<<20+1), status: 413, code: "payload_too_large"},
			{name: "from another site", uuid: sh, filename: "a.txt", content: []byte("x"), header: []string{"Origin", "https://evil.example"}, status: 403, code: "forbidden"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				before := len(tracker.issues["42"].Attachments)
				wantProblem(t, upload(tt.uuid, tt.filename, tt.content, append([]string{"Accept", "application/json"}, tt.header...)...), tt.status, tt.code)
				if len(tracker.issues["42"].Attachments) != before {
					t.Errorf("a refused upload attached a file")
				}
			})
		}
	})
}
