package share

import (
	"bytes"
	"html/template"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// pageData is what the public page template shows.
type pageData struct {
	Status  int
	Title   string
	Message string // an error or notice for the person reading
	View    *publicView
	Fields  []pageField
	Expires string
	// Locked: show the unlock form, asking for what the share needs.
	Locked    bool
	AskPass   bool
	AskEmail  bool
	Email     string // refilled after a failed attempt
	UnlockURL string
	// CommentURL, when set, is where the page's comment form posts.
	CommentURL string
}

// pageTime is how the page writes a time of the tracker.
func pageTime(t time.Time) string { return t.UTC().Format("2 January 2006, 15:04 UTC") }

// fileSize is a file size for a person: bytes, KiB or MiB.
func fileSize(n int64) string {
	switch {
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// pageField is one shared field with each permission on or off.
type pageField struct {
	ID                           string
	View, ViewContent, Add, Edit bool
}

func pageFields(fc *FieldsConfig) []pageField {
	if fc == nil {
		return nil
	}
	out := make([]pageField, 0, len(fc.FieldConfigs))
	for id, c := range fc.FieldConfigs {
		out = append(out, pageField{ID: id,
			View:        slices.Contains(c.FieldPermissions, PermView),
			ViewContent: slices.Contains(c.FieldPermissions, PermViewContent),
			Add:         slices.Contains(c.FieldPermissions, PermAdd),
			Edit:        slices.Contains(c.FieldPermissions, PermEdit),
		})
	}
	slices.SortFunc(out, func(a, b pageField) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

func formatMillis(ms *int64) string {
	if ms == nil {
		return ""
	}
	return time.UnixMilli(*ms).UTC().Format("2 January 2006, 15:04 UTC")
}

// pageTemplate is the whole page: no scripts, no external resources, so
// the Content-Security-Policy can forbid everything but inline style.
var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>{{.Title}}</title>
<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f4f5f7;color:#172b4d;margin:0}
main{max-width:46rem;margin:3rem auto;background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(9,30,66,.2);padding:2rem}
h1{font-size:1.4rem;margin:0 0 1rem}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.4rem 1.2rem;margin:0 0 1.5rem}
dt{color:#5e6c84}dd{margin:0;word-break:break-word}
code{background:#f4f5f7;padding:.1rem .3rem;border-radius:3px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.45rem .6rem;border-bottom:1px solid #dfe1e6}
td.p{text-align:center}
.on{color:#006644;font-weight:600}.off{color:#6b778c}
.msg{background:#ffebe6;color:#bf2600;padding:.6rem .8rem;border-radius:4px;margin:0 0 1rem}
.note{background:#deebff;color:#0747a6;padding:.6rem .8rem;border-radius:4px;margin:0 0 1rem}
h2{font-size:1.1rem;margin:1.5rem 0 .6rem}
.text{white-space:pre-wrap;word-break:break-word;margin:0}
.comment{border-top:1px solid #dfe1e6;padding:.6rem 0}.comment .by{color:#5e6c84;font-size:.9rem;margin:0 0 .3rem}
.rich p{margin:0 0 .5rem}.rich pre{background:#f4f5f7;padding:.5rem;overflow-x:auto}
form{display:grid;gap:.8rem;max-width:22rem}
label{display:grid;gap:.25rem;font-size:.9rem;color:#5e6c84}
input,textarea{font:inherit;padding:.45rem .55rem;border:1px solid #c1c7d0;border-radius:4px}
form.wide{max-width:none}
.board{display:flex;gap:.8rem;overflow-x:auto}.board section{flex:1;min-width:10rem;background:#f4f5f7;border-radius:6px;padding:.5rem}
.board h3{font-size:.95rem;margin:.2rem 0 .5rem}.card{background:#fff;border-radius:4px;box-shadow:0 1px 2px rgba(9,30,66,.2);padding:.5rem;margin:0 0 .5rem}
svg.timeline{width:100%;height:auto}
form.edit{display:flex;gap:.4rem;max-width:none;margin:.3rem 0 0}form.edit input,form.edit textarea{flex:1}
button{font:inherit;padding:.5rem;border:0;border-radius:4px;background:#0052cc;color:#fff;cursor:pointer}
</style>
</head>
<body>
<main>
<h1>{{.Title}}</h1>
{{with .Message}}<p class="msg" role="alert">{{.}}</p>{{end}}
{{if .Locked}}
<form method="post" action="{{.UnlockURL}}">
{{if .AskEmail}}<label>Your e-mail address<input type="email" name="email" value="{{.Email}}" required autocomplete="email"></label>{{end}}
{{if .AskPass}}<label>Password<input type="password" name="password" required autocomplete="current-password"></label>{{end}}
<button type="submit">Open the share</button>
</form>
{{else}}{{with .View}}
<dl>
<dt>Type</dt><dd>{{.Type}}</dd>
{{with .IssueID}}<dt>Issue</dt><dd>{{.}}</dd>{{end}}
{{with .ProjectID}}<dt>Project</dt><dd>{{.}}</dd>{{end}}
{{with .Board}}<dt>Board</dt><dd>{{.ID}}</dd>{{end}}
{{with .JQL}}<dt>JQL</dt><dd><code>{{.}}</code></dd>{{end}}
{{with $.Expires}}<dt>Available until</dt><dd>{{.}}</dd>{{end}}
</dl>
{{if not .Tracker}}<p class="note">No issue tracker is connected to this gateway: the page shows what is shared, not the issue itself.</p>{{end}}
{{with .Issue}}{{.HTML $.CommentURL}}{{end}}
{{with .List}}{{.HTML}}{{end}}
{{with .BoardIssues}}{{.HTML}}{{end}}
{{if $.Fields}}
<table>
<thead><tr><th>Field</th><th>View</th><th>View content</th><th>Add</th><th>Edit</th></tr></thead>
<tbody>
{{range $.Fields}}<tr><td>{{.ID}}</td>{{template "perm" .View}}{{template "perm" .ViewContent}}{{template "perm" .Add}}{{template "perm" .Edit}}</tr>
{{end}}</tbody>
</table>
{{else}}<p>No fields are shared.</p>{{end}}
{{end}}{{end}}
</main>
</body>
</html>
{{define "perm"}}{{if .}}<td class="p on">yes</td>{{else}}<td class="p off">no</td>{{end}}{{end}}`))

// writePage renders d with the headers every public page carries: the
// uuid in the address is the share's secret, so no referrer leaves and
// nothing is cached.
func writePage(w http.ResponseWriter, d *pageData) {
	h := w.Header()
	problem.SecureHeaders(h)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	// Rendered whole first: the template writes in many small pieces,
	// each a write (and a deadline reset) on the connection otherwise.
	b := pageBuffers.Get().(*bytes.Buffer)
	defer pageBuffers.Put(b)
	b.Reset()
	_ = pageTemplate.Execute(b, d)
	h.Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(d.Status)
	_, _ = w.Write(b.Bytes())
}

// pageBuffers are the buffers pages are rendered into.
var pageBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}
