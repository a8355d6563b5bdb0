package share

import "encoding/json"

// The four share types of the API.
const (
	TypeIssue    = "ISSUE"
	TypeBoard    = "BOARD"
	TypeJQL      = "JQL"
	TypeTimeline = "TIMELINE"
)

// The share statuses of docs/clients.md, computed when a share is read so that an
// expiration takes effect without a background job.
const (
	StatusActive  = "ACTIVE"
	StatusExpired = "EXPIRED"
)

// The field permissions of the API's fieldsConfig, in the order a stored
// share lists them.
const (
	PermView        = "VIEW"
	PermViewContent = "VIEW_CONTENT"
	PermAdd         = "ADD"
	PermEdit        = "EDIT"
)

// permissionOrder is the canonical order of stored permissions.
var permissionOrder = []string{PermView, PermViewContent, PermAdd, PermEdit}

// Board selects a board of the shared project.
type Board struct {
	ID string `json:"id"`
}

// ExpirationExpression sets the expiration a number of days after the
// share is created or updated.
type ExpirationExpression struct {
	Days int `json:"days"`
}

// FieldConfig holds the permissions of one shared field; an omitted
// permission is disabled.
type FieldConfig struct {
	FieldPermissions []string `json:"fieldPermissions"`
}

// FieldsConfig is the API's fieldsConfig: field identifier to permissions.
type FieldsConfig struct {
	FieldConfigs map[string]FieldConfig `json:"fieldConfigs"`
}

// SelectedUser is one outside party allowed to open a share.
type SelectedUser struct {
	Email string `json:"email"`
}

// SelectedUsersConfig limits a share to listed e-mail addresses when
// Allowed is true.
type SelectedUsersConfig struct {
	Allowed             bool           `json:"allowed"`
	AllowedNotification bool           `json:"allowedNotification"`
	List                []SelectedUser `json:"list"`
}

// CustomField is the older form of a shared field: {"id": ...}, read as a
// fieldsConfig entry with VIEW.
type CustomField struct {
	ID string `json:"id"`
}

// OptionalString tells an absent JSON member (Set false) from null (Set
// true, Value nil) and from a string. Update needs the three: absent keeps
// the password, null removes it, a string replaces it.
type OptionalString struct {
	Set   bool
	Value *string
}

// UnmarshalJSON is called only for a member that is present.
func (o *OptionalString) UnmarshalJSON(b []byte) error {
	o.Set = true
	o.Value = nil
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		// A *json.UnmarshalTypeError, which the decoder names with the
		// field's path.
		return err
	}
	o.Value = &s
	return nil
}

// MarshalJSON writes null or the string, so a request can be logged or
// replayed.
func (o OptionalString) MarshalJSON() ([]byte, error) {
	if o.Value == nil {
		return []byte("null"), nil
	}
	return json.Marshal(*o.Value)
}

// Password returns an OptionalString holding s, for Go callers of
// Store.Create and Store.Update.
func Password(s string) OptionalString { return OptionalString{Set: true, Value: &s} }

// CreateRequest is the share create body of the API; update takes the
// same body.
type CreateRequest struct {
	Type                 string                `json:"type"`
	IssueID              *string               `json:"issueId"`
	ProjectID            *string               `json:"projectId"`
	Board                *Board                `json:"board"`
	Password             OptionalString        `json:"password"`
	Expiration           *int64                `json:"expiration"`
	ExpirationExpression *ExpirationExpression `json:"expirationExpression"`
	JQL                  *string               `json:"jql"`
	FieldsConfig         *FieldsConfig         `json:"fieldsConfig"`
	SelectedUsersConfig  *SelectedUsersConfig  `json:"selectedUsersConfig"`
	CustomFields         []CustomField         `json:"customFields"`
}

// Share is the share record of docs/clients.md as get, list, create and update
// return it. Fields without a value are null; the password never leaves
// the store.
type Share struct {
	ID                   uint64                `json:"id"`
	UUID                 string                `json:"uuid"`
	Type                 string                `json:"type"`
	IssueID              *string               `json:"issueId"`
	ProjectID            *string               `json:"projectId"`
	Board                *Board                `json:"board"`
	JQL                  *string               `json:"jql"`
	PasswordProtected    bool                  `json:"passwordProtected"`
	Expiration           *int64                `json:"expiration"`
	ExpirationExpression *ExpirationExpression `json:"expirationExpression"`
	FieldsConfig         *FieldsConfig         `json:"fieldsConfig"`
	SelectedUsersConfig  *SelectedUsersConfig  `json:"selectedUsersConfig"`
	CreatedBy            string                `json:"createdBy"`
	CreatedAt            int64                 `json:"createdAt"`
	UpdatedBy            string                `json:"updatedBy"`
	UpdatedAt            int64                 `json:"updatedAt"`
	Status               string                `json:"status"`
	OpenedCount          int64                 `json:"openedCount"`
	URL                  string                `json:"url"`
}

// The activity actions of docs/clients.md.
const (
	ActionCreated      = "created"
	ActionUpdated      = "updated"
	ActionViewed       = "viewed"
	ActionUnlockFailed = "unlock-failed"
)

// activitySource is the source every share activity entry carries.
const activitySource = "share"

// Activity is one entry of a share's activity, newest first in replies.
// User is the key owner for API actions; Email is the outside party's
// address for page actions; each is null when it does not apply.
type Activity struct {
	Timestamp int64   `json:"timestamp"`
	Source    string  `json:"source"`
	Action    string  `json:"action"`
	User      *string `json:"user"`
	Email     *string `json:"email"`
	IP        *string `json:"ip"`
}

// Record is a share as stored: the reply's fields without the computed
// ones (status, url), plus the password hash.
type Record struct {
	ID                   uint64                `json:"id"`
	UUID                 string                `json:"uuid"`
	Type                 string                `json:"type"`
	IssueID              string                `json:"issueId,omitempty"`
	ProjectID            string                `json:"projectId,omitempty"`
	Board                *Board                `json:"board,omitempty"`
	JQL                  *string               `json:"jql,omitempty"`
	PasswordHash         string                `json:"passwordHash,omitempty"`
	Expiration           int64                 `json:"expiration,omitempty"`
	ExpirationExpression *ExpirationExpression `json:"expirationExpression,omitempty"`
	FieldsConfig         *FieldsConfig         `json:"fieldsConfig,omitempty"`
	SelectedUsersConfig  *SelectedUsersConfig  `json:"selectedUsersConfig,omitempty"`
	CreatedBy            string                `json:"createdBy"`
	CreatedAt            int64                 `json:"createdAt"`
	UpdatedBy            string                `json:"updatedBy"`
	UpdatedAt            int64                 `json:"updatedAt"`
	OpenedCount          int64                 `json:"openedCount"`
}

// expired reports whether the share's expiration has passed at nowMs.
func (r *Record) expired(nowMs int64) bool { return r.Expiration != 0 && nowMs >= r.Expiration }

// gated reports whether an outside party must unlock the share first.
func (r *Record) gated() bool { return r.PasswordHash != "" || r.selectedOnly() }

// selectedOnly reports whether the share is limited to listed e-mails.
func (r *Record) selectedOnly() bool {
	return r.SelectedUsersConfig != nil && r.SelectedUsersConfig.Allowed
}

// toShare builds the reply record. pendingViews are openings counted in
// memory and not yet flushed (see views.go).
func (r *Record) toShare(baseURL string, nowMs, pendingViews int64) *Share {
	s := &Share{
		ID:                   r.ID,
		UUID:                 r.UUID,
		Type:                 r.Type,
		IssueID:              nonEmpty(r.IssueID),
		ProjectID:            nonEmpty(r.ProjectID),
		Board:                r.Board,
		JQL:                  r.JQL,
		PasswordProtected:    r.PasswordHash != "",
		ExpirationExpression: r.ExpirationExpression,
		FieldsConfig:         r.FieldsConfig,
		SelectedUsersConfig:  r.SelectedUsersConfig,
		CreatedBy:            r.CreatedBy,
		CreatedAt:            r.CreatedAt,
		UpdatedBy:            r.UpdatedBy,
		UpdatedAt:            r.UpdatedAt,
		Status:               StatusActive,
		OpenedCount:          r.OpenedCount + pendingViews,
		URL:                  baseURL + "/s/" + r.UUID,
	}
	if r.Expiration != 0 {
		exp := r.Expiration
		s.Expiration = &exp
	}
	if r.expired(nowMs) {
		s.Status = StatusExpired
	}
	return s
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
