package caddymodule_test

// Integration tests of the External Share API and the public share page
// through the real stack: Caddy in-process, webapi_auth share,
// webapi_share, webapi_share_viewer, the bbolt store. The upstreams/share
// unit tests cover the edge cases; these prove each rule as a client of the
// gateway sees it.

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

const shrURL = "/webapi/share"

var shrAllPrivileges = []string{"get", "list", "create", "delete"}

// shrKey makes a share key of owner; admin are its adminProjects.
func shrKey(t *testing.T, owner string, admin []string, privileges ...string) string {
	t.Helper()
	body := map[string]any{"service": "share", "name": owner + " " + strings.Join(privileges, ","), "owner": owner, "privileges": privileges}
	if admin != nil {
		body["adminProjects"] = admin
	}
	return createKey(t, body).Token
}

// shrShare is the share record as a client decodes it.
type shrShare struct {
	ID                   uint64
	UUID                 string
	Type                 string
	IssueID              *string
	ProjectID            *string
	Board                *struct{ ID string }
	JQL                  *string
	PasswordProtected    bool
	Expiration           *int64
	ExpirationExpression *struct{ Days int }
	FieldsConfig         *struct {
		FieldConfigs map[string]struct{ FieldPermissions []string }
	}
	SelectedUsersConfig *struct {
		Allowed, AllowedNotification bool
		List                         []struct{ Email string }
	}
	CreatedBy   string
	CreatedAt   int64
	UpdatedBy   string
	UpdatedAt   int64
	Status      string
	OpenedCount int64
	URL         string
}

type shrActivity struct {
	Timestamp int64
	Source    string
	Action    string
	User      *string
	Email     *string
	IP        *string
}

// shrRecordKeys are every member of the share record: all present, null
// when without value.
var shrRecordKeys = []string{"board", "createdAt", "createdBy", "expiration", "expirationExpression", "fieldsConfig", "id", "issueId",
	"jql", "openedCount", "passwordProtected", "projectId", "selectedUsersConfig", "status", "type", "updatedAt", "updatedBy", "url", "uuid"}

func shrCreate(t *testing.T, token string, body any) (shrShare, response) {
	t.Helper()
	r := do(t, "POST", siteURL+shrURL, body, bearer(token)...)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var s shrShare
	r.json(t, &s)
	return s, r
}

func shrGet(t *testing.T, token, uuid string) shrShare {
	t.Helper()
	r := do(t, "GET", siteURL+shrURL+"/"+uuid, nil, bearer(token)...)
	if r.status != http.StatusOK {
		t.Fatalf("get %s: %d %s", uuid, r.status, r.body)
	}
	var s shrShare
	r.json(t, &s)
	return s
}

func shrActivities(t *testing.T, token, uuid, query string) []shrActivity {
	t.Helper()
	r := do(t, "GET", siteURL+shrURL+"/"+uuid+"/activity"+query, nil, bearer(token)...)
	if r.status != http.StatusOK {
		t.Fatalf("activity %s: %d %s", uuid, r.status, r.body)
	}
	var out []shrActivity
	r.json(t, &out)
	return out
}

func shrList(t *testing.T, token, query string) ([]shrShare, int) {
	t.Helper()
	r := do(t, "GET", siteURL+shrURL+"?"+query, nil, bearer(token)...)
	if r.status != http.StatusOK {
		t.Fatalf("list %s: %d %s", query, r.status, r.body)
	}
	if strings.TrimSpace(string(r.body)) == "null" {
		t.Fatalf("list %s answers null, not an array", query)
	}
	var out []shrShare
	r.json(t, &out)
	total, err := strconv.Atoi(r.header.Get("X-Total-Count"))
	if err != nil {
		t.Fatalf("list %s: X-Total-Count %q", query, r.header.Get("X-Total-Count"))
	}
	return out, total
}

func shrUUIDs(list []shrShare) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.UUID
	}
	return out
}

func shrSorted(uuids ...string) []string {
	out := slices.Clone(uuids)
	sort.Strings(out)
	return out
}

// shrStr shows an optional string, "<nil>" for null.
func shrStr(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

// shrOr0 is an optional string with null as "".
func shrOr0(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func TestShareCreate(t *testing.T) { eachBackend(t, testShareCreate) }

func testShareCreate(t *testing.T, b backend) {
	startGateway(t, b, defaultSite)
	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	future := time.Now().Add(72*time.Hour).UnixMilli() + 123

	tests := []struct {
		name  string
		body  map[string]any
		check func(t *testing.T, s shrShare)
	}{
		{"ISSUE with password, fields, selected users and an expression", map[string]any{
			"type": "ISSUE", "issueId": "10001", "projectId": "P1", "password": "s3cret-Pässword",
			"expirationExpression": map[string]any{"days": 30},
			"fieldsConfig":         map[string]any{"fieldConfigs": map[string]any{"summary": map[string]any{"fieldPermissions": []string{"EDIT", "VIEW", "VIEW"}}}},
			"selectedUsersConfig":  map[string]any{"allowed": true, "allowedNotification": false, "list": []map[string]string{{"email": "a@example.com"}}},
		}, func(t *testing.T, s shrShare) {
			if shrStr(s.IssueID) != "10001" || shrStr(s.ProjectID) != "P1" || !s.PasswordProtected || s.Board != nil || s.JQL != nil {
				t.Errorf("%+v", s)
			}
			if s.Expiration == nil || *s.Expiration != s.CreatedAt+30*24*3600*1000 || s.ExpirationExpression == nil || s.ExpirationExpression.Days != 30 {
				t.Errorf("expiration %v from expression %v, created %d", s.Expiration, s.ExpirationExpression, s.CreatedAt)
			}
			if s.FieldsConfig == nil || !slices.Equal(s.FieldsConfig.FieldConfigs["summary"].FieldPermissions, []string{"VIEW", "EDIT"}) {
				t.Errorf("fieldsConfig %+v", s.FieldsConfig)
			}
			if s.SelectedUsersConfig == nil || !s.SelectedUsersConfig.Allowed || len(s.SelectedUsersConfig.List) != 1 || s.SelectedUsersConfig.List[0].Email != "a@example.com" {
				t.Errorf("selectedUsersConfig %+v", s.SelectedUsersConfig)
			}
		}},
		{"BOARD with an expiration", map[string]any{"type": "BOARD", "projectId": "P2", "board": map[string]any{"id": "5"}, "expiration": future},
			func(t *testing.T, s shrShare) {
				if s.IssueID != nil || shrStr(s.ProjectID) != "P2" || s.Board == nil || s.Board.ID != "5" || s.PasswordProtected ||
					s.Expiration == nil || *s.Expiration != future || s.ExpirationExpression != nil || s.FieldsConfig != nil {
					t.Errorf("%+v", s)
				}
			}},
		{"JQL", map[string]any{"type": "JQL", "projectId": "P1", "jql": "project = DEMO AND status = Open"},
			func(t *testing.T, s shrShare) {
				if shrStr(s.JQL) != "project = DEMO AND status = Open" || shrStr(s.ProjectID) != "P1" || s.Board != nil || s.Expiration != nil {
					t.Errorf("%+v", s)
				}
			}},
		{"TIMELINE with the older customFields", map[string]any{"type": "TIMELINE", "projectId": "P3", "board": map[string]any{"id": "7"},
			"customFields": []map[string]string{{"id": "customfield_10010"}}},
			func(t *testing.T, s shrShare) {
				if s.Board == nil || s.Board.ID != "7" || s.FieldsConfig == nil ||
					!slices.Equal(s.FieldsConfig.FieldConfigs["customfield_10010"].FieldPermissions, []string{"VIEW"}) {
					t.Errorf("%+v", s)
				}
			}},
	}
	var lastID uint64
	var made []string
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, r := shrCreate(t, alice, tc.body)
			if loc := r.header.Get("Location"); loc != shrURL+"/"+s.UUID || s.UUID == "" {
				t.Errorf("Location %q for uuid %q", loc, s.UUID)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			raw := kgObject(t, r)
			var keys []string
			for k := range raw {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if !slices.Equal(keys, shrRecordKeys) {
				t.Errorf("record members %v, want %v", keys, shrRecordKeys)
			}
			body := string(r.body)
			if strings.Contains(body, "s3cret") || strings.Contains(strings.ToLower(body), "argon") || strings.Contains(body, `"password"`) {
				t.Errorf("the password shows: %s", body)
			}
			if s.Type != tc.body["type"] || s.ID <= lastID || s.CreatedBy != "alice" || s.UpdatedBy != "alice" || s.CreatedAt == 0 ||
				s.UpdatedAt != s.CreatedAt || s.Status != "ACTIVE" || s.OpenedCount != 0 || s.URL != siteURL+"/s/"+s.UUID {
				t.Errorf("record %s", body)
			}
			lastID = s.ID
			tc.check(t, s)

			got := do(t, "GET", siteURL+shrURL+"/"+s.UUID, nil, bearer(alice)...)
			if got.status != 200 || !reflect.DeepEqual(kgObject(t, got), raw) {
				t.Errorf("get after create: %d %s\nwant %s", got.status, got.body, r.body)
			}
			acts := shrActivities(t, alice, s.UUID, "")
			if len(acts) != 1 || acts[0].Action != "created" || acts[0].Source != "share" || shrStr(acts[0].User) != "alice" ||
				acts[0].Email != nil || shrStr(acts[0].IP) != "127.0.0.1" || acts[0].Timestamp != s.CreatedAt {
				t.Errorf("activity %+v", acts)
			}
			made = append(made, s.UUID)
		})
	}
	count := func() int {
		_, n := shrList(t, alice, "userId=alice")
		return n
	}
	if n := count(); n != len(made) {
		t.Fatalf("%d shares listed, %d made", n, len(made))
	}

	many := map[string]any{
		"type": "BOARD", "issueId": "1", "board": map[string]any{"id": ""}, "password": "",
		"expiration": time.Now().Add(-time.Hour).UnixMilli(), "expirationExpression": map[string]any{"days": 5},
		"jql": "x",
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{
			"summary":  map[string]any{"fieldPermissions": []string{"VIEW", "DELETE"}},
			"bad id é": map[string]any{"fieldPermissions": []string{"VIEW"}},
		}},
		"selectedUsersConfig": map[string]any{"allowed": true, "list": []map[string]string{{"email": "nope"}, {"email": ""}, {"email": "Bob <b@example.com>"}}},
		"customFields":        []map[string]string{{"id": ""}},
	}
	refusals := []struct {
		name, contentType, query string
		body                     any
		status                   int
		code                     string
		fields                   []string
	}{
		{name: "every violation listed", body: many, status: 400, code: "invalid_request", fields: []string{
			"board.id:required", "customFields[0].id:required", "expiration:invalid", "expirationExpression:not_allowed",
			"fieldsConfig.fieldConfigs.bad id é:invalid", "fieldsConfig.fieldConfigs.summary.fieldPermissions[1]:invalid",
			"issueId:not_allowed", "jql:not_allowed", "password:invalid", "projectId:required",
			"selectedUsersConfig.list[0].email:invalid", "selectedUsersConfig.list[1].email:required", "selectedUsersConfig.list[2].email:invalid",
		}},
		{name: "no type", body: map[string]any{}, status: 400, code: "invalid_request", fields: []string{"type:required"}},
		{name: "unknown type", body: map[string]any{"type": "PAGE", "projectId": "P1"}, status: 400, code: "invalid_request", fields: []string{"type:invalid"}},
		{name: "ISSUE without issueId", body: map[string]any{"type": "ISSUE", "board": map[string]any{"id": "1"}}, status: 400, code: "invalid_request",
			fields: []string{"board:not_allowed", "issueId:required"}},
		{name: "TIMELINE without project, JQL too long", body: map[string]any{"type": "JQL", "jql": strings.Repeat("j", 10001)}, status: 400, code: "invalid_request",
			fields: []string{"jql:too_long", "projectId:required"}},
		{name: "expression out of range", body: map[string]any{"type": "JQL", "projectId": "P", "expirationExpression": map[string]any{"days": 3651}},
			status: 400, code: "invalid_request", fields: []string{"expirationExpression.days:out_of_range"}},
		{name: "password too long", body: map[string]any{"type": "ISSUE", "issueId": "1", "password": strings.Repeat("ü", 257)},
			status: 400, code: "invalid_request", fields: []string{"password:invalid"}},
		{name: "unknown field", body: map[string]any{"type": "ISSUE", "issueId": "1", "color": "red"}, status: 400, code: "invalid_request", fields: []string{"color:unknown_field"}},
		{name: "query parameter", query: "?notify=1", body: map[string]any{"type": "ISSUE", "issueId": "1"}, status: 400, code: "invalid_request", fields: []string{"notify:unknown_parameter"}},
		{name: "malformed JSON", body: `{"type":`, status: 400, code: "invalid_request"},
		{name: "not JSON", contentType: "text/plain", body: map[string]any{"type": "ISSUE", "issueId": "1"}, status: 415, code: "unsupported_media_type"},
		{name: "over 1 MiB", body: `{"type":"JQL","projectId":"P","jql":"` + strings.Repeat("j", 1<<20) + `"}`, status: 413, code: "payload_too_large"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			raw, ok := tc.body.(string)
			if !ok {
				b, err := json.Marshal(tc.body)
				if err != nil {
					t.Fatal(err)
				}
				raw = string(b)
			}
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			r := kgSend(t, nil, "POST", siteURL+shrURL+tc.query, ct, []byte(raw), bearer(alice)...)
			p := kgWantProblem(t, r, tc.status, tc.code)
			if got := kgFieldCodes(t, p); tc.fields != nil && !slices.Equal(got, tc.fields) {
				t.Errorf("fields\n got %v\nwant %v", got, tc.fields)
			}
			if n := count(); n != len(made) {
				t.Errorf("a refused create stored a share: %d listed", n)
			}
		})
	}
}

func TestShareUpdateDelete(t *testing.T) { eachBackend(t, testShareUpdateDelete) }

func testShareUpdateDelete(t *testing.T, b backend) {
	startGateway(t, b, defaultSite)
	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	root := shrKey(t, "root", []string{"*"}, shrAllPrivileges...)
	bob := shrKey(t, "bob", []string{"P2"}, shrAllPrivileges...)
	carol := shrKey(t, "carol", nil, shrAllPrivileges...)

	orig, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "P1", "password": "first",
		"expirationExpression": map[string]any{"days": 10},
		"selectedUsersConfig":  map[string]any{"allowed": false, "list": []map[string]string{{"email": "a@example.com"}}}})
	path := siteURL + shrURL + "/" + orig.UUID
	unlock := func(password string) int {
		return kgSend(t, nil, "POST", siteURL+"/s/"+orig.UUID+"/unlock", "application/json", []byte(`{"password":"`+password+`"}`)).status
	}
	if st := unlock("first"); st != 204 {
		t.Fatalf("unlock with the first password: %d", st)
	}

	t.Run("absent password keeps it, other fields replaced as sent", func(t *testing.T) {
		r := do(t, "PUT", path, map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "P1",
			"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{"description": map[string]any{"fieldPermissions": []string{"VIEW_CONTENT"}}}}},
			bearer(root)...)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var s shrShare
		r.json(t, &s)
		if !s.PasswordProtected || s.CreatedBy != "alice" || s.UpdatedBy != "root" || s.UpdatedAt < s.CreatedAt || s.CreatedAt != orig.CreatedAt ||
			s.ID != orig.ID || s.UUID != orig.UUID || s.Expiration != nil || s.ExpirationExpression != nil || s.SelectedUsersConfig != nil ||
			s.FieldsConfig == nil || !slices.Equal(s.FieldsConfig.FieldConfigs["description"].FieldPermissions, []string{"VIEW_CONTENT"}) {
			t.Errorf("%s", r.body)
		}
		if strings.Contains(string(r.body), "first") {
			t.Errorf("the password shows: %s", r.body)
		}
		if got := do(t, "GET", path, nil, bearer(alice)...); !reflect.DeepEqual(kgObject(t, got), kgObject(t, r)) {
			t.Errorf("stored %s\nreplied %s", got.body, r.body)
		}
		if st := unlock("first"); st != 204 {
			t.Errorf("the kept password no longer unlocks: %d", st)
		}
	})

	t.Run("a string replaces the password", func(t *testing.T) {
		r := do(t, "PUT", path, map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "P1", "password": "second"}, bearer(alice)...)
		var s shrShare
		r.json(t, &s)
		if r.status != 200 || !s.PasswordProtected || s.UpdatedBy != "alice" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if st := unlock("first"); st != 401 {
			t.Errorf("the old password unlocks: %d", st)
		}
		if st := unlock("second"); st != 204 {
			t.Errorf("the new password does not unlock: %d", st)
		}
	})

	t.Run("null removes the password", func(t *testing.T) {
		r := kgSend(t, nil, "PUT", path, "application/json", []byte(`{"type":"ISSUE","issueId":"10001","projectId":"P1","password":null}`), bearer(alice)...)
		var s shrShare
		r.json(t, &s)
		if r.status != 200 || s.PasswordProtected {
			t.Fatalf("%d %s", r.status, r.body)
		}
		// HEAD: the page opens, and is not counted as an opening.
		if r := do(t, "HEAD", siteURL+"/s/"+orig.UUID, nil, "Accept", "application/json"); r.status != 200 {
			t.Errorf("the page still asks for a password: %d", r.status)
		}
		if got := shrGet(t, alice, orig.UUID); got.PasswordProtected {
			t.Errorf("stored share still protected")
		}
	})

	t.Run("refused updates change nothing", func(t *testing.T) {
		before := do(t, "GET", path, nil, bearer(alice)...).body
		tests := []struct {
			name   string
			token  string
			url    string
			ct     string
			body   string
			status int
			code   string
			fields []string
		}{
			{"type cannot change", alice, path, "", `{"type":"JQL","projectId":"P1","jql":"x"}`, 400, "invalid_request", []string{"issueId:immutable", "type:immutable"}},
			{"issueId cannot change", alice, path, "", `{"type":"ISSUE","issueId":"10002","projectId":"P1"}`, 400, "invalid_request", []string{"issueId:immutable"}},
			{"projectId cannot change", alice, path, "", `{"type":"ISSUE","issueId":"10001","projectId":"P2"}`, 400, "invalid_request", []string{"projectId:immutable"}},
			{"projectId cannot go", alice, path, "", `{"type":"ISSUE","issueId":"10001"}`, 400, "invalid_request", []string{"projectId:immutable"}},
			{"violations listed with immutables", alice, path, "", `{"type":"ISSUE","issueId":"10001","projectId":"P9","password":"","expiration":1}`, 400, "invalid_request",
				[]string{"expiration:invalid", "password:invalid", "projectId:immutable"}},
			{"unknown field", alice, path, "", `{"type":"ISSUE","issueId":"10001","projectId":"P1","owner":"x"}`, 400, "invalid_request", []string{"owner:unknown_field"}},
			{"not JSON", alice, path, "text/plain", `{"type":"ISSUE","issueId":"10001","projectId":"P1"}`, 415, "unsupported_media_type", nil},
			{"a share the caller cannot see", carol, path, "", `{"type":"ISSUE","issueId":"10001","projectId":"P1"}`, 404, "not_found", nil},
			{"admin of another project", bob, path, "", `{"type":"ISSUE","issueId":"10001","projectId":"P1"}`, 404, "not_found", nil},
			{"unknown share", alice, siteURL + shrURL + "/9b2f3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d", "", `{"type":"ISSUE","issueId":"10001"}`, 404, "not_found", nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				ct := tc.ct
				if ct == "" {
					ct = "application/json"
				}
				r := kgSend(t, nil, "PUT", tc.url, ct, []byte(tc.body), bearer(tc.token)...)
				p := kgWantProblem(t, r, tc.status, tc.code)
				if got := kgFieldCodes(t, p); tc.fields != nil && !slices.Equal(got, tc.fields) {
					t.Errorf("fields %v, want %v", got, tc.fields)
				}
				if after := do(t, "GET", path, nil, bearer(alice)...).body; string(after) != string(before) {
					t.Errorf("a refused update changed the share:\n%s\n%s", before, after)
				}
			})
		}
	})

	t.Run("activity, newest first, paged", func(t *testing.T) {
		acts := shrActivities(t, alice, orig.UUID, "")
		var actions, users []string
		for _, a := range acts {
			actions = append(actions, a.Action)
			users = append(users, shrStr(a.User))
			if a.Source != "share" || shrStr(a.IP) != "127.0.0.1" {
				t.Errorf("entry %+v", a)
			}
		}
		// The old password tried after the change left an unlock-failed.
		if strings.Join(actions, ",") != "updated,unlock-failed,updated,updated,created" || strings.Join(users, ",") != "alice,<nil>,alice,root,alice" {
			t.Fatalf("actions %v by %v", actions, users)
		}
		for i := 1; i < len(acts); i++ {
			if acts[i].Timestamp > acts[i-1].Timestamp {
				t.Errorf("not newest first: %+v", acts)
			}
		}
		if page := shrActivities(t, root, orig.UUID, "?limit=2&offset=1"); len(page) != 2 || !reflect.DeepEqual(page, acts[1:3]) {
			t.Errorf("limit 2 offset 1: %+v", page)
		}
		if page := shrActivities(t, alice, orig.UUID, "?offset=10"); len(page) != 0 {
			t.Errorf("past the end: %+v", page)
		}
		p := kgWantProblem(t, do(t, "GET", path+"/activity?limit=0&offset=-1&since=1", nil, bearer(alice)...), 400, "invalid_request")
		if got := kgFieldCodes(t, p); !slices.Equal(got, []string{"limit:out_of_range", "offset:out_of_range", "since:unknown_parameter"}) {
			t.Errorf("fields %v", got)
		}
		kgWantProblem(t, do(t, "GET", path+"/activity", nil, bearer(carol)...), 404, "not_found")
	})

	t.Run("delete", func(t *testing.T) {
		tests := []struct {
			name, token, url string
			status           int
			code             string
		}{
			{"a share the caller cannot see", carol, path, 404, "not_found"},
			{"admin of another project", bob, path, 404, "not_found"},
			{"unknown share", alice, siteURL + shrURL + "/9b2f3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d", 404, "not_found"},
			{"malformed uuid", alice, siteURL + shrURL + "/not-a-uuid", 404, "not_found"},
			{"upper-case uuid", alice, siteURL + shrURL + "/" + strings.ToUpper(orig.UUID), 404, "not_found"},
			{"a query parameter", alice, path + "?force=true", 400, "invalid_request"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := do(t, "DELETE", tc.url, nil, bearer(tc.token)...)
				kgWantProblem(t, r, tc.status, tc.code) // a problem JSON body whose detail says what went wrong
				shrGet(t, alice, orig.UUID)
			})
		}
		r := do(t, "DELETE", path, nil, bearer(root)...)
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("delete: %d %q", r.status, r.body)
		}
		kgWantProblem(t, do(t, "GET", path, nil, bearer(alice)...), 404, "not_found")
		kgWantProblem(t, do(t, "GET", path+"/activity", nil, bearer(alice)...), 404, "not_found")
		kgWantProblem(t, do(t, "PUT", path, map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "P1"}, bearer(alice)...), 404, "not_found")
		p := kgWantProblem(t, do(t, "DELETE", path, nil, bearer(alice)...), 404, "not_found")
		if !strings.Contains(p.Detail, "share") {
			t.Errorf("detail %q does not say what went wrong", p.Detail)
		}
		if r := do(t, "GET", siteURL+"/s/"+orig.UUID, nil, "Accept", "application/json"); r.status != 404 {
			t.Errorf("public page of a deleted share: %d", r.status)
		}
		if list, n := shrList(t, root, ""); n != 0 || len(list) != 0 {
			t.Errorf("list after delete: %d %v", n, shrUUIDs(list))
		}
	})
}

func TestShareList(t *testing.T) { eachBackend(t, testShareList) }

func testShareList(t *testing.T, b backend) {
	startGateway(t, b, defaultSite)
	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	bob := shrKey(t, "bob", []string{"P1"}, shrAllPrivileges...)
	carol := shrKey(t, "carol", nil, shrAllPrivileges...)
	root := shrKey(t, "root", []string{"*"}, shrAllPrivileges...)
	soon := time.Now().Add(24 * time.Hour).UnixMilli()

	mk := func(token string, body map[string]any) string {
		s, _ := shrCreate(t, token, body)
		return s.UUID
	}
	aIssueP1 := mk(alice, map[string]any{"type": "ISSUE", "issueId": "I-1", "projectId": "P1", "expiration": soon + 5000})
	aIssueNoProject := mk(alice, map[string]any{"type": "ISSUE", "issueId": "I-2"})
	aBoardP2 := mk(alice, map[string]any{"type": "BOARD", "projectId": "P2", "board": map[string]any{"id": "9"}, "expiration": soon})
	bJQLP1 := mk(bob, map[string]any{"type": "JQL", "projectId": "P1", "jql": "x"})
	bTimelineP3 := mk(bob, map[string]any{"type": "TIMELINE", "projectId": "P3", "expiration": soon})
	cBoardP1 := mk(carol, map[string]any{"type": "BOARD", "projectId": "P1"})
	cIssueP4 := mk(carol, map[string]any{"type": "ISSUE", "issueId": "I-1", "projectId": "P4"})
	all := []string{aIssueP1, aIssueNoProject, aBoardP2, bJQLP1, bTimelineP3, cBoardP1, cIssueP4}

	// Openings, for the opened_count sort.
	for i, u := range []string{bJQLP1, bJQLP1, aBoardP2, bJQLP1, cIssueP4, aBoardP2} {
		if r := do(t, "GET", siteURL+"/s/"+u, nil, "Accept", "application/json"); r.status != 200 {
			t.Fatalf("opening %d: %d %s", i, r.status, r.body)
		}
	}

	t.Run("who sees what", func(t *testing.T) {
		tests := []struct {
			name, token, query string
			want               []string
		}{
			{"own shares", alice, "userId=alice", []string{aIssueP1, aIssueNoProject, aBoardP2}},
			{"another user's shares: none seen", alice, "userId=bob", nil},
			{"a project: only own shares there", alice, "projectId=P1", []string{aIssueP1}},
			{"issue filter with own user", alice, "userId=alice&issueId=I-1", []string{aIssueP1}},
			{"admin of P1 without filters: own and P1", bob, "", []string{aIssueP1, bJQLP1, bTimelineP3, cBoardP1}},
			{"admin of P1, project P1", bob, "projectId=P1", []string{aIssueP1, bJQLP1, cBoardP1}},
			{"admin of P1, another user", bob, "userId=carol", []string{cBoardP1}},
			{"admin of P1, project P2: own only", bob, "projectId=P2", nil},
			{"admin of P1, issue I-1", bob, "issueId=I-1", []string{aIssueP1}},
			{"carol's own", carol, "userId=carol", []string{cBoardP1, cIssueP4}},
			{"* sees all", root, "", all},
			{"* with issue", root, "issueId=I-1", []string{aIssueP1, cIssueP4}},
			{"* with project and user", root, "projectId=P1&userId=carol", []string{cBoardP1}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				list, total := shrList(t, tc.token, tc.query)
				if got := shrUUIDs(list); !slices.Equal(shrSorted(got...), shrSorted(tc.want...)) || total != len(tc.want) {
					t.Errorf("got %d %v, want %v", total, got, tc.want)
				}
			})
		}
	})

	t.Run("get follows the same rule", func(t *testing.T) {
		tests := []struct {
			name, token, uuid string
			seen              bool
		}{
			{"creator", alice, aIssueNoProject, true},
			{"another user", carol, aIssueP1, false},
			{"admin of the project", bob, aIssueP1, true},
			{"admin of another project", bob, aBoardP2, false},
			{"issue share without project, project admin", bob, aIssueNoProject, false},
			{"issue share without project, * admin", root, aIssueNoProject, true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				for _, p := range []string{"", "/activity"} {
					r := do(t, "GET", siteURL+shrURL+"/"+tc.uuid+p, nil, bearer(tc.token)...)
					if tc.seen && r.status != 200 {
						t.Errorf("GET%s: %d %s", p, r.status, r.body)
					}
					if !tc.seen {
						kgWantProblem(t, r, 404, "not_found")
					}
				}
			})
		}
	})

	t.Run("a key without adminProjects names userId or projectId", func(t *testing.T) {
		for _, q := range []string{"", "issueId=I-1", "sort=type&limit=5"} {
			r := do(t, "GET", siteURL+shrURL+"?"+q, nil, bearer(alice)...)
			kgWantProblem(t, r, 403, "forbidden")
			if r.header.Get("X-Total-Count") != "" || r.header.Get("WWW-Authenticate") != "" {
				t.Errorf("%q: headers %v", q, r.header)
			}
		}
	})

	// Every record as stored, for the sort expectations.
	records := map[string]shrShare{}
	for _, u := range all {
		records[u] = shrGet(t, root, u)
	}
	testwait.For(t, testwait.Generous, "openings counted", func() bool {
		return shrGet(t, root, bJQLP1).OpenedCount == 3 && shrGet(t, root, aBoardP2).OpenedCount == 2
	})
	for _, u := range all {
		records[u] = shrGet(t, root, u)
	}

	t.Run("sorts", func(t *testing.T) {
		// Each sort with ties by id, the whole order in the direction asked.
		key := func(s shrShare, field string) (string, int64) {
			switch field {
			case "uuid":
				return s.UUID, 0
			case "type":
				return s.Type, 0
			case "issue_id":
				return shrOr0(s.IssueID), 0
			case "project_id":
				return shrOr0(s.ProjectID), 0
			case "created_by":
				return s.CreatedBy, 0
			case "created_at":
				return "", s.CreatedAt
			case "updated_at":
				return "", s.UpdatedAt
			case "expiration":
				if s.Expiration == nil {
					return "", 0
				}
				return "", *s.Expiration
			case "opened_count":
				return "", s.OpenedCount
			}
			return "", int64(s.ID)
		}
		fields := []string{"id", "uuid", "type", "issue_id", "project_id", "created_by", "created_at", "updated_at", "expiration", "opened_count"}
		for _, field := range fields {
			for _, order := range []string{"", "asc", "desc"} {
				t.Run(field+" "+order, func(t *testing.T) {
					want := slices.Clone(all)
					slices.SortStableFunc(want, func(a, b string) int {
						as, an := key(records[a], field)
						bs, bn := key(records[b], field)
						c := strings.Compare(as, bs)
						if c == 0 {
							c = shrCmpInt(an, bn)
						}
						if c == 0 {
							c = shrCmpInt(int64(records[a].ID), int64(records[b].ID))
						}
						if strings.EqualFold(order, "desc") {
							c = -c
						}
						return c
					})
					q := "sort=" + field
					if order != "" {
						q += "&sortOrder=" + order
					}
					list, total := shrList(t, root, q)
					if got := shrUUIDs(list); !slices.Equal(got, want) || total != len(all) {
						t.Errorf("got %v\nwant %v", got, want)
					}
					page, total := shrList(t, root, q+"&limit=3&offset=2")
					if got := shrUUIDs(page); !slices.Equal(got, want[2:5]) || total != len(all) {
						t.Errorf("limit 3 offset 2: got %v, want %v (total %d)", got, want[2:5], total)
					}
				})
			}
		}
		if list, _ := shrList(t, root, ""); !slices.Equal(shrUUIDs(list), all) {
			t.Errorf("default order is not by id: %v", shrUUIDs(list))
		}
		page, total := shrList(t, root, "offset=7")
		if len(page) != 0 || total != 7 {
			t.Errorf("offset past the end: %v, total %d", shrUUIDs(page), total)
		}
		page, total = shrList(t, bob, "sort=created_by&sortOrder=desc&limit=1")
		if len(page) != 1 || page[0].CreatedBy != "carol" || total != 4 {
			t.Errorf("bob's first by creator desc: %+v, total %d", page, total)
		}
		if page, _ := shrList(t, root, "limit=1000"); len(page) != 7 {
			t.Errorf("limit 1000: %d", len(page))
		}
	})

	t.Run("bad parameters are listed together", func(t *testing.T) {
		tests := []struct {
			query  string
			fields []string
		}{
			{"limit=1001", []string{"limit:out_of_range"}},
			{"sort=name&sortOrder=up&limit=0&offset=-1&color=red", []string{"color:unknown_parameter", "limit:out_of_range", "offset:out_of_range", "sort:invalid", "sortOrder:invalid"}},
			{"limit=ten&offset=x", []string{"limit:invalid", "offset:invalid"}},
			{"projectId=&userId=%C3%A9", []string{"projectId:required", "userId:invalid"}},
			{"sort=id&sort=uuid", []string{"sort:invalid"}},
		}
		for _, tc := range tests {
			t.Run(tc.query, func(t *testing.T) {
				p := kgWantProblem(t, do(t, "GET", siteURL+shrURL+"?"+tc.query, nil, bearer(root)...), 400, "invalid_request")
				if got := kgFieldCodes(t, p); !slices.Equal(got, tc.fields) {
					t.Errorf("got %v, want %v", got, tc.fields)
				}
			})
		}
	})
}

func shrCmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestSharePrivileges(t *testing.T) { eachBackend(t, testSharePrivileges) }

func testSharePrivileges(t *testing.T, b backend) {
	startGateway(t, b, defaultSite)
	full := shrKey(t, "alice", nil, shrAllPrivileges...)
	s, _ := shrCreate(t, full, map[string]any{"type": "ISSUE", "issueId": "1", "projectId": "P1"})
	path := siteURL + shrURL + "/" + s.UUID
	contractsKey := ctrKey(t, "alice", ctrAllPrivileges...)
	update := map[string]any{"type": "ISSUE", "issueId": "1", "projectId": "P1", "password": "refused"}

	type call struct {
		method, url string
		body        any
	}
	tests := []struct {
		missing string
		calls   map[string]call
	}{
		{"get", map[string]call{"get": {"GET", path, nil}, "activity": {"GET", path + "/activity", nil}}},
		{"list", map[string]call{"list": {"GET", siteURL + shrURL + "?userId=alice", nil}}},
		{"create", map[string]call{"create": {"POST", siteURL + shrURL, map[string]any{"type": "ISSUE", "issueId": "2"}}, "update": {"PUT", path, update}}},
		{"delete", map[string]call{"delete": {"DELETE", path, nil}}},
	}
	for _, tc := range tests {
		var rest []string
		for _, p := range shrAllPrivileges {
			if p != tc.missing {
				rest = append(rest, p)
			}
		}
		key := shrKey(t, "alice", []string{"*"}, rest...)
		for op, cl := range tc.calls {
			t.Run("without "+tc.missing+": "+op, func(t *testing.T) {
				r := do(t, cl.method, cl.url, cl.body, bearer(key)...)
				kgWantProblem(t, r, 403, "missing_privilege")
				if got, want := r.header.Get("WWW-Authenticate"), `Bearer realm="webapi", error="insufficient_scope", scope="`+tc.missing+`"`; got != want {
					t.Errorf("WWW-Authenticate %q, want %q", got, want)
				}
				if tc.missing != "get" {
					if r := do(t, "GET", path, nil, bearer(key)...); r.status != 200 {
						t.Errorf("the key's get: %d", r.status)
					}
				}
			})
		}
	}
	for _, cl := range []call{{"GET", path, nil}, {"GET", siteURL + shrURL + "?userId=alice", nil}, {"POST", siteURL + shrURL, update}, {"PUT", path, update}, {"DELETE", path, nil}, {"GET", path + "/activity", nil}} {
		t.Run("contracts key on "+cl.method+" "+strings.TrimPrefix(cl.url, siteURL), func(t *testing.T) {
			r := do(t, cl.method, cl.url, cl.body, bearer(contractsKey)...)
			kgWantProblem(t, r, 401, "invalid_key")
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="webapi", error="invalid_token"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
		})
	}
	// Nothing refused changed anything.
	got := shrGet(t, full, s.UUID)
	if got.PasswordProtected || got.UpdatedAt != s.UpdatedAt {
		t.Errorf("the share changed: %+v", got)
	}
	if _, n := shrList(t, full, "userId=alice"); n != 1 {
		t.Errorf("%d shares", n)
	}
	if acts := shrActivities(t, full, s.UUID, ""); len(acts) != 1 {
		t.Errorf("activity %+v", acts)
	}
}

func TestSharePublicPage(t *testing.T) { eachBackend(t, testSharePublicPage) }

func testSharePublicPage(t *testing.T, b backend) {
	g := startGateway(t, b, defaultSite)
	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	open, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": "DEMO-42", "projectId": "P1",
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{
			"summary":  map[string]any{"fieldPermissions": []string{"VIEW", "EDIT"}},
			"priority": map[string]any{"fieldPermissions": []string{"VIEW"}},
		}},
		"selectedUsersConfig": map[string]any{"allowed": false, "list": []map[string]string{{"email": "secret-list@example.com"}}}})
	locked, _ := shrCreate(t, alice, map[string]any{"type": "BOARD", "projectId": "P1", "board": map[string]any{"id": "3"}, "password": "open sesame"})
	selected, _ := shrCreate(t, alice, map[string]any{"type": "JQL", "projectId": "P1", "jql": "project = X",
		"selectedUsersConfig": map[string]any{"allowed": true, "list": []map[string]string{{"email": "guest@example.com"}}}})
	page := func(u string) string { return siteURL + "/s/" + u }
	asJSON := []string{"Accept", "application/json"}
	openings := func(u string) int64 { return shrGet(t, alice, u).OpenedCount }

	t.Run("an open share as HTML and JSON, openings counted", func(t *testing.T) {
		r := do(t, "GET", page(open.UUID), nil, "Accept", "text/html,application/xhtml+xml")
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Fatalf("HTML: %d %s %s", r.status, r.header.Get("Content-Type"), r.body)
		}
		for _, want := range []string{"DEMO-42", "summary", "priority"} {
			if !strings.Contains(string(r.body), want) {
				t.Errorf("HTML lacks %q", want)
			}
		}
		if strings.Contains(string(r.body), "secret-list@example.com") || strings.Contains(string(r.body), "alice") {
			t.Errorf("the page shows who shared or who may open")
		}
		r = do(t, "GET", page(open.UUID), nil, asJSON...)
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("JSON: %d %s", r.status, r.body)
		}
		var v struct {
			UUID, Type   string
			IssueID      *string
			ProjectID    *string
			FieldsConfig struct {
				FieldConfigs map[string]struct{ FieldPermissions []string }
			}
		}
		r.json(t, &v)
		if v.UUID != open.UUID || v.Type != "ISSUE" || shrStr(v.IssueID) != "DEMO-42" || shrStr(v.ProjectID) != "P1" ||
			!slices.Equal(v.FieldsConfig.FieldConfigs["summary"].FieldPermissions, []string{"VIEW", "EDIT"}) {
			t.Errorf("%s", r.body)
		}
		raw := kgObject(t, r)
		for _, k := range []string{"createdBy", "selectedUsersConfig", "passwordProtected", "openedCount", "id"} {
			if _, ok := raw[k]; ok {
				t.Errorf("the public JSON shows %s", k)
			}
		}
		testwait.For(t, testwait.Generous, "two openings", func() bool { return openings(open.UUID) == 2 })
		acts := shrActivities(t, alice, open.UUID, "")
		if len(acts) != 3 || acts[0].Action != "viewed" || acts[1].Action != "viewed" || acts[2].Action != "created" ||
			shrStr(acts[0].IP) != "127.0.0.1" || acts[0].User != nil || acts[0].Email != nil {
			t.Errorf("activity %+v", acts)
		}
	})

	t.Run("a password-protected share", func(t *testing.T) {
		r := do(t, "GET", page(locked.UUID), nil, asJSON...)
		p := kgWantProblem(t, r, 401, "forbidden")
		if got := kgFieldCodes(t, p); !slices.Equal(got, []string{"password:required"}) {
			t.Errorf("locked JSON asks for %v", got)
		}
		r = do(t, "GET", page(locked.UUID), nil)
		if r.status != 200 || !strings.Contains(string(r.body), `name="password"`) {
			t.Errorf("locked HTML: %d %s", r.status, r.body)
		}
		if !strings.Contains(string(r.body), "/s/"+locked.UUID+"/unlock") {
			t.Errorf("the form does not post to the unlock path")
		}

		// A wrong password: 401 and an unlock-failed entry.
		r = kgSend(t, nil, "POST", page(locked.UUID)+"/unlock", "application/json", []byte(`{"password":"open sesam"}`))
		kgWantProblem(t, r, 401, "forbidden")
		if len(r.header.Values("Set-Cookie")) != 0 {
			t.Errorf("a wrong password sets a cookie")
		}
		r = kgSend(t, nil, "POST", page(locked.UUID)+"/unlock", "application/x-www-form-urlencoded", []byte("password=wrong"))
		if r.status != 401 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !strings.Contains(string(r.body), "password is wrong") {
			t.Errorf("wrong password by form: %d %s", r.status, r.body)
		}
		testwait.For(t, testwait.Generous, "unlock-failed entries", func() bool {
			acts := shrActivities(t, alice, locked.UUID, "")
			n := 0
			for _, a := range acts {
				if a.Action == "unlock-failed" && shrStr(a.IP) == "127.0.0.1" && a.Source == "share" {
					n++
				}
			}
			return n == 2
		})
		if n := openings(locked.UUID); n != 0 {
			t.Errorf("locked views counted: %d", n)
		}

		// The right password sets the signed cookie; with it the share opens.
		r = kgSend(t, nil, "POST", page(locked.UUID)+"/unlock", "application/json", []byte(`{"password":"open sesame"}`))
		if r.status != http.StatusNoContent {
			t.Fatalf("unlock: %d %s", r.status, r.body)
		}
		resp := http.Response{Header: r.header}
		var cookie *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "keygate_share" {
				cookie = c
			}
		}
		if cookie == nil || cookie.Path != "/s/"+locked.UUID || !cookie.HttpOnly || cookie.MaxAge != 12*3600 || cookie.SameSite != http.SameSiteStrictMode {
			t.Fatalf("cookie %+v from %v", cookie, r.header.Values("Set-Cookie"))
		}
		withCookie := append([]string{"Cookie", cookie.Name + "=" + cookie.Value}, asJSON...)
		r = do(t, "GET", page(locked.UUID), nil, withCookie...)
		if r.status != 200 || !strings.Contains(string(r.body), `"board":{"id":"3"}`) {
			t.Errorf("with the cookie: %d %s", r.status, r.body)
		}
		if r := do(t, "GET", page(selected.UUID), nil, withCookie...); r.status != 401 {
			t.Errorf("the cookie of one share opens another: %d", r.status)
		}
		forged := cookie.Value[:len(cookie.Value)-2] + "AA"
		if forged == cookie.Value {
			forged = cookie.Value[:len(cookie.Value)-2] + "BB"
		}
		tampered := append([]string{"Cookie", cookie.Name + "=" + forged}, asJSON...)
		if r := do(t, "GET", page(locked.UUID), nil, tampered...); r.status != 401 {
			t.Errorf("a tampered cookie opens the share: %d", r.status)
		}
		testwait.For(t, testwait.Generous, "one opening", func() bool { return openings(locked.UUID) == 1 })

		// A person: the form posts, is sent back to the page, and the
		// browser's cookie opens it.
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		browser := &http.Client{Jar: jar}
		r = kgSend(t, browser, "POST", page(locked.UUID)+"/unlock", "application/x-www-form-urlencoded", []byte(url.Values{"password": {"open sesame"}}.Encode()))
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || strings.Contains(string(r.body), `name="password"`) ||
			!strings.Contains(string(r.body), "board") {
			t.Errorf("after the form: %d %s", r.status, r.body)
		}
		testwait.For(t, testwait.Generous, "two openings", func() bool { return openings(locked.UUID) == 2 })
	})

	t.Run("a share for selected users", func(t *testing.T) {
		r := kgSend(t, nil, "POST", page(selected.UUID)+"/unlock", "application/json", []byte(`{"email":"stranger@example.com"}`))
		kgWantProblem(t, r, 401, "forbidden")
		r = kgSend(t, nil, "POST", page(selected.UUID)+"/unlock", "application/json", []byte(`{}`))
		if p := kgWantProblem(t, r, 400, "invalid_request"); !slices.Equal(kgFieldCodes(t, p), []string{"email:required"}) {
			t.Errorf("fields %+v", p.Errors)
		}
		r = kgSend(t, nil, "POST", page(selected.UUID)+"/unlock", "application/json", []byte(`{"email":"Guest@Example.com"}`))
		if r.status != 204 {
			t.Fatalf("unlock: %d %s", r.status, r.body)
		}
		resp := http.Response{Header: r.header}
		var hdr []string
		for _, c := range resp.Cookies() {
			hdr = append(hdr, "Cookie", c.Name+"="+c.Value)
		}
		if r := do(t, "GET", page(selected.UUID), nil, append(hdr, asJSON...)...); r.status != 200 {
			t.Fatalf("with the cookie: %d %s", r.status, r.body)
		}
		testwait.For(t, testwait.Generous, "viewed and unlock-failed entries with e-mails", func() bool {
			acts := shrActivities(t, alice, selected.UUID, "")
			if len(acts) != 3 {
				return false
			}
			return acts[0].Action == "viewed" && shrStr(acts[0].Email) == "Guest@Example.com" && shrStr(acts[0].IP) == "127.0.0.1" &&
				acts[1].Action == "unlock-failed" && shrStr(acts[1].Email) == "stranger@example.com" && acts[2].Action == "created"
		})
	})

	t.Run("paths and methods", func(t *testing.T) {
		kgWantProblem(t, do(t, "GET", page("9b2f3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d"), nil, asJSON...), 404, "not_found")
		kgWantProblem(t, do(t, "GET", page(open.UUID)+"/other", nil, asJSON...), 404, "not_found")
		if r := do(t, "GET", page("nope"), nil); r.status != 404 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("unknown share as HTML: %d %s", r.status, r.header.Get("Content-Type"))
		}
		r := do(t, "DELETE", page(open.UUID), nil, asJSON...)
		kgWantProblem(t, r, 405, "method_not_allowed")
		if r.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("Allow %q", r.header.Get("Allow"))
		}
		kgWantProblem(t, kgSend(t, nil, "POST", page(locked.UUID)+"/unlock", "text/plain", []byte("open sesame"), asJSON...), 415, "unsupported_media_type")
		// A JSON body is answered in JSON, whatever Accept says.
		kgWantProblem(t, kgSend(t, nil, "POST", page(locked.UUID)+"/unlock", "application/json", []byte(`{"password":`)), 400, "invalid_request")
		kgWantProblem(t, kgSend(t, nil, "POST", page("9b2f3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d")+"/unlock", "application/json", []byte(`{"password":"x"}`)), 404, "not_found")
	})

	t.Run("openings survive a reload", func(t *testing.T) {
		want := map[string]int64{open.UUID: openings(open.UUID), locked.UUID: openings(locked.UUID), selected.UUID: openings(selected.UUID)}
		g.load(defaultSite + "\n# reloaded\n")
		for u, n := range want {
			if got := openings(u); got != n || n == 0 {
				t.Errorf("share %s: %d openings after the reload, %d before", u, got, n)
			}
		}
		if acts := shrActivities(t, alice, open.UUID, ""); len(acts) != 3 {
			t.Errorf("activity after the reload: %+v", acts)
		}
	})

	t.Run("an expired share answers 410", func(t *testing.T) {
		// Far enough ahead for the create to land before it on a slow
		// machine; a 410 before expiry is a failure only if the reply
		// came back before the expiry.
		exp := time.Now().Add(3 * time.Second)
		s, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": "OLD-1", "password": "pw", "expiration": exp.UnixMilli()})
		if r := do(t, "GET", page(s.UUID), nil, asJSON...); r.status != 401 && (r.status != 410 || time.Now().Before(exp)) {
			t.Fatalf("before expiry: %d", r.status)
		}
		testwait.For(t, testwait.Generous, "the share to expire", func() bool {
			return do(t, "GET", page(s.UUID), nil, asJSON...).status == http.StatusGone
		})
		kgWantProblem(t, do(t, "GET", page(s.UUID), nil, asJSON...), 410, "gone")
		if r := do(t, "GET", page(s.UUID), nil); r.status != 410 || !strings.Contains(string(r.body), "expired") {
			t.Errorf("HTML: %d %s", r.status, r.body)
		}
		kgWantProblem(t, kgSend(t, nil, "POST", page(s.UUID)+"/unlock", "application/json", []byte(`{"password":"pw"}`)), 410, "gone")
		if got := shrGet(t, alice, s.UUID); got.Status != "EXPIRED" || got.OpenedCount != 0 {
			t.Errorf("record %+v", got)
		}
		if list, _ := shrList(t, alice, "userId=alice&issueId=OLD-1"); len(list) != 1 || list[0].Status != "EXPIRED" {
			t.Errorf("listed %+v", list)
		}
	})
}
