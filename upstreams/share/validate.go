package share

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
)

// Limits of docs/clients.md, and the ones it leaves open (docs/contributors.md, Choices where the API documents are silent).
const (
	maxIDLength       = 255
	maxPasswordChars  = 256
	maxJQLChars       = 10000
	maxSelectedUsers  = 1000
	maxFieldConfigs   = 1000
	minExpressionDays = 1
	maxExpressionDays = 3650
	dayMillis         = 24 * 60 * 60 * 1000
)

// content is a validated create or update body: what a share holds apart
// from its identity, authorship and counters. Expiration is already
// resolved from expirationExpression.
type content struct {
	Type                 string
	IssueID              string
	ProjectID            string
	Board                *Board
	JQL                  *string
	Password             OptionalString
	Expiration           int64
	ExpirationExpression *ExpirationExpression
	FieldsConfig         *FieldsConfig
	SelectedUsersConfig  *SelectedUsersConfig
}

// validate checks in against every rule of docs/clients.md's create table and
// returns the normalized content with all violations collected in f, so
// that one 400 lists them all. nowMs is the time expirations are measured
// from.
func validate(in *CreateRequest, nowMs int64, f *problem.Fields) content {
	c := content{Type: in.Type, Board: in.Board, JQL: in.JQL, Password: in.Password,
		ExpirationExpression: in.ExpirationExpression}

	typeKnown := true
	switch in.Type {
	case TypeIssue, TypeBoard, TypeJQL, TypeTimeline:
	case "":
		typeKnown = false
		f.Add("type", "required", "type is required")
	default:
		typeKnown = false
		f.Add("type", "invalid", "type must be one of ISSUE, BOARD, JQL, TIMELINE")
	}

	switch {
	case in.IssueID != nil && typeKnown && in.Type != TypeIssue:
		f.Add("issueId", "not_allowed", "issueId is only allowed for type ISSUE")
	case in.IssueID != nil:
		text.CheckID(f, "issueId", *in.IssueID)
		c.IssueID = *in.IssueID
	case in.Type == TypeIssue:
		f.Add("issueId", "required", "issueId is required when type is ISSUE")
	}

	switch {
	case in.ProjectID != nil:
		text.CheckID(f, "projectId", *in.ProjectID)
		c.ProjectID = *in.ProjectID
	case typeKnown && in.Type != TypeIssue:
		f.Add("projectId", "required", "projectId is required when type is "+in.Type)
	}

	if in.Board != nil {
		if typeKnown && in.Type != TypeBoard && in.Type != TypeTimeline {
			f.Add("board", "not_allowed", "board is only allowed for types BOARD and TIMELINE")
		}
		text.CheckID(f, "board.id", in.Board.ID)
	}

	if in.Password.Set && in.Password.Value != nil {
		p := *in.Password.Value
		if n := utf8.RuneCountInString(p); n < 1 || n > maxPasswordChars {
			f.Add("password", "invalid", "password must be 1 to 256 characters")
		}
	}

	if in.Expiration != nil {
		if *in.Expiration <= nowMs {
			f.Add("expiration", "invalid", "expiration must be a time in the future, in epoch milliseconds")
		}
		c.Expiration = *in.Expiration
	}
	if in.ExpirationExpression != nil {
		d := in.ExpirationExpression.Days
		switch {
		case in.Expiration != nil:
			f.Add("expirationExpression", "not_allowed", "expirationExpression cannot be sent together with expiration")
		case d < minExpressionDays || d > maxExpressionDays:
			f.Add("expirationExpression.days", "out_of_range", "expirationExpression.days must be 1 to 3650")
		default:
			c.Expiration = nowMs + int64(d)*dayMillis
		}
	}

	if in.JQL != nil {
		if typeKnown && in.Type != TypeJQL {
			f.Add("jql", "not_allowed", "jql is only allowed for type JQL")
		}
		if utf8.RuneCountInString(*in.JQL) > maxJQLChars {
			f.Add("jql", "too_long", "jql must be at most 10000 characters")
		}
	}

	c.FieldsConfig = validateFields(in.FieldsConfig, in.CustomFields, f)
	c.SelectedUsersConfig = validateSelectedUsers(in.SelectedUsersConfig, f)
	return c
}

// validateFields checks fieldsConfig and the older customFields and merges
// them into one fieldsConfig. A customFields id already in fieldsConfig
// keeps the permissions fieldsConfig gives it. Permissions are stored once
// each, in the API's order.
func validateFields(fc *FieldsConfig, custom []CustomField, f *problem.Fields) *FieldsConfig {
	if fc == nil && custom == nil {
		return nil
	}
	out := &FieldsConfig{FieldConfigs: map[string]FieldConfig{}}
	if fc != nil {
		ids := make([]string, 0, len(fc.FieldConfigs))
		for id := range fc.FieldConfigs {
			ids = append(ids, id)
		}
		slices.Sort(ids) // report violations in a stable order
		for _, id := range ids {
			path := "fieldsConfig.fieldConfigs." + id
			if !text.PrintableASCII(id, maxIDLength) {
				f.Add(path, "invalid", "field identifiers must be 1 to 255 printable US-ASCII characters")
				continue
			}
			perms := fc.FieldConfigs[id].FieldPermissions
			seen := make(map[string]bool, len(perms))
			for i, p := range perms {
				if !slices.Contains(permissionOrder, p) {
					f.Add(path+".fieldPermissions["+strconv.Itoa(i)+"]", "invalid",
						"a field permission must be one of VIEW, VIEW_CONTENT, ADD, EDIT")
					continue
				}
				seen[p] = true
			}
			kept := []string{}
			for _, p := range permissionOrder {
				if seen[p] {
					kept = append(kept, p)
				}
			}
			out.FieldConfigs[id] = FieldConfig{FieldPermissions: kept}
		}
	}
	for i, cf := range custom {
		path := "customFields[" + strconv.Itoa(i) + "].id"
		if cf.ID == "" {
			f.Add(path, "required", path+" is required")
			continue
		}
		if !text.PrintableASCII(cf.ID, maxIDLength) {
			f.Add(path, "invalid", "field identifiers must be 1 to 255 printable US-ASCII characters")
			continue
		}
		if _, ok := out.FieldConfigs[cf.ID]; !ok {
			out.FieldConfigs[cf.ID] = FieldConfig{FieldPermissions: []string{PermView}}
		}
	}
	if len(out.FieldConfigs) > maxFieldConfigs {
		f.Add("fieldsConfig.fieldConfigs", "too_many", "at most 1000 fields may be shared")
	}
	return out
}

// validateSelectedUsers checks every e-mail of the list. A share limited to
// selected users with nobody on the list could never be opened, so that is
// refused too.
func validateSelectedUsers(su *SelectedUsersConfig, f *problem.Fields) *SelectedUsersConfig {
	if su == nil {
		return nil
	}
	out := &SelectedUsersConfig{Allowed: su.Allowed, AllowedNotification: su.AllowedNotification,
		List: make([]SelectedUser, 0, len(su.List))}
	if len(su.List) > maxSelectedUsers {
		f.Add("selectedUsersConfig.list", "too_many", "selectedUsersConfig.list holds at most 1000 users")
	}
	if su.Allowed && len(su.List) == 0 {
		f.Add("selectedUsersConfig.list", "required", "selectedUsersConfig.list needs at least one e-mail when allowed is true")
	}
	seen := make(map[string]bool, len(su.List))
	for i, u := range su.List {
		path := "selectedUsersConfig.list[" + strconv.Itoa(i) + "].email"
		switch {
		case u.Email == "":
			f.Add(path, "required", path+" is required")
		case !text.Email(u.Email):
			f.Add(path, "invalid", path+" must be a valid e-mail address")
		case seen[strings.ToLower(u.Email)]:
			f.Add(path, "duplicate", path+" is already on the list")
		default:
			seen[strings.ToLower(u.Email)] = true
		}
		out.List = append(out.List, SelectedUser{Email: u.Email})
	}
	return out
}
