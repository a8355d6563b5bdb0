// Package redmine connects keygate to a Redmine issue tracker through
// its REST API, with an account of keygate's own (an API key). It knows
// nothing of Caddy; caddymodule wires it in as the webapi.hosts.redmine
// module.
package redmine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/host"
)

// Config is how to reach one Redmine.
type Config struct {
	// URL is Redmine's base address (http://redmine.internal:3000).
	URL string
	// APIKey is the key of keygate's account; it goes only into the
	// X-Redmine-API-Key header of calls to URL.
	APIKey string
	// Timeout bounds one call. Default 5 s.
	Timeout time.Duration
	// Markup is the text formatting Redmine is set to: "common_mark"
	// (the default) or "textile"; anything else is plain text.
	Markup string
	// Client makes the calls; nil: one of its own.
	Client *http.Client
	// Observe, when set, hears of every call: its outcome (ok, not_found,
	// refused, unavailable) and how long it took.
	Observe func(outcome string, d time.Duration)
}

// Outcomes of a call, as Observe hears them.
const (
	OutcomeOK          = "ok"
	OutcomeNotFound    = "not_found"
	OutcomeRefused     = "refused"
	OutcomeUnavailable = "unavailable"
)

// ErrRefused is the account's API key refused by Redmine (401): an
// operator's problem, which pages show as the tracker being unavailable.
var ErrRefused = errors.New("redmine refused keygate's API key")

// Redmine is a host.Host on one Redmine.
type Redmine struct {
	base   *url.URL
	cfg    Config
	client *http.Client
}

// New checks cfg and returns the connector.
func New(cfg Config) (*Redmine, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return nil, fmt.Errorf("redmine: url must be an http or https address without user or query, not %q", cfg.URL)
	}
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, errors.New("redmine: the API key is empty")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Markup == "" {
		cfg.Markup = "common_mark"
	}
	c := cfg.Client
	if c == nil {
		c = &http.Client{
			// Redirects would carry the key elsewhere: none are followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Redmine{base: u, cfg: cfg, client: c}, nil
}

// Platform implements host.Host.
func (*Redmine) Platform() string { return "redmine" }

// maxResponse bounds what one answer of Redmine may hold.
const maxResponse = 8 << 20

// get reads path (with query) as JSON into out.
func (r *Redmine) get(ctx context.Context, path string, query url.Values, out any) error {
	return r.call(ctx, http.MethodGet, path, query, nil, out)
}

// call sends in (JSON, when not nil) to path with method and reads the
// answer as JSON into out (when not nil).
func (r *Redmine) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	u := *r.base
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return err
	}
	req.Header.Set("X-Redmine-API-Key", r.cfg.APIKey)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	outcome := OutcomeUnavailable
	defer func() {
		if r.cfg.Observe != nil {
			r.cfg.Observe(outcome, time.Since(start))
		}
	}()
	resp, err := r.client.Do(req)
	if err != nil {
		// The error names the address, never the key (it is a header).
		return fmt.Errorf("%w: %w", host.ErrUnavailable, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated:
	case resp.StatusCode == http.StatusNoContent:
		outcome = OutcomeOK
		return nil
	case resp.StatusCode == http.StatusUnprocessableEntity:
		// Redmine refused what was written ({"errors": [...]}): a fault
		// of the request, not of Redmine.
		outcome = OutcomeOK
		var e struct {
			Errors []string `json:"errors"`
		}
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&e)
		return fmt.Errorf("%w: %s", host.ErrRejected, strings.Join(e.Errors, "; "))
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusForbidden:
		outcome = OutcomeNotFound
		return host.ErrNotFound
	case resp.StatusCode == http.StatusUnauthorized:
		outcome = OutcomeRefused
		return ErrRefused
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// Redmine sends a renamed wiki page's old title to its new one;
		// keygate follows no redirect (it would carry the key along), so
		// the item is not where it was asked for: not found, not a
		// tracker that is down (retrying would never help).
		outcome = OutcomeNotFound
		return fmt.Errorf("%w: %s answered %d, a redirect to %q (renamed or moved; or the url needs https)",
			host.ErrNotFound, r.base.Host, resp.StatusCode, resp.Header.Get("Location"))
	default:
		return fmt.Errorf("%w: %s answered %d", host.ErrUnavailable, r.base.Host, resp.StatusCode)
	}
	if out == nil {
		outcome = OutcomeOK
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponse)).Decode(out); err != nil {
		return fmt.Errorf("%w: reading %s: %w", host.ErrUnavailable, path, err)
	}
	outcome = OutcomeOK
	return nil
}

// named is a Redmine reference: {"id": 3, "name": "Bug"}.
type named struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

func (n *named) text() string {
	if n == nil {
		return ""
	}
	return n.Name
}

// Account implements host.Host.
func (r *Redmine) Account(ctx context.Context) (*host.Account, error) {
	var u struct {
		User struct {
			Login     string `json:"login"`
			Firstname string `json:"firstname"`
			Lastname  string `json:"lastname"`
			Admin     bool   `json:"admin"`
		} `json:"user"`
	}
	if err := r.get(ctx, "/users/current.json", nil, &u); err != nil {
		return nil, err
	}
	a := &host.Account{Login: u.User.Login, Name: strings.TrimSpace(u.User.Firstname + " " + u.User.Lastname), Admin: u.User.Admin}
	// The projects it can see, a page at a time (Redmine caps a page at 100).
	for offset := 0; ; offset += 100 {
		var page struct {
			Projects   []redmineProject `json:"projects"`
			TotalCount int              `json:"total_count"`
		}
		if err := r.get(ctx, "/projects.json", url.Values{"limit": {"100"}, "offset": {strconv.Itoa(offset)}}, &page); err != nil {
			return nil, err
		}
		for _, p := range page.Projects {
			a.Projects = append(a.Projects, p.project())
		}
		if len(page.Projects) == 0 || offset+len(page.Projects) >= page.TotalCount || offset >= 10_000 {
			return a, nil
		}
	}
}

type redmineProject struct {
	ID         int    `json:"id"`
	Identifier string `json:"identifier"`
	Name       string `json:"name"`
}

func (p redmineProject) project() host.Project {
	return host.Project{ID: p.Identifier, Number: strconv.Itoa(p.ID), Name: p.Name}
}

// Project implements host.Host.
func (r *Redmine) Project(ctx context.Context, id string) (*host.Project, error) {
	if !validRef(id) {
		return nil, host.ErrNotFound
	}
	var p struct {
		Project redmineProject `json:"project"`
	}
	if err := r.get(ctx, "/projects/"+url.PathEscape(id)+".json", nil, &p); err != nil {
		return nil, err
	}
	out := p.Project.project()
	return &out, nil
}

// redmineIssue is an issue as Redmine's REST API answers it.
type redmineIssue struct {
	ID           int     `json:"id"`
	Project      named   `json:"project"`
	Tracker      *named  `json:"tracker"`
	Status       *named  `json:"status"`
	Priority     *named  `json:"priority"`
	Author       *named  `json:"author"`
	AssignedTo   *named  `json:"assigned_to"`
	Category     *named  `json:"category"`
	FixedVersion *named  `json:"fixed_version"`
	Subject      string  `json:"subject"`
	Description  *string `json:"description"`
	StartDate    *string `json:"start_date"`
	DueDate      *string `json:"due_date"`
	CreatedOn    string  `json:"created_on"`
	UpdatedOn    string  `json:"updated_on"`
	IsPrivate    bool    `json:"is_private"`
	CustomFields []struct {
		ID       int             `json:"id"`
		Name     string          `json:"name"`
		Value    json.RawMessage `json:"value"`
		Multiple bool            `json:"multiple"`
	} `json:"custom_fields"`
	Journals []struct {
		ID           int    `json:"id"`
		User         named  `json:"user"`
		Notes        string `json:"notes"`
		CreatedOn    string `json:"created_on"`
		PrivateNotes bool   `json:"private_notes"`
	} `json:"journals"`
	Attachments []struct {
		ID          int    `json:"id"`
		Filename    string `json:"filename"`
		Filesize    int64  `json:"filesize"`
		ContentType string `json:"content_type"`
		CreatedOn   string `json:"created_on"`
	} `json:"attachments"`
}

// Issue implements host.Host.
func (r *Redmine) Issue(ctx context.Context, id string) (*host.Issue, error) {
	if _, err := strconv.ParseUint(id, 10, 31); err != nil {
		return nil, host.ErrNotFound // Redmine's issues are numbers
	}
	// One timeout for all the calls an issue takes.
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	var body struct {
		Issue redmineIssue `json:"issue"`
	}
	if err := r.get(ctx, "/issues/"+id+".json", url.Values{"include": {"journals,attachments"}}, &body); err != nil {
		return nil, err
	}
	in := &body.Issue
	// A private issue never leaves keygate, whatever the account sees.
	if in.IsPrivate {
		return nil, host.ErrNotFound
	}
	// The issue names its project by number and name; shares name it by
	// identifier too.
	project, err := r.Project(ctx, strconv.Itoa(in.Project.ID))
	if err != nil {
		return nil, err
	}
	out := r.issue(in, *project)
	return &out, nil
}

// issue is in as the APIs see it: fields by Jira's ids, public comments
// only, attachments.
func (r *Redmine) issue(in *redmineIssue, project host.Project) host.Issue {
	out := host.Issue{ID: strconv.Itoa(in.ID), Project: project, Markup: markup(r.cfg.Markup)}
	add := func(id, name, value string) {
		out.Fields = append(out.Fields, host.Field{ID: id, Name: name, Value: value})
	}
	add("summary", "Subject", in.Subject)
	add("description", "Description", deref(in.Description))
	add("status", "Status", in.Status.text())
	add("priority", "Priority", in.Priority.text())
	add("issuetype", "Tracker", in.Tracker.text())
	add("assignee", "Assignee", in.AssignedTo.text())
	add("reporter", "Author", in.Author.text())
	add("created", "Created", in.CreatedOn)
	add("updated", "Updated", in.UpdatedOn)
	add("startdate", "Start date", deref(in.StartDate))
	add("duedate", "Due date", deref(in.DueDate))
	add("components", "Category", in.Category.text())
	add("fixVersions", "Target version", in.FixedVersion.text())
	for _, cf := range in.CustomFields {
		add("customfield_"+strconv.Itoa(cf.ID), cf.Name, customValue(cf.Value))
	}
	for _, j := range in.Journals {
		// A private note never leaves keygate; a journal of field
		// changes alone is not a comment.
		if j.PrivateNotes || strings.TrimSpace(j.Notes) == "" {
			continue
		}
		out.Comments = append(out.Comments, host.Comment{ID: strconv.Itoa(j.ID), Author: j.User.Name,
			Created: parseTime(j.CreatedOn), Body: j.Notes})
	}
	for _, a := range in.Attachments {
		out.Attachments = append(out.Attachments, host.Attachment{ID: strconv.Itoa(a.ID), Name: a.Filename,
			Size: a.Filesize, ContentType: a.ContentType, Created: parseTime(a.CreatedOn)})
	}
	return out
}

// AddComment implements host.Host: a note on the issue, public, as
// keygate's account.
func (r *Redmine) AddComment(ctx context.Context, issueID, body string) error {
	if _, err := strconv.ParseUint(issueID, 10, 31); err != nil {
		return host.ErrNotFound
	}
	return r.call(ctx, http.MethodPut, "/issues/"+issueID+".json", nil,
		map[string]any{"issue": map[string]any{"notes": body, "private_notes": false}}, nil)
}

// UpdateField implements host.Host.
func (r *Redmine) UpdateField(ctx context.Context, issueID, fieldID, value string) error {
	if _, err := strconv.ParseUint(issueID, 10, 31); err != nil {
		return host.ErrNotFound
	}
	var change map[string]any
	switch fieldID {
	case "summary":
		change = map[string]any{"subject": value}
	case "description":
		change = map[string]any{"description": value}
	case "duedate":
		change = map[string]any{"due_date": value}
	case "startdate":
		change = map[string]any{"start_date": value}
	default:
		n, ok := strings.CutPrefix(fieldID, "customfield_")
		id, err := strconv.ParseUint(n, 10, 31)
		if !ok || err != nil {
			return fmt.Errorf("%w: %s cannot be changed", host.ErrRejected, fieldID)
		}
		change = map[string]any{"custom_fields": []map[string]any{{"id": id, "value": value}}}
	}
	return r.call(ctx, http.MethodPut, "/issues/"+issueID+".json", nil, map[string]any{"issue": change}, nil)
}

// AddAttachment implements host.Host: Redmine's two steps, the upload
// (its token) and the issue's update that attaches it.
func (r *Redmine) AddAttachment(ctx context.Context, issueID, name, contentType string, content io.Reader, size int64) error {
	if _, err := strconv.ParseUint(issueID, 10, 31); err != nil {
		return host.ErrNotFound
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	u := *r.base
	u.Path += "/uploads.json"
	u.RawQuery = url.Values{"filename": {name}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), content)
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.Header.Set("X-Redmine-API-Key", r.cfg.APIKey)
	req.Header.Set("Content-Type", "application/octet-stream") // the only type Redmine takes
	req.Header.Set("Accept", "application/json")
	start := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		r.observe(OutcomeUnavailable, start)
		return fmt.Errorf("%w: %w", host.ErrUnavailable, err)
	}
	var up struct {
		Upload struct {
			Token string `json:"token"`
		} `json:"upload"`
	}
	derr := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&up)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		r.observe(OutcomeRefused, start)
		return ErrRefused
	case resp.StatusCode == http.StatusUnprocessableEntity:
		r.observe(OutcomeOK, start)
		return fmt.Errorf("%w: the file is larger than Redmine takes", host.ErrRejected)
	case resp.StatusCode != http.StatusCreated || derr != nil || up.Upload.Token == "":
		r.observe(OutcomeUnavailable, start)
		return fmt.Errorf("%w: %s answered %d to an upload", host.ErrUnavailable, r.base.Host, resp.StatusCode)
	}
	r.observe(OutcomeOK, start)
	return r.call(ctx, http.MethodPut, "/issues/"+issueID+".json", nil, map[string]any{"issue": map[string]any{
		"uploads": []map[string]any{{"token": up.Upload.Token, "filename": name, "content_type": contentType}},
	}}, nil)
}

// observe tells Observe of a call that began at start.
func (r *Redmine) observe(outcome string, start time.Time) {
	if r.cfg.Observe != nil {
		r.cfg.Observe(outcome, time.Since(start))
	}
}

// Page implements host.Host: an issue's subject and description, or a
// wiki page's title and text.
func (r *Redmine) Page(ctx context.Context, ref string) (*host.Page, error) {
	if rest, ok := strings.CutPrefix(ref, "wiki:"); ok {
		project, title, ok := strings.Cut(rest, ":")
		if !ok || !validRef(project) || title == "" || strings.ContainsAny(title, "/?#\\") {
			return nil, host.ErrNotFound
		}
		if _, err := strconv.ParseUint(project, 10, 31); err == nil {
			// A project by its number: the page is named by its
			// identifier, as shares name projects.
			p, err := r.Project(ctx, project)
			if err != nil {
				return nil, err
			}
			project = p.ID
		}
		var w struct {
			WikiPage struct {
				Title   string `json:"title"`
				Text    string `json:"text"`
				Version int    `json:"version"`
			} `json:"wiki_page"`
		}
		if err := r.get(ctx, "/projects/"+url.PathEscape(project)+"/wiki/"+url.PathEscape(title)+".json", nil, &w); err != nil {
			return nil, err
		}
		v := strconv.Itoa(w.WikiPage.Version)
		return &host.Page{Ref: "wiki:" + project + ":" + w.WikiPage.Title,
			Title: strings.ReplaceAll(w.WikiPage.Title, "_", " "), Body: w.WikiPage.Text, Markup: markup(r.cfg.Markup),
			Project: project, Version: v, Source: "wiki page " + w.WikiPage.Title + " of project " + project + ", version " + v}, nil
	}
	in, err := r.Issue(ctx, ref)
	if err != nil {
		return nil, err
	}
	summary, _ := in.Field("summary")
	description, _ := in.Field("description")
	updated, _ := in.Field("updated")
	return &host.Page{Ref: in.ID, Title: summary.Value, Body: description.Value, Markup: in.Markup, Project: in.Project.ID,
		Version: updated.Value, Source: "issue " + in.ID + " of project " + in.Project.ID + ", updated " + updated.Value}, nil
}

// maxDownload bounds what one download streams: Redmine's own default
// limit of an attachment's size is 5 MB, and operators raise it.
const maxDownload = 100 << 20

// Download implements host.Host: the attachment's content as Redmine
// serves it to keygate's account. The timeout bounds the wait for the
// answer to begin, not the transfer.
func (r *Redmine) Download(ctx context.Context, id string) (io.ReadCloser, error) {
	if _, err := strconv.ParseUint(id, 10, 31); err != nil {
		return nil, host.ErrNotFound
	}
	ctx, cancel := context.WithCancel(ctx)
	u := *r.base
	u.Path += "/attachments/download/" + id
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("X-Redmine-API-Key", r.cfg.APIKey)
	start := time.Now()
	// The answer must begin within the timeout.
	timer := time.AfterFunc(r.cfg.Timeout, cancel)
	resp, err := r.client.Do(req)
	begun := timer.Stop()
	outcome := OutcomeUnavailable
	defer func() {
		if r.cfg.Observe != nil {
			r.cfg.Observe(outcome, time.Since(start))
		}
	}()
	switch {
	case err != nil || !begun:
		cancel()
		if err == nil {
			resp.Body.Close()
		}
		return nil, fmt.Errorf("%w: %v", host.ErrUnavailable, err)
	case resp.StatusCode == http.StatusOK:
		outcome = OutcomeOK
		return &download{ReadCloser: resp.Body, r: io.LimitReader(resp.Body, maxDownload), cancel: cancel}, nil
	}
	resp.Body.Close()
	cancel()
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusForbidden:
		outcome = OutcomeNotFound
		return nil, host.ErrNotFound
	case http.StatusUnauthorized:
		outcome = OutcomeRefused
		return nil, ErrRefused
	}
	return nil, fmt.Errorf("%w: %s answered %d", host.ErrUnavailable, r.base.Host, resp.StatusCode)
}

// download is an attachment's content, bounded, whose Close ends the
// request.
type download struct {
	io.ReadCloser
	r      io.Reader
	cancel context.CancelFunc
}

func (d *download) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *download) Close() error {
	err := d.ReadCloser.Close()
	d.cancel()
	return err
}

// markup is the host.Issue markup of Redmine's text formatting.
func markup(formatting string) string {
	switch formatting {
	case "common_mark", "markdown":
		return "markdown"
	case "textile":
		return "textile"
	}
	return ""
}

// customValue is a custom field's value as text: a string, or a list of
// them joined (a multiple list field).
func customValue(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return strings.Join(list, ", ")
	}
	return ""
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// parseTime reads Redmine's times (RFC 3339, UTC).
func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t.UTC()
}

// validRef reports whether id can name a project: its number or its
// identifier (lower-case letters, digits, - and _), so that nothing a
// client sends reaches another path of the API.
func validRef(id string) bool {
	if id == "" || len(id) > 100 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

var _ host.Host = (*Redmine)(nil)
