package share

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

func TestCreateReturnsTheRecord(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		exp := e.nowMs() + 3600_000
		body := `{"type":"BOARD","projectId":"P1","board":{"id":"5"},"password":"s3cret",
		"expiration":` + fmt.Sprint(exp) + `,
		"fieldsConfig":{"fieldConfigs":{"summary":{"fieldPermissions":["EDIT","VIEW","VIEW"]},"cf_1":{"fieldPermissions":[]}}},
		"selectedUsersConfig":{"allowed":true,"allowedNotification":false,"list":[{"email":"a@example.com"}]}}`
		w := e.call(alice, "POST", "/webapi/share", body)
		if w.Code != http.StatusCreated {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		got := decode[map[string]any](t, w)
		uuid := got["uuid"].(string)
		if loc := w.Header().Get("Location"); loc != "/webapi/share/"+uuid {
			t.Fatalf("Location %q", loc)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type %q", ct)
		}
		now := float64(e.nowMs())
		want := map[string]any{
			"id": float64(1), "uuid": uuid, "type": "BOARD", "issueId": nil, "projectId": "P1",
			"board": map[string]any{"id": "5"}, "jql": nil, "passwordProtected": true,
			"expiration": float64(exp), "expirationExpression": nil,
			"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{
				"summary": map[string]any{"fieldPermissions": []any{"VIEW", "EDIT"}},
				"cf_1":    map[string]any{"fieldPermissions": []any{}}}},
			"selectedUsersConfig": map[string]any{"allowed": true, "allowedNotification": false,
				"list": []any{map[string]any{"email": "a@example.com"}}},
			"createdBy": "alice", "createdAt": now, "updatedBy": "alice", "updatedAt": now,
			"status": "ACTIVE", "openedCount": float64(0), "url": "http://localhost:8080/s/" + uuid,
		}
		if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
			t.Fatalf("record\n got %s\nwant %s", g, w)
		}
		r := e.stored(uuid)
		if !strings.HasPrefix(r.PasswordHash, "$argon2id$v=19$m=64,t=1,p=1$") {
			t.Fatalf("stored hash %q", r.PasswordHash)
		}
		if strings.Contains(w.Body.String(), "s3cret") || strings.Contains(w.Body.String(), "argon2") {
			t.Fatal("the reply leaks the password")
		}
		acts, err := e.store.Activity(context.Background(), alice, uuid, 0, 0)
		if err != nil || len(acts) != 1 {
			t.Fatalf("activity %v %v", acts, err)
		}
		if a := acts[0]; a.Action != ActionCreated || a.Source != "share" || *a.User != "alice" || a.Email != nil ||
			*a.IP != "198.51.100.7" || a.Timestamp != e.nowMs() {
			t.Fatalf("activity entry %+v", a)
		}
		e.checkIndexes()
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCreateMinimalIssueHasNulls(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		w := e.call(alice, "POST", "/webapi/share", `{"type":"ISSUE","issueId":"10001"}`)
		if w.Code != http.StatusCreated {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		got := decode[map[string]any](t, w)
		for _, k := range []string{"projectId", "board", "jql", "expiration", "expirationExpression", "fieldsConfig", "selectedUsersConfig"} {
			v, ok := got[k]
			if !ok || v != nil {
				t.Errorf("%s = %v (present %v), want null", k, v, ok)
			}
		}
		if got["passwordProtected"] != false || got["status"] != "ACTIVE" || got["issueId"] != "10001" {
			t.Fatalf("record %v", got)
		}
	})
}

func TestCreateValidation(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		future := fmt.Sprint(testStart.UnixMilli() + 1000)
		past := fmt.Sprint(testStart.UnixMilli())
		var many []string
		for i := range 1001 {
			many = append(many, fmt.Sprintf(`{"email":"u%d@example.com"}`, i))
		}
		tests := []struct {
			name   string
			body   string
			status int
			code   string
			fields []string
		}{
			{"type missing", `{}`, 400, "invalid_request", []string{"type:required"}},
			{"type unknown", `{"type":"EPIC"}`, 400, "invalid_request", []string{"type:invalid"}},
			{"issue without issueId", `{"type":"ISSUE"}`, 400, "invalid_request", []string{"issueId:required"}},
			{"issueId not printable", `{"type":"ISSUE","issueId":"a\u0001"}`, 400, "invalid_request", []string{"issueId:invalid"}},
			{"issueId too long", `{"type":"ISSUE","issueId":"` + strings.Repeat("x", 256) + `"}`, 400, "invalid_request", []string{"issueId:invalid"}},
			{"board share with issueId, no project", `{"type":"BOARD","issueId":"1"}`, 400, "invalid_request", []string{"issueId:not_allowed", "projectId:required"}},
			{"jql share without project", `{"type":"JQL"}`, 400, "invalid_request", []string{"projectId:required"}},
			{"timeline share with empty project", `{"type":"TIMELINE","projectId":""}`, 400, "invalid_request", []string{"projectId:required"}},
			{"board on an issue share", `{"type":"ISSUE","issueId":"1","board":{"id":"5"}}`, 400, "invalid_request", []string{"board:not_allowed"}},
			{"board without id", `{"type":"BOARD","projectId":"P","board":{}}`, 400, "invalid_request", []string{"board.id:required"}},
			{"empty password", `{"type":"ISSUE","issueId":"1","password":""}`, 400, "invalid_request", []string{"password:invalid"}},
			{"password of 257 characters", `{"type":"ISSUE","issueId":"1","password":"` + strings.Repeat("é", 257) + `"}`, 400, "invalid_request", []string{"password:invalid"}},
			{"password as number", `{"type":"ISSUE","issueId":"1","password":5}`, 400, "invalid_request", []string{"password:invalid_type"}},
			{"expiration now", `{"type":"ISSUE","issueId":"1","expiration":` + past + `}`, 400, "invalid_request", []string{"expiration:invalid"}},
			{"expiration and expression", `{"type":"ISSUE","issueId":"1","expiration":` + future + `,"expirationExpression":{"days":3}}`, 400, "invalid_request", []string{"expirationExpression:not_allowed"}},
			{"expression 0 days", `{"type":"ISSUE","issueId":"1","expirationExpression":{"days":0}}`, 400, "invalid_request", []string{"expirationExpression.days:out_of_range"}},
			{"expression 3651 days", `{"type":"ISSUE","issueId":"1","expirationExpression":{"days":3651}}`, 400, "invalid_request", []string{"expirationExpression.days:out_of_range"}},
			{"expression unknown member", `{"type":"ISSUE","issueId":"1","expirationExpression":{"weeks":3}}`, 400, "invalid_request", []string{"weeks:unknown_field"}},
			{"jql on a board share", `{"type":"BOARD","projectId":"P","jql":"x"}`, 400, "invalid_request", []string{"jql:not_allowed"}},
			{"jql too long", `{"type":"JQL","projectId":"P","jql":"` + strings.Repeat("a", 10001) + `"}`, 400, "invalid_request", []string{"jql:too_long"}},
			{"bad permission and field id", `{"type":"ISSUE","issueId":"1","fieldsConfig":{"fieldConfigs":{"summary":{"fieldPermissions":["VIEW","DELETE"]},"":{"fieldPermissions":["VIEW"]}}}}`, 400, "invalid_request",
				[]string{"fieldsConfig.fieldConfigs.summary.fieldPermissions[1]:invalid", "fieldsConfig.fieldConfigs.:invalid"}},
			{"bad e-mails", `{"type":"ISSUE","issueId":"1","selectedUsersConfig":{"allowed":true,"list":[{"email":"a@example.com"},{"email":"A@example.com"},{"email":""},{"email":"not-an-email"},{"email":"Bob <b@example.com>"}]}}`, 400, "invalid_request",
				[]string{"selectedUsersConfig.list[1].email:duplicate", "selectedUsersConfig.list[2].email:required", "selectedUsersConfig.list[3].email:invalid", "selectedUsersConfig.list[4].email:invalid"}},
			{"1001 selected users", `{"type":"ISSUE","issueId":"1","selectedUsersConfig":{"allowed":true,"list":[` + strings.Join(many, ",") + `]}}`, 400, "invalid_request", []string{"selectedUsersConfig.list:too_many"}},
			{"allowed with nobody", `{"type":"ISSUE","issueId":"1","selectedUsersConfig":{"allowed":true,"list":[]}}`, 400, "invalid_request", []string{"selectedUsersConfig.list:required"}},
			{"custom field without id", `{"type":"ISSUE","issueId":"1","customFields":[{"id":"ok"},{}]}`, 400, "invalid_request", []string{"customFields[1].id:required"}},
			{"unknown field", `{"type":"ISSUE","issueId":"1","colour":"red"}`, 400, "invalid_request", []string{"colour:unknown_field"}},
			{"not JSON", `{"type":`, 400, "invalid_request", nil},
			{"every violation at once", `{"type":"BOARD","issueId":"1","password":"","jql":"x","expirationExpression":{"days":0},"selectedUsersConfig":{"allowed":false,"list":[{"email":"x"}]}}`, 400, "invalid_request",
				[]string{"issueId:not_allowed", "projectId:required", "password:invalid", "jql:not_allowed", "expirationExpression.days:out_of_range", "selectedUsersConfig.list[0].email:invalid"}},
		}
		e := newEnv(t, db)
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				w := e.call(alice, "POST", "/webapi/share", tc.body)
				wantProblem(t, w, tc.status, tc.code, tc.fields...)
			})
		}
		e.checkIndexes()
		if n := e.count(); n != 0 {
			t.Fatalf("%d shares stored after refused creates", n)
		}
	})
}

func (e *env) count() int {
	_, total, err := e.store.List(context.Background(), root, ListQuery{})
	if err != nil {
		e.t.Fatal(err)
	}
	return total
}

func TestCreateMediaTypeAndSize(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		req := func(ct, body string) *http.Request {
			r, _ := http.NewRequest("POST", "/webapi/share", strings.NewReader(body))
			r.Header.Set("Content-Type", ct)
			return r.WithContext(access.WithIdentity(r.Context(), alice))
		}
		w := serve(e.api, req("text/plain", `{"type":"ISSUE","issueId":"1"}`))
		wantProblem(t, w, 415, "unsupported_media_type")
		w = serve(e.api, req("application/json", `{"type":"ISSUE","issueId":"`+strings.Repeat("x", 1<<20)+`"}`))
		wantProblem(t, w, 413, "payload_too_large")
	})
}

func TestCustomFieldsBecomeViewEntries(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		w := e.call(alice, "POST", "/webapi/share", `{"type":"ISSUE","issueId":"1",
		"fieldsConfig":{"fieldConfigs":{"summary":{"fieldPermissions":["EDIT"]}}},
		"customFields":[{"id":"summary"},{"id":"customfield_10010"}]}`)
		if w.Code != 201 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		sh := decode[Share](t, w)
		got := mustJSON(t, sh.FieldsConfig)
		want := `{"fieldConfigs":{"customfield_10010":{"fieldPermissions":["VIEW"]},"summary":{"fieldPermissions":["EDIT"]}}}`
		if got != want {
			t.Fatalf("fieldsConfig %s, want %s", got, want)
		}
		w = e.call(alice, "POST", "/webapi/share", `{"type":"ISSUE","issueId":"1","customFields":[{"id":"a"}]}`)
		if got := mustJSON(t, decode[Share](t, w).FieldsConfig); got != `{"fieldConfigs":{"a":{"fieldPermissions":["VIEW"]}}}` {
			t.Fatalf("customFields alone gave %s", got)
		}
	})
}

func TestExpirationExpressionAndStatus(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		w := e.call(alice, "POST", "/webapi/share", `{"type":"ISSUE","issueId":"1","expirationExpression":{"days":30}}`)
		sh := decode[Share](t, w)
		if want := e.nowMs() + 30*dayMillis; sh.Expiration == nil || *sh.Expiration != want || sh.ExpirationExpression.Days != 30 {
			t.Fatalf("expiration %v, want %d", sh.Expiration, want)
		}
		e.clock.Advance(30*24*time.Hour - time.Millisecond)
		if got := decode[Share](t, e.call(alice, "GET", "/webapi/share/"+sh.UUID, nil)); got.Status != StatusActive {
			t.Fatalf("status %s a millisecond before expiry", got.Status)
		}
		e.clock.Advance(time.Millisecond)
		if got := decode[Share](t, e.call(alice, "GET", "/webapi/share/"+sh.UUID, nil)); got.Status != StatusExpired {
			t.Fatalf("status %s at expiry", got.Status)
		}
	})
}

// TestVisibility runs every operation on a uuid for each kind of caller.
func TestVisibility(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		aliceP1 := e.create(alice, issueShare("I1", "P1"))
		carolP2 := e.create(carol, issueShare("I2", "P2"))
		aliceNoProject := e.create(alice, issueShare("I3", ""))
		tests := []struct {
			name   string
			caller *access.Identity
			share  *Share
			seen   bool
		}{
			{"creator sees own", alice, aliceP1, true},
			{"creator sees own issue share without project", alice, aliceNoProject, true},
			{"other user does not see", carol, aliceP1, false},
			{"project admin sees share of project", bob, aliceP1, true},
			{"project admin does not see other project", bob, carolP2, false},
			{"project admin does not see share without project", bob, aliceNoProject, false},
			{"star admin sees every project", root, carolP2, true},
			{"star admin sees share without project", root, aliceNoProject, true},
			{"no rights", dave, carolP2, false},
		}
		update := map[string]any{"type": "ISSUE", "issueId": nil, "projectId": nil}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				path := "/webapi/share/" + tc.share.UUID
				up := map[string]any{}
				for k, v := range update {
					up[k] = v
				}
				up["issueId"] = *tc.share.IssueID
				if tc.share.ProjectID != nil {
					up["projectId"] = *tc.share.ProjectID
				}
				for _, op := range []struct {
					method, path string
					body         any
					ok           int
				}{
					{"GET", path, nil, 200},
					{"GET", path + "/activity", nil, 200},
					{"PUT", path, up, 200},
				} {
					w := e.call(tc.caller, op.method, op.path, op.body)
					if tc.seen && w.Code != op.ok {
						t.Fatalf("%s %s: %d %s", op.method, op.path, w.Code, w.Body)
					}
					if !tc.seen {
						wantProblem(t, w, 404, "not_found")
					}
				}
				listed := false
				shares, _, err := e.store.List(context.Background(), tc.caller, ListQuery{UserID: tc.share.CreatedBy})
				if err != nil {
					t.Fatal(err)
				}
				for _, s := range shares {
					listed = listed || s.UUID == tc.share.UUID
				}
				if listed != tc.seen {
					t.Fatalf("listed %v, want %v", listed, tc.seen)
				}
				if !tc.seen {
					wantProblem(t, e.call(tc.caller, "DELETE", path, nil), 404, "not_found")
					if e.stored(tc.share.UUID) == nil {
						t.Fatal("an unseen delete removed the share")
					}
				}
			})
		}
	})
}

func TestUpdatePasswordRule(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := issueShare("I1", "P1")
		in.Password = Password("first")
		sh := e.create(alice, in)
		path := "/webapi/share/" + sh.UUID
		firstHash := e.stored(sh.UUID).PasswordHash

		tests := []struct {
			name      string
			body      string
			protected bool
			hash      func(string) bool
		}{
			{"absent keeps", `{"type":"ISSUE","issueId":"I1","projectId":"P1"}`, true, func(h string) bool { return h == firstHash }},
			{"string replaces", `{"type":"ISSUE","issueId":"I1","projectId":"P1","password":"second"}`, true, func(h string) bool { return h != firstHash && h != "" }},
			{"absent keeps the new one", `{"type":"ISSUE","issueId":"I1","projectId":"P1"}`, true, func(h string) bool { return h != firstHash && h != "" }},
			{"null removes", `{"type":"ISSUE","issueId":"I1","projectId":"P1","password":null}`, false, func(h string) bool { return h == "" }},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				w := e.call(alice, "PUT", path, tc.body)
				if w.Code != 200 {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
				if got := decode[Share](t, w); got.PasswordProtected != tc.protected {
					t.Fatalf("passwordProtected %v", got.PasswordProtected)
				}
				if h := e.stored(sh.UUID).PasswordHash; !tc.hash(h) {
					t.Fatalf("stored hash %q", h)
				}
			})
		}
		r := e.stored(sh.UUID)
		if ok, _ := e.store.hasher.verify(firstHash, "first"); !ok {
			t.Fatal("first hash does not verify")
		}
		if r.PasswordHash != "" {
			t.Fatal("password not removed")
		}
	})
}

func TestUpdateReplacesAndRefusesImmutable(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := &CreateRequest{Type: TypeBoard, ProjectID: str("P1"), Board: &Board{ID: "5"},
			FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{"summary": {FieldPermissions: []string{PermView}}}}}
		sh := e.create(alice, in)
		path := "/webapi/share/" + sh.UUID

		e.clock.Advance(time.Minute)
		w := e.call(bob, "PUT", path, `{"type":"BOARD","projectId":"P1","expirationExpression":{"days":2}}`)
		if w.Code != 200 {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		got := decode[Share](t, w)
		if got.Board != nil || got.FieldsConfig != nil || got.UpdatedBy != "bob" || got.CreatedBy != "alice" ||
			got.UpdatedAt != e.nowMs() || got.CreatedAt != sh.CreatedAt || *got.Expiration != e.nowMs()+2*dayMillis || got.ID != sh.ID {
			t.Fatalf("updated record %+v", got)
		}
		if g := decode[Share](t, e.call(alice, "GET", path, nil)); mustJSON(t, g) != mustJSON(t, got) {
			t.Fatalf("GET after PUT\n%s\n%s", mustJSON(t, g), mustJSON(t, got))
		}

		tests := []struct {
			name   string
			body   string
			fields []string
		}{
			{"type", `{"type":"JQL","projectId":"P1"}`, []string{"type:immutable"}},
			{"projectId", `{"type":"BOARD","projectId":"P9"}`, []string{"projectId:immutable"}},
			{"issueId added", `{"type":"BOARD","projectId":"P1","issueId":"1"}`, []string{"issueId:not_allowed"}},
			{"immutable and invalid together", `{"type":"TIMELINE","projectId":"P2","password":""}`, []string{"type:immutable", "projectId:immutable", "password:invalid"}},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				wantProblem(t, e.call(alice, "PUT", path, tc.body), 400, "invalid_request", tc.fields...)
			})
		}
		issue := e.create(alice, issueShare("I1", ""))
		wantProblem(t, e.call(alice, "PUT", "/webapi/share/"+issue.UUID, `{"type":"ISSUE","issueId":"I2","projectId":"P1"}`),
			400, "invalid_request", "issueId:immutable", "projectId:immutable")

		acts := decode[[]Activity](t, e.call(alice, "GET", path+"/activity", nil))
		if len(acts) != 2 || acts[0].Action != ActionUpdated || *acts[0].User != "bob" || acts[1].Action != ActionCreated {
			t.Fatalf("activity %s", mustJSON(t, acts))
		}
		e.checkIndexes()
	})
}

func TestDelete(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		keep := e.create(alice, issueShare("I1", "P1"))
		sh := e.create(alice, issueShare("I1", "P1"))
		e.store.recordPageEvent(sh.ID, Activity{Timestamp: 1, Source: "share", Action: ActionViewed}, true)
		path := "/webapi/share/" + sh.UUID
		w := e.call(bob, "DELETE", path, nil)
		if w.Code != 204 || w.Body.Len() != 0 {
			t.Fatalf("delete: %d %q", w.Code, w.Body)
		}
		d := wantProblem(t, e.call(alice, "GET", path, nil), 404, "not_found")
		if d.Detail == "" {
			t.Fatal("no detail")
		}
		wantProblem(t, e.call(alice, "DELETE", path, nil), 404, "not_found")
		wantProblem(t, e.call(alice, "DELETE", "/webapi/share/not-a-uuid", nil), 404, "not_found")
		wantProblem(t, e.call(alice, "DELETE", path+"?force=1", nil), 400, "invalid_request", "force:unknown_parameter")
		if err := e.store.Flush(); err != nil {
			t.Fatal(err)
		}
		e.checkIndexes()
		if n := e.activityEntries(); n != 1 {
			t.Fatalf("%d activity entries left, want 1 (of the kept share)", n)
		}
		if e.stored(keep.UUID) == nil {
			t.Fatal("the other share is gone")
		}
	})
}

func TestActivityPaging(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sh := e.create(alice, issueShare("I1", "P1"))
		path := "/webapi/share/" + sh.UUID
		for i := range 4 {
			e.clock.Advance(time.Second)
			w := e.call(alice, "PUT", path, fmt.Sprintf(`{"type":"ISSUE","issueId":"I1","projectId":"P1","jql":null,"expirationExpression":{"days":%d}}`, i+1))
			if w.Code != 200 {
				t.Fatal(w.Body)
			}
		}
		all := decode[[]Activity](t, e.call(alice, "GET", path+"/activity", nil))
		if len(all) != 5 || all[4].Action != ActionCreated {
			t.Fatalf("activity %s", mustJSON(t, all))
		}
		for i := 1; i < len(all); i++ {
			if all[i-1].Timestamp <= all[i].Timestamp {
				t.Fatalf("not newest first: %s", mustJSON(t, all))
			}
		}
		page := decode[[]Activity](t, e.call(alice, "GET", path+"/activity?limit=2&offset=1", nil))
		if mustJSON(t, page) != mustJSON(t, all[1:3]) {
			t.Fatalf("page %s", mustJSON(t, page))
		}
		raw := e.call(alice, "GET", path+"/activity?limit=1", nil).Body.String()
		if !strings.Contains(raw, `"timestamp":`) || !strings.Contains(raw, `"source":"share"`) || !strings.Contains(raw, `"email":null`) {
			t.Fatalf("entry form %s", raw)
		}
		if got := decode[[]Activity](t, e.call(alice, "GET", path+"/activity?offset=9", nil)); len(got) != 0 {
			t.Fatalf("past the end: %v", got)
		}
		wantProblem(t, e.call(alice, "GET", path+"/activity?limit=0&offset=-1&x=1", nil), 400, "invalid_request",
			"limit:out_of_range", "offset:out_of_range", "x:unknown_parameter")
		wantProblem(t, e.call(alice, "GET", path+"/activity?limit=abc", nil), 400, "invalid_request", "limit:invalid")
		wantProblem(t, e.call(alice, "GET", path+"/activity?limit=%zz", nil), 400, "invalid_request")
		wantProblem(t, e.call(alice, "GET", path+"?x=1;y=2", nil), 400, "invalid_request")
	})
}

func TestRoutes(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sh := e.create(alice, issueShare("I1", "P1"))
		w := e.call(alice, "PATCH", "/webapi/share/"+sh.UUID, nil)
		wantProblem(t, w, 405, "method_not_allowed")
		if allow := w.Header().Get("Allow"); allow != "GET, HEAD, PUT, DELETE" {
			t.Fatalf("Allow %q", allow)
		}
		wantProblem(t, e.call(alice, "GET", "/webapi/share/"+sh.UUID+"/other", nil), 404, "not_found")
		wantProblem(t, e.call(alice, "GET", "/webapi/share/"+strings.ToUpper(sh.UUID), nil), 404, "not_found")
		wantProblem(t, e.call(nil, "GET", "/webapi/share/"+sh.UUID, nil), 500, "internal")
		if w := e.call(alice, "HEAD", "/webapi/share/"+sh.UUID, nil); w.Code != 200 {
			t.Fatalf("HEAD: %d", w.Code)
		}
		if _, err := e.store.Get(context.Background(), nil, sh.UUID); err == nil {
			t.Fatal("Get without identity succeeded")
		}
	})
}
