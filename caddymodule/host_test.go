package caddymodule_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/redminetest"
)

// fakeRedmine answers the calls the Redmine connector makes, for the
// tests of its wiring into Caddy (the connector itself is tested against
// a real Redmine); down makes it answer 503.
func fakeRedmine(t *testing.T, key string, down *atomic.Bool, slow ...*atomic.Bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down != nil && down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if len(slow) > 0 && slow[0].Load() {
			<-r.Context().Done() // never answers: the caller gives up
			return
		}
		if r.Header.Get("X-Redmine-API-Key") != key {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/users/current.json":
			fmt.Fprint(w, `{"user":{"id":5,"login":"keygate-bot","firstname":"Keygate","lastname":"Bot","admin":false}}`)
		case "/projects.json":
			fmt.Fprint(w, `{"projects":[{"id":3,"name":"ACME","identifier":"acme"}],"total_count":1,"offset":0,"limit":100}`)
		case "/projects/3.json", "/projects/acme.json":
			fmt.Fprint(w, `{"project":{"id":3,"name":"ACME","identifier":"acme"}}`)
		case "/issues/42.json":
			fmt.Fprint(w, `{"issue":{"id":42,"project":{"id":3,"name":"ACME"},"status":{"id":1,"name":"New"},
				"subject":"Printer jams","description":"On page 2.","is_private":false,"created_on":"2026-11-01T08:00:00Z",
				"updated_on":"2026-11-01T08:00:00Z","journals":[],"attachments":[]}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestHostRedmine: a host redmine block connects the gateway: the admin
// API's check says who keygate's account is, the page of a shared issue
// shows it, the config names the key's file and never the key; without
// a host the check is 404; a tracker that fails gives the page 503.
func TestHostRedmine(t *testing.T) {
	const key = "redmine-api-key-0123456789abcdef01234567"
	var down, slow atomic.Bool
	redmine := fakeRedmine(t, key, &down, &slow)
	keyFile := filepath.Join(t.TempDir(), "redmine-api-key") // caddytest rewrites paths ending in .key
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hostBlock := fmt.Sprintf("host redmine {\n\t\t\turl %s\n\t\t\tapi_key_file %s\n\t\t\tcache 0s\n\t\t\ttimeout 1s\n\t\t}", redmine.URL, keyFile)
	b := bolt
	b.storage = func(*testing.T) string { return hostBlock }
	startGateway(t, b, defaultSite)

	r := do(t, "GET", adminURL+"/webapi/host", nil)
	var check struct {
		Platform string
		Account  struct {
			Login    string
			Projects []struct{ ID, Number, Name string }
		}
	}
	r.json(t, &check)
	if r.status != 200 || check.Platform != "redmine" || check.Account.Login != "keygate-bot" ||
		len(check.Account.Projects) != 1 || check.Account.Projects[0].ID != "acme" || check.Account.Projects[0].Number != "3" {
		t.Fatalf("host check: %d %s", r.status, r.body)
	}
	cfg := do(t, "GET", adminURL+"/config/apps/webapi/host", nil)
	if !strings.Contains(string(cfg.body), keyFile) || strings.Contains(string(cfg.body), key) {
		t.Errorf("the config shows %s", cfg.body)
	}

	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	sh, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": "42", "projectId": "acme",
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{"summary": map[string]any{"fieldPermissions": []string{"VIEW"}}}}})
	page := do(t, "GET", siteURL+"/s/"+sh.UUID, nil, "Accept", "text/html")
	if page.status != 200 || !strings.Contains(string(page.body), "Printer jams") || strings.Contains(string(page.body), "On page 2.") {
		t.Errorf("the shared issue's page: %d %s", page.status, page.body)
	}

	ctr := ctrKey(t, "alice", "create", "search")
	down.Store(true)
	if r := do(t, "POST", siteURL+ctrURL, ctrSimple("42", "From issue 42"), bearer(ctr)...); r.status != 503 ||
		r.header.Get("Retry-After") == "" || !strings.Contains(string(r.body), `"host_unavailable"`) {
		t.Errorf("a contract from the tracker while it is down: %d %s", r.status, r.body)
	}
	page = do(t, "GET", siteURL+"/s/"+sh.UUID, nil, "Accept", "application/json")
	if page.status != 503 || page.header.Get("Retry-After") == "" || !strings.Contains(string(page.body), `"host_unavailable"`) {
		t.Errorf("the tracker down: %d %s %s", page.status, page.header, page.body)
	}
	r = do(t, "GET", adminURL+"/webapi/host", nil)
	if r.status != 503 || strings.Contains(string(r.body), key) {
		t.Errorf("host check with the tracker down: %d %s", r.status, r.body)
	}
	down.Store(false)

	// A tracker that does not answer: the page gives up with the
	// connector's timeout (1 s here) and answers 503; the APIs stay up.
	slow.Store(true)
	client := &http.Client{Timeout: 10 * time.Second} // a page that hung would fail this, not wait forever
	resp, err := client.Get(siteURL + "/s/" + sh.UUID)
	if err != nil {
		t.Fatalf("the page with the tracker hanging: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("the page with the tracker hanging: %d %s", resp.StatusCode, resp.Header)
	}
	if r := do(t, "GET", siteURL+shrURL+"/"+sh.UUID, nil, bearer(alice)...); r.status != 200 {
		t.Errorf("the share API with the tracker hanging: %d", r.status)
	}
	if r := do(t, "POST", siteURL+ctrURL, ctrSimple("42", "From issue 42"), bearer(ctr)...); r.status != 503 {
		t.Errorf("a contract from the tracker while it hangs: %d %s", r.status, r.body)
	}
	slow.Store(false)
	if p, _ := ctrSearch(t, ctr, ""); p.TotalCount != 0 {
		t.Errorf("%d contracts stored while the tracker failed", p.TotalCount)
	}
	c := ctrCreate(t, ctr, ctrSimple("42", "From issue 42"))
	if c.CollectionID != "acme" || c.TemplateSource != "issue 42 of project acme, updated 2026-11-01T08:00:00Z" {
		t.Errorf("a contract from issue 42: %+v", c)
	}

	// Without a host: the check says none is configured.
	b.storage = func(*testing.T) string { return "" }
	startGateway(t, b, defaultSite)
	if r := do(t, "GET", adminURL+"/webapi/host", nil); r.status != 404 {
		t.Errorf("host check without a host: %d %s", r.status, r.body)
	}
}

// redmineGateway starts the test gateway (bbolt, the default site)
// connected to rm with the API key key, without a cache: the tests change
// Redmine behind the gateway's back.
func redmineGateway(t *testing.T, rm *redminetest.Server, key string) {
	t.Helper()
	redmineGatewayOn(t, bolt, rm, key)
}

// redmineGatewayOn is redmineGateway on backend b.
func redmineGatewayOn(t *testing.T, b backend, rm *redminetest.Server, key string) {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "redmine-api-key") // caddytest rewrites paths ending in .key
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	storage := b.storage
	b.storage = func(t *testing.T) string {
		return storage(t) + fmt.Sprintf("\n\t\thost redmine {\n\t\t\turl %s\n\t\t\tapi_key_file %s\n\t\t\tcache 0s\n\t\t}", rm.URL, keyFile)
	}
	startGateway(t, b, defaultSite)
}

// TestSharePageWithRedmine: the whole way on a real Redmine: a share of
// an issue created through the API is checked against Redmine (its
// project filled in, an unknown issue refused), and its page shows the
// issue's viewable fields and public comment, never the private note.
func TestSharePageWithRedmine(t *testing.T) {
	rm := redminetest.Start(t)
	rm.CreateProject(t, "acme", "ACME")
	bot := rm.CreateUser(t, "keygate", "acme")
	issue := rm.CreateIssue(t, "acme", "Printer jams", "It **jams** on page 2.", nil)
	rm.AddNote(t, issue, "We ordered a part.", false)
	rm.AddNote(t, issue, "The customer is difficult.", true)
	redmineGateway(t, rm, bot.APIKey)

	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	sh, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": strconv.Itoa(issue),
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{
			"summary":     map[string]any{"fieldPermissions": []string{"VIEW"}},
			"description": map[string]any{"fieldPermissions": []string{"VIEW", "VIEW_CONTENT"}},
			"comment":     map[string]any{"fieldPermissions": []string{"VIEW"}},
		}}})
	if sh.ProjectID == nil || *sh.ProjectID != "acme" {
		t.Errorf("the share's project: %v, want the issue's, acme", sh.ProjectID)
	}
	page := do(t, "GET", siteURL+"/s/"+sh.UUID, nil, "Accept", "text/html")
	body := string(page.body)
	for _, want := range []string{"Printer jams", "<strong>jams</strong>", "We ordered a part."} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if page.status != 200 || strings.Contains(body, "difficult") {
		t.Errorf("the page: %d, showing the private note: %v", page.status, strings.Contains(body, "difficult"))
	}
	r := do(t, "POST", siteURL+shrURL, map[string]any{"type": "ISSUE", "issueId": "999999"}, bearer(alice)...)
	if p := r.problem(t); r.status != 400 || len(p.Errors) != 1 || p.Errors[0].Code != "unknown_issue" {
		t.Errorf("a share of an unknown issue: %d %s", r.status, r.body)
	}

	// A comment from the page reaches Redmine as keygate's account, with
	// its source, and is announced as share.commented.
	hooks := newHookEndpoints(t)
	subscribe(t, hooks.URL+"/comments", []string{"share.commented", "share.edited"}, nil)
	talk, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": strconv.Itoa(issue),
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{"comment": map[string]any{"fieldPermissions": []string{"VIEW", "ADD"}}}}})
	form := strings.NewReader(url.Values{"body": {"Thanks, it works now."}}.Encode())
	req, _ := http.NewRequest("POST", siteURL+"/s/"+talk.UUID+"/comments", form)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", siteURL)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("comment: %d", resp.StatusCode)
	}
	var got struct {
		Issue struct {
			Journals []struct {
				User  struct{ Name string }
				Notes string
			}
		}
	}
	rm.JSON(t, rm.AdminKey, "GET", "/issues/"+strconv.Itoa(issue)+".json?include=journals", nil, 200, &got)
	j := got.Issue.Journals[len(got.Issue.Journals)-1]
	if want := "From an unnamed visitor via shared link " + talk.UUID[:4] + "…\n\nThanks, it works now."; j.Notes != want || j.User.Name != "keygate Test" {
		t.Errorf("on Redmine: %q by %q, want %q by keygate's account", j.Notes, j.User.Name, want)
	}
	hooks.waitFor(t, "/comments", "share.commented", func(e hookEvent) bool { return e.Type == "share.commented" })

	// A field changed from the page, as keygate's account.
	edit, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": strconv.Itoa(issue),
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{"summary": map[string]any{"fieldPermissions": []string{"VIEW", "EDIT"}}}}})
	changed := do(t, "POST", siteURL+"/s/"+edit.UUID+"/fields/summary", map[string]any{"value": "Printer jams on duplex"}, "Accept", "application/json")
	var now struct{ Issue struct{ Subject string } }
	rm.JSON(t, rm.AdminKey, "GET", "/issues/"+strconv.Itoa(issue)+".json", nil, 200, &now)
	if changed.status != 200 || now.Issue.Subject != "Printer jams on duplex" {
		t.Errorf("edit: %d %s; on Redmine %q", changed.status, changed.body, now.Issue.Subject)
	}
	hooks.waitFor(t, "/comments", "share.edited", func(e hookEvent) bool { return e.Type == "share.edited" })

	// A JQL share lists what its query matches, and opens only those.
	other := rm.CreateIssue(t, "acme", "Scanner is slow", "", nil)
	jql, _ := shrCreate(t, alice, map[string]any{"type": "JQL", "projectId": "acme", "jql": `text ~ "printer" ORDER BY created DESC`,
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{"summary": map[string]any{"fieldPermissions": []string{"VIEW"}}}}})
	list := do(t, "GET", siteURL+"/s/"+jql.UUID, nil, "Accept", "text/html")
	if !strings.Contains(string(list.body), "/issues/"+strconv.Itoa(issue)+`"`) || strings.Contains(string(list.body), "Scanner") {
		t.Errorf("the JQL list:\n%s", list.body)
	}
	if r := do(t, "GET", siteURL+"/s/"+jql.UUID+"/issues/"+strconv.Itoa(issue), nil, "Accept", "application/json"); r.status != 200 {
		t.Errorf("an issue of the list: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", siteURL+"/s/"+jql.UUID+"/issues/"+strconv.Itoa(other), nil, "Accept", "application/json"); r.status != 404 {
		t.Errorf("an issue outside the query: %d %s", r.status, r.body)
	}
	for _, bad := range []struct {
		body map[string]any
		code string
	}{
		{map[string]any{"type": "JQL", "projectId": "acme", "jql": "status = Open OR status = New"}, "invalid_jql"},
		{map[string]any{"type": "JQL", "projectId": "acme", "jql": "status = Nope"}, "invalid_jql"},
		{map[string]any{"type": "BOARD", "projectId": "acme", "board": map[string]any{"id": "999"}}, "unknown_board"},
	} {
		if r := do(t, "POST", siteURL+shrURL, bad.body, bearer(alice)...); r.status != 400 || !strings.Contains(string(r.body), bad.code) {
			t.Errorf("%v: %d %s", bad.body, r.status, r.body)
		}
	}

	// An attachment downloads from Redmine through the share.
	att := rm.UploadAttachment(t, issue, "report.txt", []byte("the printer's log"))
	files, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": strconv.Itoa(issue),
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{"attachment": map[string]any{"fieldPermissions": []string{"VIEW", "VIEW_CONTENT"}}}}})
	dl := do(t, "GET", siteURL+"/s/"+files.UUID+"/attachments/"+strconv.Itoa(att), nil)
	if dl.status != 200 || string(dl.body) != "the printer's log" || dl.header.Get("Content-Disposition") != "attachment; filename=report.txt" {
		t.Errorf("download: %d %s %q", dl.status, dl.header, dl.body)
	}
	if page := do(t, "GET", siteURL+"/s/"+talk.UUID, nil, "Accept", "text/html"); !strings.Contains(string(page.body), "Thanks, it works now.") {
		t.Errorf("the page does not show the new comment:\n%s", page.body)
	}
}

// TestContractFromRedmine: on a real Redmine, on both backends, a
// contract made from a wiki page or an issue copies its text with its
// version: an edit of the page afterwards makes the next contract from
// the new version and leaves the first as it was, on its signing page, in
// its sealed PDF, drawn from Markdown, and in its certificate, which
// names the page and version. A private issue, or a page that does not
// exist, is an unknown template.
func TestContractFromRedmine(t *testing.T) {
	rm := redminetest.Start(t)
	acme := rm.CreateProject(t, "acme", "ACME")
	bot := rm.CreateUser(t, "keygate", "acme")
	issue := rm.CreateIssue(t, "acme", "Service order", "Deliver *by Friday*.", nil)
	private := rm.CreateIssue(t, "acme", "Private terms", "Not for anyone.", map[string]any{"is_private": true})
	eachBackend(t, func(t *testing.T, b backend) {
		title := "NDA_" + b.name
		rm.CreateWikiPage(t, "acme", title, "# Mutual NDA\n\nBoth parties keep it **secret**:\n\n- for five years\n- worldwide")
		redmineGatewayOn(t, b, rm, bot.APIKey)
		key := ctrKey(t, "alice", "get", "create", "delete")
		signer := map[string]any{"fullName": "Ursula Url", "accessKind": "url", "signerSigningMethods": []string{"render"}}

		first := ctrCreate(t, key, ctrSimple("wiki:acme:"+title, "NDA one", signer))
		if want := "wiki page " + title + " of project acme, version 1"; first.CollectionID != "acme" || first.TemplateSource != want {
			t.Errorf("the first contract: %q %q, want acme and %q", first.CollectionID, first.TemplateSource, want)
		}
		rm.CreateWikiPage(t, "acme", title, "# Mutual NDA\n\nBoth parties keep it **secret** for ten years.")
		second := ctrCreate(t, key, ctrSimple("wiki:acme:"+title, "NDA two", signer))
		if !strings.HasSuffix(second.TemplateSource, "version 2") {
			t.Errorf("the second contract: %q, want version 2", second.TemplateSource)
		}

		// The first contract's signing page shows version 1, rendered.
		link := first.Signers[0].AccessURL
		var view struct {
			Contract struct {
				Document struct{ Title, Body, Markup, Source string }
			}
		}
		if r := do(t, "GET", link, nil, "Accept", "application/json"); r.status != 200 {
			t.Fatalf("the signing page %s: %d %s", link, r.status, r.body)
		} else {
			r.json(t, &view)
		}
		if d := view.Contract.Document; d.Title != "NDA "+b.name || !strings.Contains(d.Body, "five years") || d.Markup != "markdown" || d.Source != first.TemplateSource {
			t.Errorf("the signing page's document: %+v", d)
		}
		html := string(do(t, "GET", link, nil, "Accept", "text/html").body)
		for _, want := range []string{"<strong>secret</strong>", "<li>for five years</li>", "The text of " + first.TemplateSource} {
			if !strings.Contains(html, want) {
				t.Errorf("the signing page lacks %q", want)
			}
		}

		if r := do(t, "POST", link+"/decision", map[string]string{"decision": "signed", "method": "render", "signature": "Ursula Url"}); r.status != 200 {
			t.Fatalf("decision: %d %s", r.status, r.body)
		}
		var got struct {
			FinalizedPDF   struct{ ID string } `json:"finalizedPdf"`
			CertificatePDF struct{ ID string } `json:"certificatePdf"`
		}
		awaitSealed(t, siteURL+ctrURL+"/"+first.ID, bearer(key)...)
		do(t, "GET", siteURL+ctrURL+"/"+first.ID, nil, bearer(key)...).json(t, &got)
		attachment := func(id string) string {
			r := do(t, "GET", siteURL+ctrURL+"/"+first.ID+"/attachments/"+id, nil, bearer(key)...)
			if r.status != 200 {
				t.Fatalf("attachment %s: %d", id, r.status)
			}
			return strings.Join(strings.Fields(pdftest.Text(t, r.body)), " ")
		}
		finalized := attachment(got.FinalizedPDF.ID)
		for _, want := range []string{"Mutual NDA Both parties keep it secret:", "for five years", "Text of " + first.TemplateSource} {
			if !strings.Contains(finalized, want) {
				t.Errorf("the finalized PDF lacks %q:\n%s", want, finalized)
			}
		}
		if strings.Contains(finalized, "**") || strings.Contains(finalized, "# Mutual") || strings.Contains(finalized, "ten years") {
			t.Errorf("the finalized PDF shows markup or the later version:\n%s", finalized)
		}
		if cert := attachment(got.CertificatePDF.ID); !strings.Contains(cert, "Copied from "+first.TemplateSource) {
			t.Errorf("the certificate does not name the page and version:\n%s", cert)
		}

		// An issue: its subject and description, as of its last update.
		order := ctrCreate(t, key, ctrSimple("0"+strconv.Itoa(issue), "Order", signer))
		if !strings.HasPrefix(order.TemplateSource, "issue "+strconv.Itoa(issue)+" of project acme, updated ") || order.CollectionID != "acme" ||
			order.TemplateID != strconv.Itoa(issue) {
			t.Errorf("a contract from an issue: %q %q %q", order.TemplateID, order.TemplateSource, order.CollectionID)
		}
		// Another spelling of the wiki page is named as Redmine names it.
		spelt := ctrCreate(t, key, ctrSimple("wiki:"+strconv.Itoa(acme)+":"+strings.ToLower(title), "Spelt", signer))
		if spelt.TemplateID != "wiki:acme:"+title || spelt.CollectionID != "acme" {
			t.Errorf("a contract from wiki:%d:%s: %q %q", acme, strings.ToLower(title), spelt.TemplateID, spelt.CollectionID)
		}
		for _, id := range []string{strconv.Itoa(private), "wiki:acme:No_such_page", "wiki:nope:" + title, "999999"} {
			r := do(t, "POST", siteURL+ctrURL, ctrSimple(id, "Refused", signer), bearer(key)...)
			if p := r.problem(t); r.status != 400 || len(p.Errors) != 1 || p.Errors[0].Code != "unknown_template" || strings.Contains(string(r.body), "Not for anyone") {
				t.Errorf("a contract from %s: %d %s", id, r.status, r.body)
			}
		}
	})
}
