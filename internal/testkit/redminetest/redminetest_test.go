package redminetest

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

type journal struct {
	ID           int
	Notes        string
	PrivateNotes bool `json:"private_notes"`
	Details      []struct {
		Property string
		Name     string
		NewValue string `json:"new_value"`
	}
}

type issue struct {
	ID          int
	Subject     string
	Description string
	Journals    []journal
	Attachments []struct {
		ID         int
		Filename   string
		Filesize   int
		ContentURL string `json:"content_url"`
	}
}

func (s *Server) issue(t *testing.T, key string, id int) issue {
	t.Helper()
	var out struct{ Issue issue }
	s.JSON(t, key, http.MethodGet, "/issues/"+strconv.Itoa(id)+".json?include=journals,attachments", nil, http.StatusOK, &out)
	return out.Issue
}

func notes(js []journal) map[string]journal {
	m := map[string]journal{}
	for _, j := range js {
		if j.Notes != "" {
			m[j.Notes] = j
		}
	}
	return m
}

// TestConnectorView documents what a least-privilege account (the
// connector's: ConnectorPermissions, no view_private_notes) sees of an
// issue through the REST API: its private notes not at all, not even
// marked private; its public notes, and its attachments with their bytes.
func TestConnectorView(t *testing.T) {
	s := Shared(t)
	s.CreateProject(t, "kg-view", "Connector view")
	s.CreateProject(t, "kg-other", "Not the connector's")
	conn := s.CreateUser(t, "kg-connector", "kg-view")

	id := s.CreateIssue(t, "kg-view", "Printer jams", "It jams on page 2.", nil)
	public := s.AddNote(t, id, "Public: replaced the roller.", false)
	private := s.AddNote(t, id, "Private: the customer is difficult.", true)
	content := []byte("jam log\nline 2\n")
	att := s.UploadAttachment(t, id, "jam log.txt", content)

	// The administrator sees both notes, the private one marked.
	admin := s.issue(t, s.AdminKey, id)
	if n := notes(admin.Journals); !n["Private: the customer is difficult."].PrivateNotes || n["Public: replaced the roller."].PrivateNotes {
		t.Fatalf("administrator's journals: %+v", admin.Journals)
	}

	got := s.issue(t, conn.APIKey, id)
	if got.Subject != "Printer jams" || got.Description != "It jams on page 2." {
		t.Fatalf("issue as the connector: %+v", got)
	}
	ids := map[int]bool{}
	for _, j := range got.Journals {
		ids[j.ID] = true
		if j.PrivateNotes || strings.Contains(j.Notes, "Private") {
			t.Errorf("the connector sees private journal %+v", j)
		}
	}
	if !ids[public] || ids[private] {
		t.Errorf("the connector's journals %v: want %d (public) and not %d (private)", ids, public, private)
	}
	// The upload is a journal of its own: no notes, one detail naming
	// the attachment.
	var uploaded bool
	for _, j := range got.Journals {
		for _, d := range j.Details {
			if j.Notes == "" && d.Property == "attachment" && d.Name == strconv.Itoa(att) && d.NewValue == "jam log.txt" {
				uploaded = true
			}
		}
	}
	if !uploaded {
		t.Errorf("no journal records the attachment %d: %+v", att, got.Journals)
	}

	if len(got.Attachments) != 1 || got.Attachments[0].ID != att || got.Attachments[0].Filename != "jam log.txt" ||
		got.Attachments[0].Filesize != len(content) {
		t.Fatalf("attachments as the connector: %+v", got.Attachments)
	}
	// content_url is absolute, on the host the request named.
	link := got.Attachments[0].ContentURL
	if !strings.HasPrefix(link, s.URL+"/attachments/download/"+strconv.Itoa(att)+"/") {
		t.Errorf("content_url %q", link)
	}
	req, _ := http.NewRequest(http.MethodGet, link, nil)
	req.Header.Set("X-Redmine-API-Key", conn.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, content) {
		t.Errorf("download as the connector: %d %q", resp.StatusCode, body)
	}

	// The connector may add notes; asking for a private one without
	// set_notes_private is not refused: the note is stored public.
	s.JSON(t, conn.APIKey, http.MethodPut, "/issues/"+strconv.Itoa(id)+".json", map[string]any{"issue": map[string]any{
		"notes": "From the connector", "private_notes": true,
	}}, http.StatusNoContent, nil)
	if j, ok := notes(s.issue(t, s.AdminKey, id).Journals)["From the connector"]; !ok || j.PrivateNotes {
		t.Errorf("the connector's note asked private: %+v (present %v)", j, ok)
	}

	// A project it is no member of is hidden: 403 for its issues.
	other := s.CreateIssue(t, "kg-other", "Elsewhere", "", nil)
	if status, _, _ := s.Do(conn.APIKey, http.MethodGet, "/issues/"+strconv.Itoa(other)+".json", nil); status != http.StatusForbidden {
		t.Errorf("another project's issue as the connector: %d, want 403", status)
	}
	// Without a key, the private project is not shown either.
	if status, _, _ := s.Do("", http.MethodGet, "/issues/"+strconv.Itoa(id)+".json", nil); status != http.StatusUnauthorized {
		t.Errorf("the issue without a key: %d, want 401", status)
	}
}

// TestSeeding checks the other seeding helpers through what a client
// reads back: a wiki page, a custom field's value, a saved query's issues;
// on a server of the test's own, gone when the test ends.
func TestSeeding(t *testing.T) {
	var s *Server
	t.Run("own server", func(t *testing.T) {
		s = Start(t)
		seed(t, s)
	})
	select {
	case <-s.done:
	case <-time.After(time.Second):
		t.Error("the server still runs after its test")
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("its directory is still there: %v", err)
	}
}

func seed(t *testing.T, s *Server) {
	s.CreateProject(t, "kg-seed", "Seeding")
	conn := s.CreateUser(t, "kg-seeder", "kg-seed")

	s.CreateWikiPage(t, "kg-seed", "Runbook Printers", "h1. Runbook\n\nTurn it off and on.")
	var page struct {
		WikiPage struct {
			Title   string
			Text    string
			Version int
		} `json:"wiki_page"`
	}
	s.JSON(t, conn.APIKey, http.MethodGet, "/projects/kg-seed/wiki/Runbook_Printers.json", nil, http.StatusOK, &page)
	if page.WikiPage.Title != "Runbook_Printers" || !strings.Contains(page.WikiPage.Text, "Turn it off") || page.WikiPage.Version != 1 {
		t.Errorf("wiki page as the connector: %+v", page.WikiPage)
	}

	field := s.CreateCustomField(t, "Customer")
	id := s.CreateIssue(t, "kg-seed", "With a customer", "", map[string]any{
		"custom_fields": []map[string]any{{"id": field, "value": "ACME"}},
	})
	closed := s.CreateIssue(t, "kg-seed", "Closed one", "", map[string]any{"status_id": closedStatus(t, s)})
	var got struct {
		Issue struct {
			CustomFields []struct {
				ID    int
				Name  string
				Value any
			} `json:"custom_fields"`
		}
	}
	s.JSON(t, conn.APIKey, http.MethodGet, "/issues/"+strconv.Itoa(id)+".json", nil, http.StatusOK, &got)
	if cf := got.Issue.CustomFields; len(cf) != 1 || cf[0].ID != field || cf[0].Name != "Customer" || cf[0].Value != "ACME" {
		t.Errorf("custom fields as the connector: %+v", cf)
	}

	query := s.CreateSavedQuery(t, "kg-seed", "ACME open", url.Values{
		"f[]":                                 {"status_id", "cf_" + strconv.Itoa(field)},
		"op[status_id]":                       {"o"},
		"op[cf_" + strconv.Itoa(field) + "]":  {"="},
		"v[cf_" + strconv.Itoa(field) + "][]": {"ACME"},
	})
	var list struct {
		Issues     []struct{ ID int }
		TotalCount int `json:"total_count"`
	}
	s.JSON(t, conn.APIKey, http.MethodGet, "/issues.json?project_id=kg-seed&query_id="+strconv.Itoa(query), nil, http.StatusOK, &list)
	if list.TotalCount != 1 || len(list.Issues) != 1 || list.Issues[0].ID != id {
		t.Errorf("query %d as the connector: %+v (closed issue %d)", query, list, closed)
	}
	var queries struct {
		Queries []struct {
			ID        int
			Name      string
			IsPublic  bool `json:"is_public"`
			ProjectID int  `json:"project_id"`
		}
	}
	s.JSON(t, conn.APIKey, http.MethodGet, "/queries.json", nil, http.StatusOK, &queries)
	found := false
	for _, q := range queries.Queries {
		found = found || (q.ID == query && q.Name == "ACME open" && q.IsPublic)
	}
	if !found {
		t.Errorf("query %d not listed for the connector: %+v", query, queries.Queries)
	}
}

func closedStatus(t *testing.T, s *Server) int {
	t.Helper()
	var out struct {
		IssueStatuses []struct {
			ID       int
			IsClosed bool `json:"is_closed"`
		} `json:"issue_statuses"`
	}
	s.JSON(t, s.AdminKey, http.MethodGet, "/issue_statuses.json", nil, http.StatusOK, &out)
	for _, st := range out.IssueStatuses {
		if st.IsClosed {
			return st.ID
		}
	}
	t.Fatal("no closed status")
	return 0
}
