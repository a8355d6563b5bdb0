package share

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/richtext"
)

// sharedIssue is what an outside party sees of a shared issue: only the
// fields the share's fieldsConfig lets it view, in the tracker's order.
// A field not in the config never reaches the browser.
type sharedIssue struct {
	ID     string       `json:"id"`
	Fields []host.Field `json:"fields"`
	Markup string       `json:"markup"`
	// Comments and Attachments are present when the share lets the
	// party view them.
	Comments    []host.Comment    `json:"comments,omitempty"`
	Attachments []host.Attachment `json:"attachments,omitempty"`

	// rich names the fields (description, comment) whose content the
	// share lets the party view rendered, and attachment when it may
	// download them: VIEW_CONTENT.
	rich map[string]bool
	// base is the issue's page (/s/{uuid}, or /s/{uuid}/issues/{id} for
	// one opened from a list), for its links and forms; edit names the
	// fields the party may change from the page.
	base string
	edit map[string]bool
	// upload is set when the party may attach files (ADD on attachment).
	upload bool
}

// Show is a field's value as the page shows it: the description as
// rich text when its content is shared, else as plain text.
func (s *sharedIssue) Show(f host.Field) template.HTML {
	if f.ID == "description" {
		return s.text("description", f.Value)
	}
	return template.HTML(template.HTMLEscapeString(f.Value))
}

// HTML is the issue's part of the page: its fields, comments and
// attachments, and the comment form when commentURL is set. Written by
// code rather than the page's template: it is most of a busy page, and
// the template's reflection would cost more than the tracker's cache
// saves.
func (s *sharedIssue) HTML(commentURL string) template.HTML {
	var b strings.Builder
	esc := template.HTMLEscapeString
	b.WriteString("<h2>Issue " + esc(s.ID) + "</h2>\n")
	if len(s.Fields) > 0 {
		b.WriteString("<dl>\n")
		for _, f := range s.Fields {
			b.WriteString("<dt>" + esc(f.Name) + "</dt><dd>" + string(s.Show(f)))
			if s.edit[f.ID] {
				action := esc(s.base) + "/fields/" + esc(f.ID)
				input := `<input name="value" value="` + esc(f.Value) + `" aria-label="New ` + esc(f.Name) + `">`
				if f.ID == "description" {
					input = `<textarea name="value" rows="5" aria-label="New ` + esc(f.Name) + `">` + esc(f.Value) + `</textarea>`
				}
				b.WriteString(`<form method="post" action="` + action + `" class="edit">` + input + `<button type="submit">Save</button></form>`)
			}
			b.WriteString("</dd>\n")
		}
		b.WriteString("</dl>\n")
	}
	if len(s.Comments) > 0 {
		b.WriteString("<h2>Comments</h2>\n")
		for _, c := range s.Comments {
			b.WriteString(`<div class="comment"><p class="by">` + esc(c.Author) + " · " + pageTime(c.Created) + "</p>" + string(s.ShowComment(c)) + "</div>\n")
		}
	}
	if len(s.Attachments) > 0 {
		b.WriteString("<h2>Attachments</h2>\n<table><thead><tr><th>Name</th><th>Size</th><th>Type</th></tr></thead><tbody>\n")
		for _, a := range s.Attachments {
			name := esc(a.Name)
			if s.rich["attachment"] {
				name = `<a href="` + esc(s.base) + `/attachments/` + esc(a.ID) + `" download>` + name + `</a>`
			}
			b.WriteString("<tr><td>" + name + "</td><td>" + fileSize(a.Size) + "</td><td>" + esc(a.ContentType) + "</td></tr>\n")
		}
		b.WriteString("</tbody></table>\n")
	}
	if s.upload {
		b.WriteString(`<h2>Attach a file</h2>
<form method="post" action="` + esc(s.base) + `/attachments" enctype="multipart/form-data" class="wide">
<label>A file of at most 10 MiB<input type="file" name="file" required></label>
<button type="submit">Attach the file</button>
</form>
`)
	}
	if commentURL != "" {
		b.WriteString(`<h2>Add a comment</h2>
<form method="post" action="` + esc(commentURL) + `" class="wide">
<label>Your comment<textarea name="body" rows="5" maxlength="32768" required></textarea></label>
<button type="submit">Send the comment</button>
</form>
`)
	}
	return template.HTML(b.String())
}

// ShowComment is a comment's text as the page shows it.
func (s *sharedIssue) ShowComment(c host.Comment) template.HTML { return s.text("comment", c.Body) }

func (s *sharedIssue) text(field, text string) template.HTML {
	if s.rich[field] {
		return richtext.HTML(s.Markup, text)
	}
	return richtext.Plain(text)
}

// errHostUnavailable is the page's answer when the tracker did not
// answer: the share stays, the issue cannot be shown now.
func errHostUnavailable() *problem.Details {
	return problem.HostUnavailable("The issue tracker did not answer. Please try again in a moment.")
}

// itemGone is the detail of a 404 for an issue the tracker no longer has
// (or keygate's account may no longer see): the share itself stays.
const itemGone = "The shared item is no longer available on the issue tracker."

func errItemGone() *problem.Details { return problem.NotFound(itemGone) }

// viewIssue reads the issue of an ISSUE share from the tracker and keeps
// what the share lets an outside party view.
func viewIssue(ctx context.Context, h host.Host, rec *Record) (*sharedIssue, error) {
	return viewIssueOf(ctx, h, rec, rec.IssueID, true)
}

// viewIssueOf reads issue id of the share's project and keeps what the
// share lets the party view; writes says whether the page may offer its
// forms (not yet for an issue opened from a list).
func viewIssueOf(ctx context.Context, h host.Host, rec *Record, id string, writes bool) (*sharedIssue, error) {
	in, err := h.Issue(ctx, id)
	switch {
	case errors.Is(err, host.ErrNotFound):
		return nil, errItemGone()
	case err != nil:
		return nil, errHostUnavailable()
	}
	// An issue moved to another project is not the one shared.
	if rec.ProjectID != "" && rec.ProjectID != in.Project.ID && rec.ProjectID != in.Project.Number {
		return nil, errItemGone()
	}
	may := func(id, perm string) bool {
		if rec.FieldsConfig == nil {
			return false
		}
		c, ok := rec.FieldsConfig.FieldConfigs[id]
		return ok && slices.Contains(c.FieldPermissions, perm)
	}
	views := func(id string) bool { return may(id, PermView) }
	out := &sharedIssue{ID: in.ID, Fields: []host.Field{}, Markup: in.Markup, edit: map[string]bool{},
		rich: map[string]bool{"description": may("description", PermViewContent), "comment": may("comment", PermViewContent),
			"attachment": may("attachment", PermViewContent)},
		base: issueBase(rec, id), upload: writes && may("attachment", PermAdd)}
	for _, f := range in.Fields {
		if views(f.ID) {
			out.Fields = append(out.Fields, f)
			out.edit[f.ID] = writes && may(f.ID, PermEdit) && (slices.Contains(editable, f.ID) || isCustomField(f.ID))
		}
	}
	if views("comment") {
		out.Comments = append([]host.Comment{}, in.Comments...)
	}
	if views("attachment") {
		out.Attachments = append([]host.Attachment{}, in.Attachments...)
	}
	return out, nil
}

// sharedList is what an outside party sees of a JQL share's query: one
// page of the issues it matches, each with the fields the share lets it
// view.
type sharedList struct {
	Total  int           `json:"total"`
	Page   int           `json:"page"`
	Pages  int           `json:"pages"`
	Issues []sharedIssue `json:"issues"`
	// columns are the names of the viewed fields, in the tracker's order.
	columns []host.Field
	share   string
}

// listPage is how many issues a list page shows.
const listPage = 50

// viewList runs the query of a JQL share for page (from 1).
func viewList(ctx context.Context, h host.Host, rec *Record, page int) (*sharedList, error) {
	q, err := shareQuery(rec)
	if err != nil {
		return nil, err
	}
	list, err := h.Search(ctx, rec.ProjectID, q, "", (page-1)*listPage, listPage)
	if err != nil {
		return nil, searchError(err)
	}
	out := &sharedList{Total: list.Total, Page: page, Pages: max((list.Total+listPage-1)/listPage, 1), Issues: []sharedIssue{}, share: rec.UUID}
	for i := range list.Issues {
		in := &list.Issues[i]
		row := sharedIssue{ID: in.ID, Fields: []host.Field{}, Markup: in.Markup}
		for _, f := range in.Fields {
			if rec.may(f.ID, PermView) && f.ID != "description" {
				row.Fields = append(row.Fields, f)
			}
		}
		if i == 0 {
			out.columns = row.Fields
		}
		out.Issues = append(out.Issues, row)
	}
	return out, nil
}

// shareQuery is the parsed query of a JQL share; one that does not parse
// (a share made before a tracker was connected) cannot be shown.
func shareQuery(rec *Record) (*host.Query, error) {
	if rec.JQL == nil || rec.ProjectID == "" {
		return nil, problem.New(http.StatusConflict, problem.CodeConflict, "this share has no query the issue tracker can run")
	}
	q, err := host.ParseJQL(*rec.JQL)
	if err != nil {
		return nil, problem.New(http.StatusConflict, problem.CodeConflict, "this share's query cannot be run: "+err.Error())
	}
	return q, nil
}

// searchError is the page's answer to a query that failed.
func searchError(err error) error {
	switch {
	case errors.Is(err, host.ErrRejected):
		return problem.New(http.StatusConflict, problem.CodeConflict, "the issue tracker cannot run this share's query: "+strings.TrimPrefix(err.Error(), host.ErrRejected.Error()+": "))
	case errors.Is(err, host.ErrNotFound):
		return errItemGone()
	}
	return errHostUnavailable()
}

// issueBase is the page of issue id of rec: the share's own for its
// issue, else the page of an issue opened from its list.
func issueBase(rec *Record, id string) string {
	if rec.Type == TypeIssue {
		return "/s/" + rec.UUID
	}
	return "/s/" + rec.UUID + "/issues/" + id
}

// listedIssue reads issue id opened from a JQL share's list, a board or
// a timeline: only while the share shows it, else 404.
func listedIssue(ctx context.Context, h host.Host, rec *Record, id string) (*sharedIssue, error) {
	switch rec.Type {
	case TypeJQL:
		return queryIssue(ctx, h, rec, id)
	case TypeBoard, TypeTimeline:
		return boardIssue(ctx, h, rec, id)
	}
	return nil, problem.NotFound("no such page")
}

// queryIssue reads issue id opened from a JQL share's list: only while
// the query still matches it, else 404.
func queryIssue(ctx context.Context, h host.Host, rec *Record, id string) (*sharedIssue, error) {
	q, err := shareQuery(rec)
	if err != nil {
		return nil, err
	}
	list, err := h.Search(ctx, rec.ProjectID, q, id, 0, 1)
	if err != nil {
		return nil, searchError(err)
	}
	if list.Total < 1 || len(list.Issues) != 1 || list.Issues[0].ID != id {
		return nil, problem.NotFound("this share's query does not match that issue")
	}
	return viewIssueOf(ctx, h, rec, id, true)
}

// HTML is the list's part of the page: a table of the issues with the
// viewed fields as columns, each issue linked to its page, and the
// links to the other pages.
func (l *sharedList) HTML() template.HTML {
	var b strings.Builder
	esc := template.HTMLEscapeString
	if l.Total == 1 {
		b.WriteString("<h2>Issues</h2>\n<p>1 issue matches.</p>\n")
	} else {
		fmt.Fprintf(&b, "<h2>Issues</h2>\n<p>%d issues match.</p>\n", l.Total)
	}
	if len(l.Issues) > 0 {
		b.WriteString("<table><thead><tr><th>Issue</th>")
		for _, c := range l.columns {
			b.WriteString("<th>" + esc(c.Name) + "</th>")
		}
		b.WriteString("</tr></thead><tbody>\n")
		for _, in := range l.Issues {
			b.WriteString(`<tr><td><a href="/s/` + esc(l.share) + `/issues/` + esc(in.ID) + `">` + esc(in.ID) + "</a></td>")
			for _, f := range in.Fields {
				b.WriteString("<td>" + esc(f.Value) + "</td>")
			}
			b.WriteString("</tr>\n")
		}
		b.WriteString("</tbody></table>\n")
	}
	if l.Pages > 1 {
		b.WriteString("<p>")
		if l.Page > 1 {
			fmt.Fprintf(&b, `<a href="/s/%s?page=%d">Previous</a> `, esc(l.share), l.Page-1)
		}
		fmt.Fprintf(&b, "Page %d of %d", l.Page, l.Pages)
		if l.Page < l.Pages {
			fmt.Fprintf(&b, ` <a href="/s/%s?page=%d">Next</a>`, esc(l.share), l.Page+1)
		}
		b.WriteString("</p>\n")
	}
	return template.HTML(b.String())
}
