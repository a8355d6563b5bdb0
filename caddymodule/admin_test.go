package caddymodule_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
)

func TestAdminKeys(t *testing.T) { eachBackend(t, testAdminKeys) }

func testAdminKeys(t *testing.T, b backend) {
	startGateway(t, b, echoSite)
	keysURL := adminURL + "/webapi/keys"

	t.Run("create answers the key with its token once", func(t *testing.T) {
		r := do(t, "POST", keysURL, map[string]any{"service": "share", "name": "ci", "owner": "alice",
			"privileges": []string{"get", "list"}, "description": "for CI", "allowedIps": []string{"203.0.113.0/24", "2001:db8::1"},
			"adminProjects": []string{"P1"}, "notValidBefore": "2026-01-01T00:00:00Z", "notValidAfter": "2027-01-01T00:00:00Z"})
		if r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var k keystore.Key
		r.json(t, &k)
		if r.header.Get("Location") != "/webapi/keys/"+k.ID {
			t.Errorf("Location %q", r.header.Get("Location"))
		}
		if !strings.HasPrefix(k.Token, "kg_") || len(k.Token) != 53 || k.TokenPrefix != k.Token[:12] {
			t.Errorf("token %q prefix %q", k.Token, k.TokenPrefix)
		}
		if k.Service != "share" || k.Name != "ci" || k.Owner != "alice" || k.Description != "for CI" ||
			strings.Join(k.AllowedIPs, ",") != "203.0.113.0/24,2001:db8::1" || strings.Join(k.AdminProjects, ",") != "P1" ||
			k.NotValidBefore == nil || k.NotValidAfter == nil || k.UsageCount != 0 || k.LastUsageTime != nil || k.CreationTime.IsZero() {
			t.Errorf("key %+v", k)
		}
		got := do(t, "GET", keysURL+"/"+k.ID, nil)
		if got.status != 200 || strings.Contains(string(got.body), k.Token) || strings.Contains(string(got.body), `"token"`) {
			t.Errorf("get: %d %s", got.status, got.body)
		}
		rev := do(t, "POST", keysURL+"/"+k.ID+"/reveal", nil)
		var tok struct{ Token string }
		rev.json(t, &tok)
		if rev.status != 200 || tok.Token != k.Token {
			t.Errorf("reveal: %d %s", rev.status, rev.body)
		}
	})

	t.Run("bad input lists every field and changes nothing", func(t *testing.T) {
		before := do(t, "GET", keysURL, nil).body
		r := do(t, "POST", keysURL, map[string]any{"service": "contracts", "name": strings.Repeat("é", 41), "owner": "alice",
			"description": strings.Repeat("x", 4001), "privileges": []string{"get", "fly"},
			"allowedIps": []string{"10.0.0.300", "1.2.3.4/40", "::1"}, "adminProjects": []string{"P1"},
			"notValidBefore": "2027-01-01T00:00:00Z", "notValidAfter": "2026-01-01T00:00:00Z"})
		if r.status != 400 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		p := r.problem(t)
		var fields []string
		for _, e := range p.Errors {
			fields = append(fields, e.Field)
			if e.Message == "" || e.Code == "" {
				t.Errorf("error without message or code: %+v", e)
			}
		}
		sort.Strings(fields)
		want := "adminProjects,allowedIps[0],allowedIps[1],description,name,notValidAfter,privileges[1]"
		if strings.Join(fields, ",") != want || p.Code != "invalid_request" {
			t.Errorf("fields %v, want %s", fields, want)
		}
		if after := do(t, "GET", keysURL, nil).body; string(after) != string(before) {
			t.Errorf("a refused create changed the key list")
		}
	})

	t.Run("refusals", func(t *testing.T) {
		k := createKey(t, map[string]any{"service": "contracts", "name": "n", "owner": "o", "privileges": []string{"get"}})
		tests := []struct {
			name, method, url string
			body              any
			status            int
			code              string
		}{
			{"unknown key", "GET", keysURL + "/6f1c1b5e-0000-4000-8000-000000000000", nil, 404, "not_found"},
			{"malformed key id", "GET", keysURL + "/nope", nil, 404, "not_found"},
			{"update unknown key", "PATCH", keysURL + "/nope", map[string]any{"name": "x"}, 404, "not_found"},
			{"reveal unknown key", "POST", keysURL + "/nope/reveal", nil, 404, "not_found"},
			{"delete unknown key", "DELETE", keysURL + "/nope", nil, 404, "not_found"},
			{"owner is fixed", "PATCH", keysURL + "/" + k.ID, map[string]any{"owner": "mallory"}, 400, "invalid_request"},
			{"unknown field", "POST", keysURL, map[string]any{"service": "contracts", "name": "n", "owner": "o", "privileges": []string{"get"}, "color": "red"}, 400, "invalid_request"},
			{"not JSON", "POST", keysURL, "name=x", 400, "invalid_request"},
			{"unknown service filter", "GET", keysURL + "?service=mail", nil, 400, "invalid_request"},
			{"query string that does not decode", "GET", keysURL + "?service=%zz", nil, 400, "invalid_request"},
			{"query string with a ';'", "GET", keysURL + "?service=share;x=1", nil, 400, "invalid_request"},
			{"wrong method", "PUT", keysURL + "/" + k.ID, map[string]any{}, 405, "method_not_allowed"},
			{"trailing slash", "GET", keysURL + "/" + k.ID + "/", nil, 404, "not_found"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := do(t, tc.method, tc.url, tc.body)
				if r.status != tc.status {
					t.Fatalf("%d %s", r.status, r.body)
				}
				if p := r.problem(t); p.Code != tc.code {
					t.Errorf("code %s, want %s", p.Code, tc.code)
				}
			})
		}
	})

	t.Run("update changes only what it names", func(t *testing.T) {
		k := createKey(t, map[string]any{"service": "contracts", "name": "before", "owner": "o", "privileges": []string{"get"},
			"description": "kept", "notValidAfter": "2030-01-01T00:00:00Z"})
		r := do(t, "PATCH", keysURL+"/"+k.ID, map[string]any{"name": "after", "privileges": []string{"get", "search"}, "notValidAfter": nil})
		var u keystore.Key
		r.json(t, &u)
		if r.status != 200 || u.Name != "after" || u.Description != "kept" || len(u.Privileges) != 2 || u.NotValidAfter != nil || u.Owner != "o" {
			t.Errorf("%d %s", r.status, r.body)
		}
		if !u.LastModificationTime.After(k.LastModificationTime) && !u.LastModificationTime.Equal(k.LastModificationTime) {
			t.Errorf("lastModificationTime went back")
		}
	})

	t.Run("list by service", func(t *testing.T) {
		var all, share []keystore.Key
		do(t, "GET", keysURL, nil).json(t, &all)
		do(t, "GET", keysURL+"?service=share", nil).json(t, &share)
		if len(share) != 1 || len(all) < 3 {
			t.Errorf("%d keys, %d share keys", len(all), len(share))
		}
		for _, k := range all {
			if k.Token != "" {
				t.Errorf("list shows a token")
			}
		}
	})
}

func TestAdminTemplates(t *testing.T) { eachBackend(t, testAdminTemplates) }

func testAdminTemplates(t *testing.T, b backend) {
	startGateway(t, b, echoSite)
	url := adminURL + "/webapi/templates"
	tpl := map[string]any{"id": "PAGE-1", "collectionId": "SPACE", "title": "NDA", "body": "Keep it secret."}
	if r := do(t, "POST", url, tpl); r.status != 201 {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", url, tpl); r.status != 409 || r.problem(t).Code != "conflict" {
		t.Fatalf("add again: %d %s", r.status, r.body)
	}
	r := do(t, "POST", url, map[string]any{"id": "", "collectionId": "Ü", "title": ""})
	if r.status != 400 || len(r.problem(t).Errors) != 3 {
		t.Fatalf("bad template: %d %s", r.status, r.body)
	}
	tpl["title"] = "NDA v2"
	if r := do(t, "PUT", url+"/PAGE-1", tpl); r.status != 200 {
		t.Fatalf("replace: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", url+"/PAGE-1", nil); r.status != 200 || !strings.Contains(string(r.body), "NDA v2") {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", url, nil); r.status != 200 || !strings.Contains(string(r.body), "PAGE-1") {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	if r := do(t, "DELETE", url+"/PAGE-1", nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", url+"/PAGE-1", nil); r.status != 404 {
		t.Fatalf("get after delete: %d %s", r.status, r.body)
	}
}

// The admin endpoint audits its own actions, without a user: templates as
// keys, failures with their code, and paths as the API names them even for
// a request in absolute form (the request line carrying scheme and host).
func TestAdminAudit(t *testing.T) {
	g := startGateway(t, bolt, echoSite)
	tpl := map[string]any{"id": "PAGE-9", "collectionId": "SPACE", "title": "NDA", "body": "Keep it secret."}
	for i, status := range []int{http.StatusCreated, http.StatusOK} {
		if r := do(t, http.MethodPut, adminURL+"/webapi/templates/PAGE-9", tpl); r.status != status {
			t.Fatalf("put %d: %d %s", i, r.status, r.body)
		}
	}
	if r := do(t, http.MethodPost, adminURL+"/webapi/keys", map[string]any{"service": "share"}); r.status != http.StatusBadRequest {
		t.Fatalf("bad create: %d %s", r.status, r.body)
	}

	// Absolute form, and an escape where none is needed.
	conn, err := net.Dial("tcp", strings.TrimPrefix(adminURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"service":"share","name":"abs","owner":"alice","privileges":["get"]}`
	fmt.Fprintf(conn, "POST %s/webapi/%%6Beys?x=1 HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		adminURL, strings.TrimPrefix(adminURL, "http://"), len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(resp.Header.Get("Location"), "/webapi/keys/") {
		t.Fatalf("absolute form: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}

	// Failed actions name the record their path addresses, as the
	// action's own entry would; a token in the path, only in the path.
	created := strings.TrimPrefix(resp.Header.Get("Location"), "/webapi/keys/")
	unknown := uuid.NewString()
	tok := token.New()
	failed := []struct {
		method, path string
		body         any
		status       int
	}{
		{http.MethodPatch, "/webapi/keys/" + created, map[string]any{"name": ""}, http.StatusBadRequest},
		{http.MethodDelete, "/webapi/plans/" + unknown, nil, http.StatusNotFound},
		{http.MethodDelete, "/webapi/keys/" + tok, nil, http.StatusNotFound},
		{http.MethodDelete, "/webapi/templates/PAGE-10", nil, http.StatusNotFound},
	}
	for _, f := range failed {
		if r := do(t, f.method, adminURL+f.path, f.body); r.status != f.status {
			t.Fatalf("%s %s: %d %s", f.method, f.path, r.status, r.body)
		}
	}

	want := []struct{ msg, path, templateID, reason, keyID, planID string }{
		{"template added", "/webapi/templates/PAGE-9", "PAGE-9", "", "", ""},
		{"template replaced", "/webapi/templates/PAGE-9", "PAGE-9", "", "", ""},
		{"admin action failed", "/webapi/keys", "", "invalid_request", "", ""},
		{"key created", "/webapi/keys", "", "", created, ""},
		{"admin action failed", "/webapi/keys/" + created, "", "invalid_request", created, ""},
		{"admin action failed", "/webapi/plans/" + unknown, "", "not_found", "", unknown},
		{"admin action failed", token.Redact("/webapi/keys/" + tok), "", "not_found", "", ""},
		{"admin action failed", "/webapi/templates/PAGE-10", "PAGE-10", "not_found", "", ""},
	}
	var got []map[string]any
	testwait.For(t, testwait.Generous, "the audit entries", func() bool {
		got = g.auditEntries(t, 0)
		return len(got) >= len(want)
	})
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		id, _ := e["template_id"].(string)
		reason, _ := e["reason"].(string)
		keyID, _ := e["key_id"].(string)
		planID, _ := e["plan_id"].(string)
		if e["msg"] != w.msg || e["path"] != w.path || id != w.templateID || reason != w.reason || keyID != w.keyID || planID != w.planID ||
			e["user"] != nil || e["operation"] != "admin" {
			t.Errorf("entry %d: %v, want %+v", i, e, w)
		}
		// A key's failed action names it as its own entries do.
		if keyID != "" && (e["key_name"] != "abs" || e["owner"] != "alice" || e["service"] != "share") {
			t.Errorf("entry %d names key %s without its name, owner and service: %v", i, keyID, e)
		}
	}
	if raw, _ := os.ReadFile(filepath.Join(g.dir, "audit.log")); strings.Contains(string(raw), tok[len(tok)-12:]) {
		t.Error("a token pasted into a path reached the audit log")
	}
}

// TestAdminLegacyTemplateIDs: a template id that is no path segment
// ("..", ".", "a/b") is refused, and one stored by an earlier version can
// still be read and removed through the admin API, its id percent-encoded
// (%2E%2E is no dot segment to the admin endpoint).
func TestAdminLegacyTemplateIDs(t *testing.T) {
	g := startGateway(t, bolt, echoSite)
	url := adminURL + "/webapi/templates"
	for _, id := range []string{"..", ".", "a/b", "a b", "x?y"} {
		tpl := map[string]any{"id": id, "collectionId": "SPACE", "title": "NDA"}
		r := do(t, "POST", url, tpl)
		if r.status != 400 || len(r.problem(t).Errors) != 1 || r.problem(t).Errors[0].Field != "id" {
			t.Errorf("POST id %q: %d %s", id, r.status, r.body)
		}
	}
	if r := do(t, "PUT", url+"/%2E%2E", map[string]any{"collectionId": "SPACE", "title": "NDA"}); r.status != 400 {
		t.Errorf("PUT ..: %d %s", r.status, r.body)
	}
	if r := do(t, "POST", url, map[string]any{"id": "PAGE-42", "collectionId": "SPACE", "title": "NDA", "body": ""}); r.status != 201 {
		t.Errorf("POST PAGE-42: %d %s", r.status, r.body)
	}

	// Stored past the rule while no gateway runs, as an earlier version did.
	g.tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", caddymodule.TestAdminPort), "caddyfile")
	st, err := caddymodule.BoltStorage{}.OpenStores(caddymodule.StorageEnv{DataDir: g.dir})
	must(t, "opening the file", err)
	for _, id := range []string{"..", ".", "a/b"} {
		tpl := contracts.Template{ID: id, CollectionID: "SPACE", Title: "Old " + id}
		must(t, "storing "+id, st.DB.Update(t.Context(), func(tx storage.Tx) error {
			_, err := st.Templates.PutTemplate(t.Context(), tx, &tpl, sha256.Sum256([]byte(id)), false)
			return err
		}))
	}
	must(t, "closing the file", st.DB.Close())
	g.load(echoSite)

	r := do(t, "GET", url, nil)
	var list []contracts.Template
	r.json(t, &list)
	if r.status != 200 || len(list) != 4 || list[0].ID != "." || list[1].ID != ".." {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	for id, path := range map[string]string{"..": "%2E%2E", ".": "%2e", "a/b": "a%2Fb"} {
		var got contracts.Template
		if r := do(t, "GET", url+"/"+path, nil); r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.Title != "Old "+id {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
		if r := do(t, "DELETE", url+"/"+path, nil); r.status != 204 {
			t.Errorf("DELETE %s: %d %s", path, r.status, r.body)
		}
		if r := do(t, "GET", url+"/"+path, nil); r.status != 404 {
			t.Errorf("GET %s after DELETE: %d %s", path, r.status, r.body)
		}
	}
}

// TestDisableKey: PATCH enabled false refuses the key's next request with
// 401 key_disabled (counted, audited), keeps everything else, and enabled
// again the key works as before; on both backends.
func TestDisableKey(t *testing.T) { eachBackend(t, testDisableKey) }

func testDisableKey(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	hooks := newHookReceiver(t)
	if r := do(t, "POST", adminURL+"/webapi/webhooks", map[string]any{"url": hooks.URL + "/keys", "events": []string{"key.disabled"}, "owners": []string{"alice"}}); r.status != 201 {
		t.Fatalf("subscribe: %d %s", r.status, r.body)
	}
	k := createKey(t, map[string]any{"service": "contracts", "name": "ci", "owner": "alice", "privileges": []string{"get", "search"}})
	if !k.Enabled {
		t.Fatalf("a new key is not enabled: %+v", k)
	}
	use := func() response { return do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(k.Token)...) }
	if r := use(); r.status != 200 {
		t.Fatalf("before: %d %s", r.status, r.body)
	}
	one := adminURL + "/webapi/keys/" + k.ID
	refusedBefore := disabledRefusals(t)
	r := do(t, "PATCH", one, map[string]any{"enabled": false})
	var got keystore.Key
	r.json(t, &got)
	if r.status != 200 || got.Enabled || got.UsageCount != 1 || got.Name != "ci" {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	r = use()
	if p := r.problem(t); r.status != 401 || p.Code != "key_disabled" ||
		r.header.Get("WWW-Authenticate") != `Bearer realm="webapi", error="invalid_token"` {
		t.Fatalf("a disabled key: %d %v %s", r.status, r.header, r.body)
	}
	if n := disabledRefusals(t); n != refusedBefore+1 {
		t.Errorf("%d refusals counted, want %d", n, refusedBefore+1)
	}
	if logs := g.readLogs(t, `"reason":"key_disabled"`); !strings.Contains(logs, `"key_id":"`+k.ID+`"`) || !strings.Contains(logs, `"msg":"key disabled"`) {
		t.Errorf("the disable or the refusal is not audited: %s", logs)
	}
	// Every refusal's series is there from the start, at zero if need be.
	if m := do(t, "GET", adminURL+"/metrics", nil); !strings.Contains(string(m.body), `keygate_auth_refusals_total{reason="key_disabled",service="share"} `) {
		t.Error("no key_disabled series for share")
	}
	if r := do(t, "PATCH", one, map[string]any{"enabled": nil}); r.status != 400 || r.problem(t).Errors[0].Field != "enabled" {
		t.Errorf("enabled null: %d %s", r.status, r.body)
	}
	// Subscribers of key.disabled heard of it, with no token.
	_, bodies := hooks.wait(t, 1)
	var ev struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(bodies[0], &ev); err != nil || ev.Type != "key.disabled" || ev.Data["id"] != k.ID ||
		ev.Data["owner"] != "alice" || ev.Data["service"] != "contracts" || ev.Data["name"] != "ci" || strings.Contains(string(bodies[0]), k.Token) {
		t.Errorf("delivery %s (%v)", bodies[0], err)
	}
	if r := do(t, "PATCH", one, map[string]any{"enabled": true}); r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	if r := use(); r.status != 200 {
		t.Fatalf("enabled again: %d %s", r.status, r.body)
	}
	do(t, "GET", one, nil).json(t, &got)
	if !got.Enabled || got.UsageCount < 2 {
		t.Errorf("after enabling: %+v", got)
	}
}

// disabledRefusals reads keygate_auth_refusals_total for key_disabled on
// contracts (0 before the first).
func disabledRefusals(t *testing.T) int {
	t.Helper()
	return metricValue(t, `keygate_auth_refusals_total{reason="key_disabled",service="contracts"}`)
}

// TestRollKey: POST roll answers the key with a new token; the previous
// token works through its grace period, each use audited as such; bad
// grace periods are 400s naming graceSeconds; an empty body takes the
// default day; key.rolled reaches its subscribers. On both backends.
func TestRollKey(t *testing.T) { eachBackend(t, testRollKey) }

func testRollKey(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	hooks := newHookReceiver(t)
	if r := do(t, "POST", adminURL+"/webapi/webhooks", map[string]any{"url": hooks.URL + "/keys", "events": []string{"key.rolled"}}); r.status != 201 {
		t.Fatalf("subscribe: %d %s", r.status, r.body)
	}
	k := createKey(t, map[string]any{"service": "contracts", "name": "ci", "owner": "alice", "privileges": []string{"get", "search"}})
	roll := adminURL + "/webapi/keys/" + k.ID + "/roll"
	use := func(token string) response { return do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(token)...) }

	for _, body := range []any{map[string]any{"graceSeconds": -1}, map[string]any{"graceSeconds": 2592001}, map[string]any{"graceSeconds": "1h"},
		map[string]any{"grace": 5}, map[string]any{"graceSeconds": 1.5}} {
		if r := do(t, "POST", roll, body); r.status != 400 {
			t.Errorf("roll %v: %d %s", body, r.status, r.body)
		}
	}
	if r := do(t, "POST", adminURL+"/webapi/keys/00000000-0000-4000-8000-000000000000/roll", map[string]any{"graceSeconds": 60}); r.status != 404 {
		t.Errorf("roll an unknown key: %d", r.status)
	}

	r := do(t, "POST", roll, json.RawMessage(`{"graceSeconds": 3.6e3}`)) // a whole number, however written
	var rolled keystore.Key
	r.json(t, &rolled)
	if r.status != 200 || rolled.ID != k.ID || rolled.Token == "" || rolled.Token == k.Token || rolled.PreviousTokenExpiry == nil ||
		time.Until(*rolled.PreviousTokenExpiry) < 59*time.Minute || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("roll: %d %s", r.status, r.body)
	}
	if r := use(rolled.Token); r.status != 200 {
		t.Errorf("the new token: %d %s", r.status, r.body)
	}
	if r := use(k.Token); r.status != 200 {
		t.Errorf("the previous token in its grace period: %d %s", r.status, r.body)
	}
	// A refused use of it is marked too (create: a privilege it lacks).
	if r := do(t, "POST", siteURL+"/webapi/contracts", map[string]any{}, bearer(k.Token)...); r.status != 403 {
		t.Errorf("the previous token without the privilege: %d %s", r.status, r.body)
	}
	logs := g.readLogs(t, `"reason":"missing_privilege"`)
	if n := strings.Count(logs, `"previous_token":true`); n != 2 {
		t.Errorf("%d uses audited with previous_token, want 2 (one used, one refused)", n)
	}
	if !strings.Contains(logs, `"msg":"key rolled"`) {
		t.Errorf("the roll is not audited")
	}
	_, bodies := hooks.wait(t, 1)
	if !strings.Contains(string(bodies[0]), `"type":"key.rolled"`) || !strings.Contains(string(bodies[0]), k.ID) ||
		strings.Contains(string(bodies[0]), rolled.Token) || strings.Contains(string(bodies[0]), k.Token) {
		t.Errorf("delivery %s", bodies[0])
	}

	// Again, with no body: the default day; the token before is over.
	r = do(t, "POST", roll, nil)
	var again keystore.Key
	r.json(t, &again)
	if r.status != 200 || again.PreviousTokenExpiry == nil || time.Until(*again.PreviousTokenExpiry) < 23*time.Hour {
		t.Fatalf("roll without a body: %d %s", r.status, r.body)
	}
	if r := use(k.Token); r.status != 401 || r.problem(t).Code != "invalid_key" {
		t.Errorf("the token before the previous: %d %s", r.status, r.body)
	}
	if r := use(rolled.Token); r.status != 200 {
		t.Errorf("the previous token: %d %s", r.status, r.body)
	}

}
