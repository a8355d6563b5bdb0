package share

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
)

// The pages of BOARD and TIMELINE shares: the issues of the share's
// project (a board's, where it names the tracker's saved query), at most
// maxBoard of them, each opening at /s/{uuid}/issues/{id} while it is
// among them.

// maxBoard bounds the issues a board or timeline shows.
const maxBoard = 500

// boardIssues reads the issues of a BOARD or TIMELINE share, a page of
// 100 at a time, up to maxBoard; a timeline keeps those with a start or
// due date.
func boardIssues(ctx context.Context, h host.Host, rec *Record) ([]host.Issue, error) {
	q := &host.Query{}
	if rec.Type == TypeBoard && rec.Board != nil && rec.Board.ID != "" {
		q.SavedQuery = rec.Board.ID
	}
	if rec.ProjectID == "" {
		return nil, problem.New(http.StatusConflict, problem.CodeConflict, "this share names no project the issue tracker can list")
	}
	var out []host.Issue
	for offset := 0; offset < maxBoard; offset += 100 {
		list, err := h.Search(ctx, rec.ProjectID, q, "", offset, 100)
		if err != nil {
			return nil, searchError(err)
		}
		for _, in := range list.Issues {
			if start, due := shownDates(rec, &in); rec.Type == TypeTimeline && start == "" && due == "" {
				continue // on a timeline, only issues with a date the share shows
			}
			out = append(out, in)
		}
		if len(list.Issues) < 100 || offset+100 >= list.Total {
			break
		}
	}
	return out, nil
}

func fieldValue(in *host.Issue, id string) string { f, _ := in.Field(id); return f.Value }

// shownDates are the start and due dates of in that rec lets the party
// view ("" for one it may not).
func shownDates(rec *Record, in *host.Issue) (start, due string) {
	if rec.may("startdate", PermView) {
		start = dateOnly(fieldValue(in, "startdate"))
	}
	if rec.may("duedate", PermView) {
		due = dateOnly(fieldValue(in, "duedate"))
	}
	return start, due
}

// boardIssue reads issue id opened from a board or timeline: only while
// it is among the share's issues.
func boardIssue(ctx context.Context, h host.Host, rec *Record, id string) (*sharedIssue, error) {
	issues, err := boardIssues(ctx, h, rec)
	if err != nil {
		return nil, err
	}
	if !slices.ContainsFunc(issues, func(in host.Issue) bool { return in.ID == id }) {
		return nil, problem.NotFound("this share does not show that issue")
	}
	return viewIssueOf(ctx, h, rec, id, true)
}

// sharedBoard is a BOARD or TIMELINE share's issues as an outside party
// sees them: each with the fields the share lets it view.
type sharedBoard struct {
	Issues []sharedIssue `json:"issues"`
	// columns are the statuses in the order the issues first show them
	// (a board); start and due are each issue's dates (a timeline).
	kind       string
	columns    []string
	status     []string
	start, due []string
	share      string
}

func viewBoard(ctx context.Context, h host.Host, rec *Record) (*sharedBoard, error) {
	issues, err := boardIssues(ctx, h, rec)
	if err != nil {
		return nil, err
	}
	b := &sharedBoard{Issues: []sharedIssue{}, kind: rec.Type, share: rec.UUID}
	for i := range issues {
		in := &issues[i]
		row := sharedIssue{ID: in.ID, Fields: []host.Field{}, Markup: in.Markup}
		for _, f := range in.Fields {
			if rec.may(f.ID, PermView) && f.ID != "description" {
				row.Fields = append(row.Fields, f)
			}
		}
		// Only what the share lets the party view reaches the page: the
		// columns by status with VIEW on status, the bars' dates with
		// VIEW on each date.
		start, due := shownDates(rec, in)
		st := "Issues"
		if rec.may("status", PermView) {
			st = fieldValue(in, "status")
		}
		if !slices.Contains(b.columns, st) {
			b.columns = append(b.columns, st)
		}
		b.status = append(b.status, st)
		b.start = append(b.start, start)
		b.due = append(b.due, due)
		b.Issues = append(b.Issues, row)
	}
	return b, nil
}

func dateOnly(v string) string {
	if len(v) > 10 {
		return v[:10]
	}
	return v
}

// HTML is the board (a column per status, a card per issue) or the
// timeline (an SVG drawn here, no script).
func (b *sharedBoard) HTML() template.HTML {
	if b.kind == TypeTimeline {
		return b.timeline()
	}
	var s strings.Builder
	esc := template.HTMLEscapeString
	s.WriteString(`<h2>Board</h2><div class="board">`)
	for _, col := range b.columns {
		s.WriteString(`<section><h3>` + esc(col) + `</h3>`)
		for i, in := range b.Issues {
			if b.status[i] != col {
				continue
			}
			s.WriteString(`<div class="card"><a href="/s/` + esc(b.share) + `/issues/` + esc(in.ID) + `">` + esc(in.ID) + `</a>`)
			for _, f := range in.Fields {
				if f.ID != "status" {
					s.WriteString(`<div>` + esc(f.Value) + `</div>`)
				}
			}
			s.WriteString(`</div>`)
		}
		s.WriteString(`</section>`)
	}
	if len(b.Issues) == 0 {
		s.WriteString(`<p>No issues.</p>`)
	}
	s.WriteString("</div>\n")
	return template.HTML(s.String())
}

// timeline draws each issue with a start or due date as a bar from its
// start (or due) to its due (or start) on a time axis whose months are
// labelled.
func (b *sharedBoard) timeline() template.HTML {
	var s strings.Builder
	esc := template.HTMLEscapeString
	s.WriteString("<h2>Timeline</h2>\n")
	if len(b.Issues) == 0 {
		s.WriteString("<p>No issue has a start or due date this share shows.</p>\n")
		return template.HTML(s.String())
	}
	parse := func(v string) (time.Time, bool) { t, err := time.Parse(time.DateOnly, v); return t, err == nil }
	var lo, hi time.Time
	spans := make([][2]time.Time, len(b.Issues))
	for i := range b.Issues {
		from, okFrom := parse(b.start[i])
		to, okTo := parse(b.due[i])
		switch {
		case !okFrom:
			from = to
		case !okTo:
			to = from
		}
		if to.Before(from) {
			from, to = to, from
		}
		spans[i] = [2]time.Time{from, to.AddDate(0, 0, 1)}
		if lo.IsZero() || from.Before(lo) {
			lo = from
		}
		if to.AddDate(0, 0, 1).After(hi) {
			hi = to.AddDate(0, 0, 1)
		}
	}
	lo = time.Date(lo.Year(), lo.Month(), 1, 0, 0, 0, 0, time.UTC)
	hi = time.Date(hi.Year(), hi.Month(), 1, 0, 0, 0, 0, time.UTC).AddDate(0, 1, 0)
	const width, label, row, top = 720.0, 160.0, 24.0, 28.0
	days := hi.Sub(lo).Hours() / 24
	x := func(t time.Time) float64 { return label + (width-label)*t.Sub(lo).Hours()/24/days }
	height := top + row*float64(len(b.Issues)) + 8
	fmt.Fprintf(&s, `<svg class="timeline" viewBox="0 0 %.0f %.0f" role="group" aria-label="Timeline of %d issues">`, width, height, len(b.Issues))
	for m := lo; m.Before(hi); m = m.AddDate(0, 1, 0) {
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#dfe1e6"/><text x="%.1f" y="16" font-size="11" fill="#5e6c84">%s</text>`,
			x(m), top-8, x(m), height, x(m)+3, m.Format("Jan 2006"))
	}
	for i, in := range b.Issues {
		y := top + row*float64(i)
		name := in.ID
		if len(in.Fields) > 0 && in.Fields[0].ID == "summary" {
			name += " " + in.Fields[0].Value
		}
		if r := []rune(name); len(r) > 22 {
			name = string(r[:21]) + "…"
		}
		fmt.Fprintf(&s, `<a href="/s/%s/issues/%s"><text x="0" y="%.0f" font-size="12" fill="#172b4d">%s</text>`+
			`<rect x="%.1f" y="%.0f" width="%.1f" height="14" rx="3" fill="#0052cc"><title>%s: %s to %s</title></rect></a>`,
			esc(b.share), esc(in.ID), y+12, esc(name), x(spans[i][0]), y+1, max(x(spans[i][1])-x(spans[i][0]), 2),
			esc(in.ID), spans[i][0].Format(time.DateOnly), spans[i][1].AddDate(0, 0, -1).Format(time.DateOnly))
	}
	s.WriteString("</svg>\n")
	return template.HTML(s.String())
}
