// Package host is the seam between keygate's APIs and the host platform
// they stand on: the issue tracker whose items a share opens to outside
// parties, and whose pages contracts are made from. A platform (Redmine
// first) is one implementation of Host; the APIs see only this package's
// types, which name fields as Jira does on every platform, so that a
// share reads the same whatever the tracker.
package host

import (
	"context"
	"errors"
	"io"
	"time"
)

// Host is one connected issue tracker, reached with keygate's own
// account. Every call is bounded by the connector's timeout; a tracker
// that does not answer in time, or answers with a server error, is
// ErrUnavailable. What the account may not see is ErrNotFound, exactly
// as what does not exist: an outside party learns nothing from the
// difference.
type Host interface {
	// Platform names the kind of tracker ("redmine").
	Platform() string
	// Account says who keygate's account is on the tracker and which
	// projects it can see, for an operator's check.
	Account(ctx context.Context) (*Account, error)
	// Issue reads one issue with its public comments and attachments. A
	// private issue is ErrNotFound, whatever the account may see; a
	// private comment is left out.
	Issue(ctx context.Context, id string) (*Issue, error)
	// Project reads one project by its identifier or number.
	Project(ctx context.Context, id string) (*Project, error)
	// AddComment adds a public comment to issue id as keygate's account.
	AddComment(ctx context.Context, issueID, body string) error
	// UpdateField sets field fieldID (by Jira's id: summary,
	// description, duedate, startdate, customfield_N) of issue issueID
	// to value as keygate's account; "" clears a date or custom field.
	// What the tracker refuses is ErrRejected with its reason.
	UpdateField(ctx context.Context, issueID, fieldID, value string) error
	// AddAttachment attaches a file to issue issueID as keygate's
	// account, reading content (size bytes) once.
	AddAttachment(ctx context.Context, issueID, name, contentType string, content io.Reader, size int64) error
	// Search runs query q in project (a query never leaves its project):
	// the issues it matches, limit from offset, with their fields (not
	// their comments or attachments), and how many match in all. With
	// issueID, only that issue if the query matches it. What the tracker
	// cannot run of q (a status it does not have) is ErrRejected.
	Search(ctx context.Context, project string, q *Query, issueID string, offset, limit int) (*IssueList, error)
	// Page reads a page contracts may be made from: "{issueId}" (the
	// issue's subject and description) or "wiki:{project}:{Title}" (a
	// wiki page), with the version it has now. A private issue, or one
	// the account may not see, is ErrNotFound.
	Page(ctx context.Context, ref string) (*Page, error)
	// Download opens the content of attachment id, to be streamed and
	// closed by the caller. The tracker must start answering within the
	// connector's timeout; the content then flows as long as ctx lasts.
	Download(ctx context.Context, id string) (io.ReadCloser, error)
}

// Errors a Host returns, wrapped with what it was doing.
var (
	// ErrNotFound: the item does not exist or the account may not see it.
	ErrNotFound = errors.New("not found on the issue tracker")
	// ErrUnavailable: the tracker did not answer, in time or at all.
	ErrUnavailable = errors.New("the issue tracker did not answer")
	// ErrRejected: the tracker refused what was written (too long, a
	// value it does not take); its reason follows.
	ErrRejected = errors.New("the issue tracker refused the change")
)

// Account is keygate's account on the tracker.
type Account struct {
	Login string `json:"login"`
	Name  string `json:"name"`
	// Admin is set when the account is an administrator of the tracker,
	// which keygate does not need and an operator should avoid.
	Admin    bool      `json:"admin"`
	Projects []Project `json:"projects"`
}

// Check is what the admin API answers to GET /webapi/host and `caddy
// webapi host check` prints: the tracker and what keygate's account is
// on it.
type Check struct {
	Platform string   `json:"platform"`
	Account  *Account `json:"account"`
}

// Project is a project of the tracker.
type Project struct {
	// ID is the project's identifier (Redmine) or key (Jira); Number its
	// numeric id, which a share may name instead.
	ID     string `json:"id"`
	Number string `json:"number"`
	Name   string `json:"name"`
}

// Issue is one issue as a share may show it.
type Issue struct {
	ID      string  `json:"id"`
	Project Project `json:"project"`
	// Fields are the issue's fields by Jira's ids (summary, description,
	// status, ...), in the order a page shows them.
	Fields      []Field      `json:"fields"`
	Comments    []Comment    `json:"comments"`
	Attachments []Attachment `json:"attachments"`
	// Markup names the format of the description and comments:
	// "markdown" (CommonMark) or "textile"; "" is plain text.
	Markup string `json:"markup"`
}

// Page is a page of the tracker as a contract template: its title and
// text, in markup, and where and at which version it was read.
type Page struct {
	// Ref is the page's reference as the tracker names it, whatever
	// spelling found it: "42" for "042", "wiki:acme:NDA" for
	// "wiki:3:nda".
	Ref     string `json:"ref"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	Markup  string `json:"markup"`
	Project string `json:"project"`
	// Version is the page's version (a wiki page's number, an issue's
	// last update), and Source says what was read for a person: "wiki
	// page NDA of project acme, version 3".
	Version string `json:"version"`
	Source  string `json:"source"`
}

// IssueList is one page of the issues a query matches.
type IssueList struct {
	Issues []Issue `json:"issues"`
	Total  int     `json:"total"`
}

// Field returns the field of id and whether the issue has it.
func (i *Issue) Field(id string) (Field, bool) {
	for _, f := range i.Fields {
		if f.ID == id {
			return f, true
		}
	}
	return Field{}, false
}

// Field is one field of an issue with its value as text.
type Field struct {
	// ID is Jira's id of the field: summary, customfield_12, ...
	ID string `json:"id"`
	// Name is the field's name on the tracker, for a person.
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Comment is one public comment of an issue.
type Comment struct {
	ID      string    `json:"id"`
	Author  string    `json:"author"` // the display name
	Created time.Time `json:"created"`
	Body    string    `json:"body"`
}

// Attachment is one file attached to an issue.
type Attachment struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Size        int64     `json:"size"`
	ContentType string    `json:"contentType"`
	Created     time.Time `json:"created"`
}

// The field ids a share may name, as Jira names them, on every platform.
// customfield_N names the tracker's custom field N.
var FieldIDs = []string{
	"summary", "description", "status", "priority", "issuetype", "assignee",
	"reporter", "created", "updated", "duedate", "startdate", "labels",
	"components", "fixVersions", "comment", "attachment",
}
