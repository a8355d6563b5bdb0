package share

import (
	"context"
	"errors"
	"net/http"
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
	switch {
	case issue != nil && c.ProjectID == "":
		c.ProjectID = issue.Project.ID // the listing rules go by project
	case issue != nil && c.ProjectID != issue.Project.ID && c.ProjectID != issue.Project.Number:
		f.Add("projectId", "project_mismatch", "issue "+c.IssueID+" is in project "+strconv.Quote(issue.Project.ID)+", not "+strconv.Quote(c.ProjectID))
	case issue == nil && c.ProjectID != "":
		_, err := h.Project(ctx, c.ProjectID)
		switch {
		case errors.Is(err, host.ErrNotFound):
			f.Add("projectId", "unknown_project", "the issue tracker has no project "+strconv.Quote(c.ProjectID)+" that keygate's account can see")
		case err != nil:
			return hostUnavailable()
		}
	}
	if c.Type == TypeJQL && c.JQL != nil {
		checkJQL(*c.JQL, c.ProjectID, f)
	}
	checkFieldsWithHost(c.FieldsConfig, issue, f)
	return nil
}

// checkJQL refuses a query outside the subset every tracker takes, or
// one that names another project than the share's: a share's query
// always stays in its project.
func checkJQL(q, project string, f *problem.Fields) {
	parsed, err := host.ParseJQL(q)
	if err != nil {
		f.Add("jql", "invalid_jql", "the query does not parse "+err.Error())
		return
	}
	for _, c := range parsed.Clauses {
		if c.Field == "project" && project != "" && !strings.EqualFold(c.Values[0], project) {
			f.Add("jql", "invalid_jql", "the query names project "+strconv.Quote(c.Values[0])+"; a share's query stays in its project, "+strconv.Quote(project))
		}
	}
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
	d := problem.New(http.StatusServiceUnavailable, problem.CodeHostUnavailable,
		"the issue tracker did not answer; nothing was stored: try again")
	d.RetryAfter = hostRetryAfter
	return d
}
