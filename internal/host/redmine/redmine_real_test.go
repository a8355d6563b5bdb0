package redmine

import (
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/testkit/redminetest"
)

func TestMain(m *testing.M) { os.Exit(redminetest.Main(m)) }

// TestAgainstRedmine: the connector on a real Redmine, with keygate's
// least-privilege account and with an administrator's (who sees private
// notes and private issues): what leaves keygate is the same, public
// comments only and no private issue; what the account may not see is
// not found; a wrong key is refused.
func TestAgainstRedmine(t *testing.T) {
	rm := redminetest.Shared(t)
	rm.CreateProject(t, "acme", "ACME")
	rm.CreateProject(t, "secret", "Secret")
	bot := rm.CreateUser(t, "keygate", "acme")
	cf := rm.CreateCustomField(t, "Cost centre")
	issue := rm.CreateIssue(t, "acme", "Printer jams", "It **jams** on page 2.",
		map[string]any{"custom_fields": []map[string]any{{"id": cf, "value": "CC-9"}}, "due_date": "2026-12-24"})
	rm.AddNote(t, issue, "We ordered a part.", false)
	rm.AddNote(t, issue, "The customer is difficult.", true)
	rm.UploadAttachment(t, issue, "photo.txt", []byte("not really a photo"))
	private := rm.CreateIssue(t, "acme", "Internal audit", "", map[string]any{"is_private": true})
	other := rm.CreateIssue(t, "secret", "Not shared", "", nil)

	for _, acct := range []struct {
		name, key string
		admin     bool
	}{
		{"keygate's account", bot.APIKey, false},
		{"an administrator's", rm.AdminKey, true},
	} {
		t.Run(acct.name, func(t *testing.T) {
			r, err := New(Config{URL: rm.URL, APIKey: acct.key})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			in, err := r.Issue(ctx, strconv.Itoa(issue))
			if err != nil {
				t.Fatal(err)
			}
			if in.Project.ID != "acme" || in.Project.Name != "ACME" {
				t.Errorf("project %+v", in.Project)
			}
			for id, want := range map[string]string{"summary": "Printer jams", "description": "It **jams** on page 2.",
				"status": "New", "duedate": "2026-12-24", "customfield_" + strconv.Itoa(cf): "CC-9"} {
				if f, ok := in.Field(id); !ok || f.Value != want {
					t.Errorf("field %s = %+v, want %q", id, f, want)
				}
			}
			if len(in.Comments) != 1 || in.Comments[0].Body != "We ordered a part." {
				t.Errorf("comments %+v, want the public note only", in.Comments)
			}
			if len(in.Attachments) != 1 || in.Attachments[0].Name != "photo.txt" || in.Attachments[0].Size != 18 {
				t.Errorf("attachments %+v", in.Attachments)
			}
			body, err := r.Download(ctx, in.Attachments[0].ID)
			if err != nil {
				t.Fatalf("download: %v", err)
			}
			content, _ := io.ReadAll(body)
			body.Close()
			if string(content) != "not really a photo" {
				t.Errorf("downloaded %q", content)
			}
			if _, err := r.Download(ctx, "999999"); !errors.Is(err, host.ErrNotFound) {
				t.Errorf("an unknown attachment: %v", err)
			}
			if _, err := r.Issue(ctx, strconv.Itoa(private)); !errors.Is(err, host.ErrNotFound) {
				t.Errorf("a private issue: %v, want not found", err)
			}
			_, err = r.Issue(ctx, strconv.Itoa(other))
			if acct.admin != (err == nil) {
				t.Errorf("an issue of a project the account is not a member of: %v", err)
			}
			if p, err := r.Project(ctx, in.Project.Number); err != nil || p.ID != "acme" {
				t.Errorf("project by number: %+v %v", p, err)
			}
			if _, err := r.Project(ctx, "nope"); !errors.Is(err, host.ErrNotFound) {
				t.Errorf("an unknown project: %v", err)
			}
			a, err := r.Account(ctx)
			if err != nil || a.Admin != acct.admin || len(a.Projects) == 0 {
				t.Fatalf("account %+v %v", a, err)
			}
			if !acct.admin && (a.Login != "keygate" || len(a.Projects) != 1 || a.Projects[0].ID != "acme") {
				t.Errorf("keygate's account %+v", a)
			}
		})
	}

	t.Run("writes as keygate's account", func(t *testing.T) {
		r, err := New(Config{URL: rm.URL, APIKey: bot.APIKey})
		if err != nil {
			t.Fatal(err)
		}
		ctx, id := context.Background(), strconv.Itoa(issue)
		for field, value := range map[string]string{"summary": "Printer jams on duplex", "duedate": "2027-01-15",
			"customfield_" + strconv.Itoa(cf): "CC-12"} {
			if err := r.UpdateField(ctx, id, field, value); err != nil {
				t.Fatalf("%s: %v", field, err)
			}
		}
		if err := r.AddComment(ctx, id, "From the page."); err != nil {
			t.Fatal(err)
		}
		if err := r.AddAttachment(ctx, id, "notes.txt", "text/plain", strings.NewReader("uploaded"), 8); err != nil {
			t.Fatal(err)
		}
		in, err := r.Issue(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for field, want := range map[string]string{"summary": "Printer jams on duplex", "duedate": "2027-01-15", "customfield_" + strconv.Itoa(cf): "CC-12"} {
			if f, _ := in.Field(field); f.Value != want {
				t.Errorf("%s = %q, want %q", field, f.Value, want)
			}
		}
		if last := in.Comments[len(in.Comments)-1]; last.Body != "From the page." || last.Author != "keygate Test" {
			t.Errorf("the comment %+v", last)
		}
		att := in.Attachments[len(in.Attachments)-1]
		body, err := r.Download(ctx, att.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(body)
		body.Close()
		if att.Name != "notes.txt" || att.ContentType != "text/plain" || string(got) != "uploaded" {
			t.Errorf("the attachment %+v: %q", att, got)
		}
		if err := r.UpdateField(ctx, id, "duedate", "1999-01-01"); !errors.Is(err, host.ErrRejected) {
			t.Errorf("a due date before the start: %v, want rejected with Redmine's reason", err)
		}
	})

	t.Run("queries", func(t *testing.T) {
		r, err := New(Config{URL: rm.URL, APIKey: bot.APIKey})
		if err != nil {
			t.Fatal(err)
		}
		second := rm.CreateIssue(t, "acme", "Scanner is slow", "Takes a minute a page.", map[string]any{"due_date": "2027-02-01"})
		ctx := context.Background()
		for _, tt := range []struct {
			jql  string
			want []int // in order
		}{
			{`text ~ "printer"`, []int{issue}},
			{`text ~ "minute"`, nil}, // only in a description: Redmine filters the subject
			{`status = New ORDER BY created DESC`, []int{second, issue}},
			{`status = New ORDER BY created ASC`, []int{issue, second}},
			{`duedate >= 2027-01-20`, []int{second}},
			{`duedate <= 2027-01-20 AND duedate >= 2027-01-01`, []int{issue}},
			{`statusCategory = Done`, nil},
			{`assignee is EMPTY AND issuetype in (Bug, Feature, Support)`, []int{issue, second}},
		} {
			q, err := host.ParseJQL(tt.jql)
			if err != nil {
				t.Fatal(err)
			}
			list, err := r.Search(ctx, "acme", q, "", 0, 50)
			if err != nil {
				t.Fatalf("%s: %v", tt.jql, err)
			}
			var got []int
			for _, in := range list.Issues {
				n, _ := strconv.Atoi(in.ID)
				got = append(got, n)
			}
			if tt.jql == `assignee is EMPTY AND issuetype in (Bug, Feature, Support)` {
				slices.Sort(got)
			}
			if !slices.Equal(got, tt.want) || list.Total != len(tt.want) {
				t.Errorf("%s: %v (total %d), want %v", tt.jql, got, list.Total, tt.want)
			}
		}
		// A subproject's issue is not the project's, though Redmine's
		// project filter takes it in.
		var acme struct{ Project struct{ ID int } }
		rm.JSON(t, rm.AdminKey, "GET", "/projects/acme.json", nil, 200, &acme)
		rm.JSON(t, rm.AdminKey, "POST", "/projects.json", map[string]any{"project": map[string]any{
			"identifier": "acme-sub", "name": "ACME sub", "is_public": false, "parent_id": acme.Project.ID, "inherit_members": true}}, 201, nil)
		sub := rm.CreateIssue(t, "acme-sub", "Printer in the subproject", "", nil)
		pq, _ := host.ParseJQL(`text ~ "printer"`)
		if l, err := r.Search(ctx, "acme", pq, "", 0, 50); err != nil || slices.ContainsFunc(l.Issues, func(in host.Issue) bool { return in.ID == strconv.Itoa(sub) }) {
			t.Errorf("a subproject's issue in the project's list: %+v %v", l, err)
		}
		q, _ := host.ParseJQL(`text ~ "printer"`)
		if l, err := r.Search(ctx, "acme", q, strconv.Itoa(second), 0, 50); err != nil || l.Total != 0 {
			t.Errorf("an issue outside the query: %+v %v", l, err)
		}
		if l, err := r.Search(ctx, "acme", q, strconv.Itoa(issue), 0, 50); err != nil || l.Total != 1 {
			t.Errorf("an issue of the query: %+v %v", l, err)
		}
		saved := rm.CreateSavedQuery(t, "acme", "Scanner issues", url.Values{"f[]": {"subject"}, "op[subject]": {"~"}, "v[subject][]": {"scanner"}})
		if l, err := r.Search(ctx, "acme", &host.Query{SavedQuery: strconv.Itoa(saved)}, "", 0, 50); err != nil || l.Total != 1 || l.Issues[0].ID != strconv.Itoa(second) {
			t.Errorf("a saved query: %+v %v", l, err)
		}
		if _, err := r.Search(ctx, "acme", &host.Query{SavedQuery: "99999"}, "", 0, 50); !errors.Is(err, host.ErrNotFound) {
			t.Errorf("an unknown saved query: %v", err)
		}
		q, _ = host.ParseJQL(`status = Nonexistent`)
		if _, err := r.Search(ctx, "acme", q, "", 0, 50); !errors.Is(err, host.ErrRejected) {
			t.Errorf("an unknown status: %v", err)
		}
		q, _ = host.ParseJQL(`status = New`)
		if l, err := r.Search(ctx, "acme", q, "", 0, 50); err != nil || slices.ContainsFunc(l.Issues, func(in host.Issue) bool { return in.ID == strconv.Itoa(private) }) {
			t.Errorf("a private issue in a list: %+v %v", l, err)
		}
	})

	t.Run("pages for templates", func(t *testing.T) {
		r, err := New(Config{URL: rm.URL, APIKey: bot.APIKey})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		rm.CreateWikiPage(t, "acme", "Mutual_NDA", "# Mutual NDA\n\nBoth parties keep it **secret**.")
		p, err := r.Page(ctx, "wiki:acme:Mutual_NDA")
		if err != nil || p.Title != "Mutual NDA" || p.Body != "# Mutual NDA\n\nBoth parties keep it **secret**." || p.Project != "acme" ||
			p.Version != "1" || p.Source != "wiki page Mutual_NDA of project acme, version 1" || p.Markup != "markdown" {
			t.Errorf("the wiki page: %+v %v", p, err)
		}
		p, err = r.Page(ctx, strconv.Itoa(issue))
		if err != nil || p.Title != "Printer jams on duplex" || p.Project != "acme" || !strings.HasPrefix(p.Source, "issue "+strconv.Itoa(issue)+" of project acme, updated ") {
			t.Errorf("an issue as a page: %+v %v", p, err)
		}
		for _, ref := range []string{strconv.Itoa(private), "wiki:acme:Nope", "wiki:secret:Anything", "wiki:acme", "wiki:../x:y", "wiki:acme:a/b"} {
			if _, err := r.Page(ctx, ref); !errors.Is(err, host.ErrNotFound) {
				t.Errorf("Page(%q): %v, want not found", ref, err)
			}
		}
	})

	t.Run("a wrong key", func(t *testing.T) {
		r, err := New(Config{URL: rm.URL, APIKey: "0000000000000000000000000000000000000000"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Issue(context.Background(), strconv.Itoa(issue)); !errors.Is(err, ErrRefused) {
			t.Errorf("%v, want refused", err)
		}
	})
}
