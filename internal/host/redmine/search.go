package redmine

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/host"
)

// Search implements host.Host: the JQL subset translated to the REST
// API's issue filters (f[], op[], v[]), always within project.
func (r *Redmine) Search(ctx context.Context, project string, q *host.Query, issueID string, offset, limit int) (*host.IssueList, error) {
	if !validRef(project) {
		return nil, host.ErrNotFound
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	// The project's number: Redmine's project filter takes in its
	// subprojects, which a share of the project does not.
	proj, err := r.Project(ctx, project)
	if err != nil {
		return nil, err
	}
	v := url.Values{"project_id": {project}, "offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(limit)}}
	// Every status unless the query says: JQL has no default of open;
	// no subproject.
	filters := map[string]filter{"status_id": {op: "*"}, "subproject_id": {op: "!*"}}
	if q.SavedQuery != "" {
		// The saved query's own filters, statuses included (an unknown
		// query is Redmine's 404).
		if _, err := strconv.ParseUint(q.SavedQuery, 10, 31); err != nil {
			return nil, host.ErrNotFound
		}
		v.Set("query_id", q.SavedQuery)
		delete(filters, "status_id")
	}
	if issueID != "" {
		if _, err := strconv.ParseUint(issueID, 10, 31); err != nil {
			return &host.IssueList{}, nil
		}
		filters["issue_id"] = filter{op: "=", values: []string{issueID}}
	}
	for _, c := range q.Clauses {
		if err := r.translate(ctx, project, c, filters); err != nil {
			return nil, err
		}
	}
	for field, f := range filters {
		v.Add("f[]", field)
		v.Set("op["+field+"]", f.op)
		for _, x := range f.values {
			v.Add("v["+field+"][]", x)
		}
	}
	if q.OrderBy != "" {
		sort := orderColumns[q.OrderBy]
		if q.Desc {
			sort += ":desc"
		}
		v.Set("sort", sort)
	}
	var out struct {
		Issues     []redmineIssue `json:"issues"`
		TotalCount int            `json:"total_count"`
	}
	if err := r.get(ctx, "/issues.json", v, &out); err != nil {
		return nil, err
	}
	list := &host.IssueList{Total: out.TotalCount, Issues: []host.Issue{}}
	for i := range out.Issues {
		in := &out.Issues[i]
		it := r.issue(in, *proj)
		// A private issue never leaves keygate; and Redmine ignores a
		// filter it does not know, so each issue is checked against the
		// project and the query here too: a share never shows an issue
		// outside them.
		if in.IsPrivate || strconv.Itoa(in.Project.ID) != proj.Number || !matches(&it, q, time.Now().UTC()) {
			list.Total--
			continue
		}
		list.Issues = append(list.Issues, it)
	}
	return list, nil
}

// matches reports whether in, as Redmine answered it, satisfies every
// clause of q that its fields can tell.
func matches(in *host.Issue, q *host.Query, now time.Time) bool {
	value := func(id string) string { f, _ := in.Field(id); return f.Value }
	for _, c := range q.Clauses {
		switch c.Field {
		case "status", "issuetype", "priority", "fixversion":
			id := map[string]string{"status": "status", "issuetype": "issuetype", "priority": "priority", "fixversion": "fixVersions"}[c.Field]
			in := containsFold(c.Values, value(id))
			if in == (c.Op == "!=") {
				return false
			}
		case "assignee", "reporter":
			v := value(c.Field)
			switch c.Op {
			case "is empty":
				if v != "" {
					return false
				}
			case "is not empty":
				if v == "" {
					return false
				}
			default:
				if !strings.EqualFold(v, c.Values[0]) {
					return false
				}
			}
		case "text":
			if !strings.Contains(strings.ToLower(value("summary")+"\n"+value("description")), strings.ToLower(c.Values[0])) {
				return false
			}
		case "created", "updated", "duedate":
			v := value(c.Field)
			if len(v) >= 10 {
				v = v[:10]
			}
			switch c.Op {
			case "is empty":
				if v != "" {
					return false
				}
				continue
			case "is not empty":
				if v == "" {
					return false
				}
				continue
			}
			day, err := jqlDay(c.Values[0], now)
			if err != nil || v == "" || (c.Op == ">=" && v < day) || (c.Op == "<=" && v > day) {
				return false
			}
		}
	}
	return true
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// filter is one of Redmine's issue filters: an operator and its values.
type filter struct {
	op     string
	values []string
}

// orderColumns are Redmine's sort columns of the JQL fields a query may
// be ordered by.
var orderColumns = map[string]string{
	"created": "created_on", "updated": "updated_on", "duedate": "due_date", "priority": "priority",
	"status": "status", "issuetype": "tracker", "assignee": "assigned_to", "reporter": "author",
}

// translate adds the filter of clause c to filters.
func (r *Redmine) translate(ctx context.Context, project string, c host.Clause, filters map[string]filter) error {
	byName := func(path, list, field string, names []string) error {
		ids, err := r.ids(ctx, path, list, names)
		if err != nil {
			return err
		}
		op := "="
		if c.Op == "!=" {
			op = "!"
		}
		filters[field] = filter{op: op, values: ids}
		return nil
	}
	switch c.Field {
	case "project":
		// The share's project already bounds the query (checked when the
		// share was made).
		return nil
	case "status":
		return byName("/issue_statuses.json", "issue_statuses", "status_id", c.Values)
	case "statuscategory":
		filters["status_id"] = filter{op: "c"}
	case "issuetype":
		return byName("/trackers.json", "trackers", "tracker_id", c.Values)
	case "priority":
		return byName("/enumerations/issue_priorities.json", "issue_priorities", "priority_id", c.Values)
	case "fixversion":
		return byName("/projects/"+url.PathEscape(project)+"/versions.json", "versions", "fixed_version_id", c.Values)
	case "assignee", "reporter":
		field := map[string]string{"assignee": "assigned_to_id", "reporter": "author_id"}[c.Field]
		if f, ok := emptiness(c.Op); ok {
			filters[field] = f
			return nil
		}
		id, err := r.member(ctx, project, c.Values[0])
		if err != nil {
			return err
		}
		filters[field] = filter{op: "=", values: []string{id}}
	case "text":
		// Redmine filters one field at a time: the subject (a query
		// matching only a description is not listed; never the reverse).
		filters["subject"] = filter{op: "~", values: c.Values}
	case "created", "updated", "duedate":
		field := map[string]string{"created": "created_on", "updated": "updated_on", "duedate": "due_date"}[c.Field]
		if f, ok := emptiness(c.Op); ok {
			filters[field] = f
			return nil
		}
		day, err := jqlDay(c.Values[0], time.Now().UTC())
		if err != nil {
			return err
		}
		prev, both := filters[field]
		switch {
		case !both:
			filters[field] = filter{op: c.Op, values: []string{day}}
		case prev.op == ">=" && c.Op == "<=":
			filters[field] = filter{op: "><", values: []string{prev.values[0], day}}
		case prev.op == "<=" && c.Op == ">=":
			filters[field] = filter{op: "><", values: []string{day, prev.values[0]}}
		default:
			return fmt.Errorf("%w: %s is bounded twice the same way", host.ErrRejected, c.Field)
		}
	}
	return nil
}

// emptiness is Redmine's filter of JQL's is [not] EMPTY.
func emptiness(op string) (filter, bool) {
	switch op {
	case "is empty":
		return filter{op: "!*"}, true
	case "is not empty":
		return filter{op: "*"}, true
	}
	return filter{}, false
}

// ids are the ids of names (case-insensitive) in the list Redmine
// answers at path; a name it does not have is ErrRejected.
func (r *Redmine) ids(ctx context.Context, path, list string, names []string) ([]string, error) {
	var out map[string]any
	if err := r.get(ctx, path, nil, &out); err != nil {
		return nil, err
	}
	items, _ := out[list].([]any)
	var ids []string
	for _, n := range names {
		found := ""
		for _, it := range items {
			m, _ := it.(map[string]any)
			if name, _ := m["name"].(string); strings.EqualFold(name, n) {
				if id, ok := m["id"].(float64); ok {
					found = strconv.Itoa(int(id))
				}
			}
		}
		if found == "" {
			return nil, fmt.Errorf("%w: the tracker has no %s %q", host.ErrRejected, listNames[list], n)
		}
		ids = append(ids, found)
	}
	return ids, nil
}

// listNames are the names, for a person, of what Redmine's lists hold.
var listNames = map[string]string{"issue_statuses": "status", "trackers": "tracker", "issue_priorities": "priority", "versions": "version"}

// member is the id of the member of project whose name or login is name.
func (r *Redmine) member(ctx context.Context, project, name string) (string, error) {
	var out struct {
		Memberships []struct {
			User *named `json:"user"`
		} `json:"memberships"`
	}
	if err := r.get(ctx, "/projects/"+url.PathEscape(project)+"/memberships.json", url.Values{"limit": {"100"}}, &out); err != nil {
		return "", err
	}
	for _, m := range out.Memberships {
		if m.User != nil && strings.EqualFold(m.User.Name, name) {
			return strconv.Itoa(m.User.ID), nil
		}
	}
	return "", fmt.Errorf("%w: the project has no member %q", host.ErrRejected, name)
}

// jqlDay is the day (YYYY-MM-DD, UTC) a JQL date names at now.
func jqlDay(v string, now time.Time) (string, error) {
	const day = time.DateOnly
	switch strings.ToLower(v) {
	case "now()", "startofday()":
		return now.Format(day), nil
	case "startofweek()":
		return now.AddDate(0, 0, -int((now.Weekday()+6)%7)).Format(day), nil
	case "startofmonth()":
		return time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).Format(day), nil
	}
	if t, err := time.Parse(day, v); err == nil {
		return t.Format(day), nil
	}
	if len(v) >= 3 && (v[0] == '-' || v[0] == '+') {
		n, err := strconv.Atoi(v[1 : len(v)-1])
		if err == nil {
			if v[0] == '-' {
				n = -n
			}
			switch v[len(v)-1] {
			case 'd':
				return now.AddDate(0, 0, n).Format(day), nil
			case 'w':
				return now.AddDate(0, 0, 7*n).Format(day), nil
			case 'm':
				return now.AddDate(0, n, 0).Format(day), nil
			case 'h':
				return now.Add(time.Duration(n) * time.Hour).Format(day), nil
			}
		}
	}
	return "", fmt.Errorf("%w: %q is not a date", host.ErrRejected, v)
}
