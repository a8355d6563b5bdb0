package share

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/problem"
)

// editable are the fields an outside party may change from a share's
// page (EDIT): text and dates keygate can write back to the tracker,
// and custom fields. Status, dates the tracker keeps, comments and
// attachments are not (comments and attachments are ADDed).
var editable = []string{"summary", "description", "duedate", "startdate"}

// checkWithHost asks the tracker, once, whether what c names exists
// there for keygate's account: the issue of an ISSUE share (whose
// project it fills in when the request names none), the project, and
// the shared fields. Problems go to f; a tracker that does not answer is
// the error, 503 host_unavailable, so that nothing is stored.
func checkWithHost(ctx context.Context, h host.Host, c *content, f *problem.Fields) error {
	var issue *host.Issue
	if c.Type == TypeIssue && c.IssueID != "" {
		in, err := h.Issue(ctx, c.IssueID)
		switch {
		case errors.Is(err, host.ErrNotFound):
			f.Add("issueId", "unknown_issue", "the issue tracker has no issue "+strconv.Quote(c.IssueID)+" that keygate's account can see")
		case err != nil:
			return hostUnavailable()
		default:
			issue = in
		}
	}
	// The project, named by its identifier from here on (a number sent
	// is the same project), so that the listing rules by project hold.
	var project *host.Project
	switch {
	case issue != nil && (c.ProjectID == "" || c.ProjectID == issue.Project.ID || c.ProjectID == issue.Project.Number):
		project = &issue.Project
	case issue != nil:
		f.Add("projectId", "project_mismatch", "issue "+c.IssueID+" is in project "+strconv.Quote(issue.Project.ID)+", not "+strconv.Quote(c.ProjectID))
	case c.ProjectID != "":
		p, err := h.Project(ctx, c.ProjectID)
		switch {
		case errors.Is(err, host.ErrNotFound):
			f.Add("projectId", "unknown_project", "the issue tracker has no project "+strconv.Quote(c.ProjectID)+" that keygate's account can see")
		case err != nil:
			return hostUnavailable()
		default:
			project = p
		}
	}
	if project != nil {
		c.ProjectID = project.ID
	}
	checkFieldsWithHost(c.FieldsConfig, issue, f)
	if project == nil || len(f.List()) > 0 {
		return nil
	}
	// A query and a board are run once, so that one the tracker cannot
	// run is refused now rather than on the page.
	var query *host.Query
	switch {
	case c.Type == TypeJQL && c.JQL != nil:
		q, ok := checkJQL(*c.JQL, project, f)
		if !ok {
			return nil
		}
		query = q
	case c.Type == TypeBoard && c.Board != nil && c.Board.ID != "":
		query = &host.Query{SavedQuery: c.Board.ID}
	default:
		return nil
	}
	_, err := h.Search(ctx, project.ID, query, "", 0, 1)
	switch {
	case errors.Is(err, host.ErrNotFound) && query.SavedQuery != "":
		f.Add("board.id", "unknown_board", "the issue tracker has no saved query "+strconv.Quote(c.Board.ID)+" in project "+strconv.Quote(project.ID)+" that keygate's account can see")
	case errors.Is(err, host.ErrRejected):
		f.Add("jql", "invalid_jql", "the issue tracker cannot run the query: "+strings.TrimPrefix(err.Error(), host.ErrRejected.Error()+": "))
	case err != nil:
		return hostUnavailable()
	}
	return nil
}

// checkJQL refuses a query outside the subset every tracker takes, or
// one that names another project than the share's: a share's query
// always stays in its project.
func checkJQL(q string, project *host.Project, f *problem.Fields) (*host.Query, bool) {
	parsed, err := host.ParseJQL(q)
	if err != nil {
		f.Add("jql", "invalid_jql", "the query does not parse "+err.Error())
		return nil, false
	}
	ok := true
	for _, c := range parsed.Clauses {
		if v := c.Values[0]; c.Field == "project" && !strings.EqualFold(v, project.ID) && v != project.Number {
			f.Add("jql", "invalid_jql", "the query names project "+strconv.Quote(v)+"; a share's query stays in its project, "+strconv.Quote(project.ID))
			ok = false
		}
	}
	return parsed, ok
}

// checkFieldsWithHost names every shared field the tracker does not have
// (custom fields are checked against the issue's, when there is one) and
// every EDIT on a field keygate cannot write.
func checkFieldsWithHost(fc *FieldsConfig, issue *host.Issue, f *problem.Fields) {
	if fc == nil {
		return
	}
	ids := make([]string, 0, len(fc.FieldConfigs))
	for id := range fc.FieldConfigs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		path := "fieldsConfig.fieldConfigs." + id
		custom := isCustomField(id)
		known := slices.Contains(host.FieldIDs, id) || custom
		if custom && issue != nil {
			_, known = issue.Field(id)
		}
		if !known {
			f.Add(path, "unknown_field", "the issue tracker has no field "+strconv.Quote(id)+" (fields go by Jira's ids: summary, description, status, ..., customfield_N)")
			continue
		}
		if slices.Contains(fc.FieldConfigs[id].FieldPermissions, PermEdit) && !custom && !slices.Contains(editable, id) {
			f.Add(path, "not_editable", "keygate cannot change "+id+" from a share's page; editable: "+strings.Join(editable, ", ")+" and custom fields")
		}
	}
}

// isCustomField reports whether id names a custom field, customfield_N.
func isCustomField(id string) bool {
	n, ok := strings.CutPrefix(id, "customfield_")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 31)
	return err == nil
}

// hostUnavailable is the create's or update's answer when the tracker
// does not answer: nothing is stored.
func hostUnavailable() *problem.Details {
	return problem.HostUnavailable("the issue tracker did not answer; nothing was stored: try again")
}
