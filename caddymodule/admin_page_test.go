package caddymodule_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/adminpage"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/keystore"
)

// pageUser and pagePassword log in to the test configs' Web API Keys page.
const (
	pageUser     = "alice"
	pagePassword = "correct horse battery staple"
)

// adminPageSite is the share API and four Web API Keys pages: behind
// basic_auth at /admin/ and, its prefix stripped by handle_path, at
// /keys/; behind an SSO proxy's forward_auth at /sso/ (ssoAddr answers
// the check); and, wrongly, unprotected at /open/.
func adminPageSite(t *testing.T, ssoAddr string) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(pagePassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := openapitest.Default()
	v.SetAdminPage(strings.TrimPrefix(siteURL, "http://"), "/admin", "/sso", "/open", "/keys")
	t.Cleanup(func() { v.SetAdminPage(strings.TrimPrefix(siteURL, "http://")) })
	return fmt.Sprintf(`
	handle /webapi/share* {
		webapi_auth share
		webapi_share
	}
	handle /admin/* {
		basic_auth {
			%s %s
		}
		webapi_admin
	}
	handle /sso/* {
		forward_auth %s {
			uri /check
			copy_headers Remote-User
		}
		webapi_admin {
			user_header Remote-User
		}
	}
	handle /open/* {
		webapi_admin
	}
	handle_path /keys/* {
		basic_auth {
			%[1]s %[2]s
		}
		webapi_admin
	}`, pageUser, hash, ssoAddr)
}

// ssoProxy is an SSO check for forward_auth: a request with the cookie
// sso=<user> is that user, any other is refused.
func ssoProxy(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie("sso"); err == nil && c.Value != "" {
			w.Header().Set("Remote-User", c.Value)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pageCall is a JSON call the page's own script makes, logged in.
func pageCall(t *testing.T, method, path string, body any, extra ...string) response {
	t.Helper()
	header := append([]string{
		"Authorization", "Basic " + basic(pageUser, pagePassword),
		"Sec-Fetch-Site", "same-origin",
		"Origin", siteURL,
		adminpage.RequestHeader, "1",
	}, extra...)
	return do(t, method, siteURL+"/admin/"+path, body, header...)
}

func basic(user, password string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, password)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// TestAdminPage drives the Web API Keys page's JSON calls as the page
// does, on both backends: a share key's life from create to delete, the
// token used on the share API in between, every action audited as the
// logged-in user; templates; and every way in for someone else refused.
func TestAdminPage(t *testing.T) { eachBackend(t, testAdminPage) }

func testAdminPage(t *testing.T, b backend) {
	g := startGateway(t, b, adminPageSite(t, ssoProxy(t)))

	t.Run("the page, to its user", func(t *testing.T) {
		r := do(t, http.MethodGet, siteURL+"/admin/", nil, "Authorization", "Basic "+basic(pageUser, pagePassword))
		if r.status != http.StatusOK || !strings.Contains(string(r.body), "Signed in as <strong id=\"user\">alice</strong>") {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if r.header.Get("Content-Security-Policy") != adminpage.ContentSecurityPolicy || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("headers %v", r.header)
		}
		for _, asset := range []string{"admin.js", "admin.css"} {
			if a := do(t, http.MethodGet, siteURL+"/admin/"+asset, nil, "Authorization", "Basic "+basic(pageUser, pagePassword)); a.status != http.StatusOK || len(a.body) == 0 {
				t.Errorf("%s: %d", asset, a.status)
			}
		}
	})

	t.Run("nobody else", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			path   string
			header []string
			status int
		}{
			{"no password", "/admin/", nil, http.StatusUnauthorized},
			{"a wrong password", "/admin/", []string{"Authorization", "Basic " + basic(pageUser, "guess")}, http.StatusUnauthorized},
			{"no authentication handler in front", "/open/", nil, http.StatusForbidden},
			{"no authentication handler, JSON call", "/open/webapi/keys?service=share", []string{"Sec-Fetch-Site", "same-origin", adminpage.RequestHeader, "1"}, http.StatusForbidden},
			{"a forged user header without the SSO session", "/sso/", []string{"Remote-User", "mallory"}, http.StatusUnauthorized},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := do(t, http.MethodGet, siteURL+tc.path, nil, tc.header...)
				if r.status != tc.status {
					t.Fatalf("%d, want %d: %s", r.status, tc.status, r.body)
				}
				if strings.Contains(string(r.body), "<html") {
					t.Error("the page was served")
				}
				if tc.status == http.StatusForbidden {
					if p := r.problem(t); p.Code != "forbidden" || !strings.Contains(p.Detail, "basic_auth") {
						t.Errorf("problem %+v: it must say how to protect the page", p)
					}
				}
			})
		}
	})

	var key keystore.Key
	t.Run("create a share key", func(t *testing.T) {
		r := pageCall(t, http.MethodPost, "webapi/keys", map[string]any{
			"service": "share", "name": "page key", "owner": "bob", "privileges": []string{"get", "list"},
			"description": "made on the page", "notValidBefore": nil, "allowedIps": []string{}, "adminProjects": []string{"P1"},
		})
		if r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		r.json(t, &key)
		if !strings.HasPrefix(key.Token, "kg_") || key.Owner != "bob" || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s %v", r.body, r.header)
		}
		if loc := r.header.Get("Location"); loc != "/admin/webapi/keys/"+key.ID {
			t.Errorf("Location %q: the page's own path to the key", loc)
		}
		if u := do(t, http.MethodGet, siteURL+"/webapi/share?userId=bob", nil, bearer(key.Token)...); u.status != http.StatusOK {
			t.Fatalf("the new token on the share API: %d %s", u.status, u.body)
		}
	})

	t.Run("invalid fields are named", func(t *testing.T) {
		before := pageCall(t, http.MethodGet, "webapi/keys?service=share", nil)
		r := pageCall(t, http.MethodPost, "webapi/keys", map[string]any{
			"service": "share", "name": strings.Repeat("n", 41), "owner": "bob", "privileges": []string{"get", "search"}, "allowedIps": []string{"10.0.0.300"},
		})
		if r.status != http.StatusBadRequest {
			t.Fatalf("%d %s", r.status, r.body)
		}
		fields := map[string]bool{}
		for _, e := range r.problem(t).Errors {
			fields[e.Field] = true
		}
		for _, f := range []string{"name", "privileges[1]", "allowedIps[0]"} {
			if !fields[f] {
				t.Errorf("no error for %s in %s", f, r.body)
			}
		}
		if after := pageCall(t, http.MethodGet, "webapi/keys?service=share", nil); string(after.body) != string(before.body) {
			t.Errorf("the refused create changed the keys:\n%s\n%s", before.body, after.body)
		}
	})

	t.Run("reveal", func(t *testing.T) {
		r := pageCall(t, http.MethodPost, "webapi/keys/"+key.ID+"/reveal", nil)
		var got struct{ Token string }
		r.json(t, &got)
		if r.status != http.StatusOK || got.Token != key.Token || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("%d %v", r.status, r.header)
		}
	})

	t.Run("the usage series, by day and by hour", func(t *testing.T) {
		for _, tc := range []struct {
			resolution string
			buckets    int
		}{{"day", 30}, {"hour", 48}} {
			r := pageCall(t, http.MethodGet, "webapi/keys/"+key.ID+"/usage?resolution="+tc.resolution, nil)
			var series keystore.UsageSeries
			r.json(t, &series)
			ok := uint64(0)
			for _, b := range series.Buckets {
				ok += b.OK
			}
			// The create's request on the share API, let through.
			if r.status != http.StatusOK || series.KeyID != key.ID || series.Resolution != tc.resolution || len(series.Buckets) < tc.buckets || ok != 1 {
				t.Errorf("by %s: %d %s", tc.resolution, r.status, r.body)
			}
		}
		if r := pageCall(t, http.MethodGet, "webapi/keys/"+key.ID+"/usage?resolution=minute", nil); r.status != http.StatusBadRequest || len(r.problem(t).Errors) != 1 || r.problem(t).Errors[0].Field != "resolution" {
			t.Errorf("by minute: %d %s", r.status, r.body)
		}
	})

	t.Run("restrict the allowed IPs: the next request is refused", func(t *testing.T) {
		r := pageCall(t, http.MethodPatch, "webapi/keys/"+key.ID, map[string]any{"allowedIps": []string{"203.0.113.0/24"}})
		if r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		u := do(t, http.MethodGet, siteURL+"/webapi/share?userId=bob", nil, bearer(key.Token)...)
		if u.status != http.StatusForbidden || u.problem(t).Code != "ip_not_allowed" {
			t.Fatalf("%d %s", u.status, u.body)
		}
	})

	t.Run("a cross-site form post is refused and changes nothing", func(t *testing.T) {
		before := pageCall(t, http.MethodGet, "webapi/keys?service=share", nil)
		form := url.Values{"service": {"share"}, "name": {"evil"}, "owner": {"mallory"}, "privileges": {"get"}}
		r := do(t, http.MethodPost, siteURL+"/admin/webapi/keys", form.Encode(),
			"Authorization", "Basic "+basic(pageUser, pagePassword), // the browser's cached login
			"Content-Type", "application/x-www-form-urlencoded",
			"Sec-Fetch-Site", "cross-site", "Origin", "http://evil.example")
		if r.status != http.StatusForbidden || r.problem(t).Code != "forbidden" {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if r := do(t, http.MethodDelete, siteURL+"/admin/webapi/keys/"+key.ID, nil, "Authorization", "Basic "+basic(pageUser, pagePassword),
			"Sec-Fetch-Site", "same-site", "Origin", "http://localhost:8080", adminpage.RequestHeader, "1"); r.status != http.StatusForbidden {
			t.Fatalf("a same-site delete: %d %s", r.status, r.body)
		}
		if after := pageCall(t, http.MethodGet, "webapi/keys?service=share", nil); string(after.body) != string(before.body) {
			t.Errorf("refused requests changed the keys:\n%s\n%s", before.body, after.body)
		}
	})

	t.Run("templates", func(t *testing.T) {
		r := pageCall(t, http.MethodPost, "webapi/templates", map[string]any{"id": "T-PAGE", "collectionId": "C-1", "title": "From the page", "body": "Terms."})
		if r.status != http.StatusCreated || r.header.Get("Location") != "/admin/webapi/templates/T-PAGE" {
			t.Fatalf("%d %v %s", r.status, r.header, r.body)
		}
		var list []struct{ ID string }
		pageCall(t, http.MethodGet, "webapi/templates", nil).json(t, &list)
		if len(list) != 1 || list[0].ID != "T-PAGE" {
			t.Fatalf("templates %+v", list)
		}
		if r := pageCall(t, http.MethodDelete, "webapi/templates/T-PAGE", nil); r.status != http.StatusNoContent {
			t.Fatalf("remove: %d %s", r.status, r.body)
		}
		if r := do(t, http.MethodGet, adminURL+"/webapi/templates/T-PAGE", nil); r.status != http.StatusNotFound {
			t.Fatalf("after remove: %d", r.status)
		}
	})

	// The Consumers view's calls: plans, consumers, a consumer's keys and
	// usage, under the page's mount as on the admin endpoint.
	var planID, consumerID string
	t.Run("consumers and plans", func(t *testing.T) {
		r := pageCall(t, http.MethodPost, "webapi/plans", map[string]any{"name": "page plan", "quota": map[string]any{"limit": 10, "period": "day"}})
		var plan keystore.Plan
		r.json(t, &plan)
		if r.status != http.StatusCreated || r.header.Get("Location") != "/admin/webapi/plans/"+plan.ID {
			t.Fatalf("plan: %d %v %s", r.status, r.header, r.body)
		}
		planID = plan.ID
		r = pageCall(t, http.MethodPost, "webapi/consumers", map[string]any{"name": "page consumer", "planId": plan.ID})
		var consumer keystore.Consumer
		r.json(t, &consumer)
		if r.status != http.StatusCreated || r.header.Get("Location") != "/admin/webapi/consumers/"+consumer.ID || consumer.QuotaUsed == nil {
			t.Fatalf("consumer: %d %v %s", r.status, r.header, r.body)
		}
		consumerID = consumer.ID
		var consumers []keystore.Consumer
		pageCall(t, http.MethodGet, "webapi/consumers", nil).json(t, &consumers)
		if len(consumers) != 1 || consumers[0].ID != consumer.ID {
			t.Fatalf("consumers %+v", consumers)
		}
		var keys []keystore.Key
		r = pageCall(t, http.MethodGet, "webapi/keys?consumerId="+consumer.ID, nil)
		if r.json(t, &keys); r.status != http.StatusOK || len(keys) != 0 {
			t.Fatalf("the consumer's keys: %d %s", r.status, r.body)
		}
		var series keystore.UsageSeries
		r = pageCall(t, http.MethodGet, "webapi/consumers/"+consumer.ID+"/usage?resolution=day", nil)
		if r.json(t, &series); r.status != http.StatusOK || series.ConsumerID != consumer.ID || len(series.Buckets) < 30 {
			t.Fatalf("the consumer's usage: %d %s", r.status, r.body)
		}
		if r := pageCall(t, http.MethodDelete, "webapi/plans/"+plan.ID, nil); r.status != http.StatusConflict {
			t.Fatalf("a plan in use deleted: %d %s", r.status, r.body)
		}
		for _, path := range []string{"webapi/consumers/" + consumer.ID, "webapi/plans/" + plan.ID} {
			if r := pageCall(t, http.MethodDelete, path, nil); r.status != http.StatusNoContent {
				t.Fatalf("delete %s: %d %s", path, r.status, r.body)
			}
		}
	})

	t.Run("SSO: the user the proxy names, not the client", func(t *testing.T) {
		r := do(t, http.MethodGet, siteURL+"/sso/", nil, "Cookie", "sso=carol", "Remote-User", "mallory")
		if r.status != http.StatusOK || !strings.Contains(string(r.body), ">carol</strong>") || strings.Contains(string(r.body), "mallory") {
			t.Fatalf("%d %s", r.status, r.body)
		}
		r = do(t, http.MethodPost, siteURL+"/sso/webapi/keys/"+key.ID+"/reveal", nil,
			"Cookie", "sso=carol", "Remote-User", "mallory", "Sec-Fetch-Site", "same-origin", adminpage.RequestHeader, "1")
		if r.status != http.StatusOK {
			t.Fatalf("reveal: %d %s", r.status, r.body)
		}
	})

	t.Run("a mount that Caddy strips still names the resources", func(t *testing.T) {
		r := do(t, http.MethodPost, siteURL+"/keys/webapi/templates", map[string]any{"id": "T-STRIP", "collectionId": "C-1", "title": "Stripped", "body": "x"},
			"Authorization", "Basic "+basic(pageUser, pagePassword), "Sec-Fetch-Site", "same-origin", adminpage.RequestHeader, "1")
		if r.status != http.StatusCreated || r.header.Get("Location") != "/keys/webapi/templates/T-STRIP" {
			t.Fatalf("%d Location %q: %s", r.status, r.header.Get("Location"), r.body)
		}
	})

	t.Run("delete: the key stops working at once", func(t *testing.T) {
		if r := pageCall(t, http.MethodDelete, "webapi/keys/"+key.ID, nil); r.status != http.StatusNoContent {
			t.Fatalf("%d %s", r.status, r.body)
		}
		if u := do(t, http.MethodGet, siteURL+"/webapi/share?userId=bob", nil, bearer(key.Token)...); u.status != http.StatusUnauthorized {
			t.Fatalf("%d %s", u.status, u.body)
		}
	})

	t.Run("every action audited as its user", func(t *testing.T) {
		want := []struct{ msg, user, path, templateID string }{
			{"key created", "alice", "/admin/webapi/keys", ""},
			{"admin action failed", "alice", "/admin/webapi/keys", ""}, // the invalid create
			{"key revealed", "alice", "/admin/webapi/keys/" + key.ID + "/reveal", ""},
			{"key updated", "alice", "/admin/webapi/keys/" + key.ID, ""},
			{"admin page refused", "alice", "/admin/webapi/keys", ""},
			{"admin page refused", "alice", "/admin/webapi/keys/" + key.ID, ""},
			{"template added", "alice", "/admin/webapi/templates", "T-PAGE"},
			{"template removed", "alice", "/admin/webapi/templates/T-PAGE", "T-PAGE"},
			{"plan created", "alice", "/admin/webapi/plans", ""},
			{"consumer created", "alice", "/admin/webapi/consumers", ""},
			{"admin action failed", "alice", "/admin/webapi/plans/" + planID, ""}, // the plan in use
			{"consumer deleted", "alice", "/admin/webapi/consumers/" + consumerID, ""},
			{"plan deleted", "alice", "/admin/webapi/plans/" + planID, ""},
			{"key revealed", "carol", "/sso/webapi/keys/" + key.ID + "/reveal", ""},
			{"template added", "alice", "/keys/webapi/templates", "T-STRIP"},
			{"key deleted", "alice", "/admin/webapi/keys/" + key.ID, ""},
		}
		var got []map[string]any
		testwait.For(t, testwait.Generous, "the audit entries", func() bool {
			got = nil
			for _, e := range g.auditEntries(t, 0) {
				if e["operation"] == "admin" && e["user"] != nil {
					got = append(got, e)
				}
			}
			return len(got) >= len(want)
		})
		if len(got) != len(want) {
			t.Fatalf("%d entries with a user, want %d: %v", len(got), len(want), got)
		}
		for i, w := range want {
			e := got[i]
			if id, _ := e["template_id"].(string); e["msg"] != w.msg || e["user"] != w.user || e["path"] != w.path || id != w.templateID {
				t.Errorf("entry %d: %v, want %+v", i, e, w)
			}
			if ip, _ := e["client_ip"].(string); net.ParseIP(ip) == nil {
				t.Errorf("entry %d: client_ip %q", i, ip)
			}
		}
		// The page's refusal of an anonymous request is audited too, without a user.
		anonymous := 0
		for _, e := range g.auditEntries(t, 0) {
			if e["msg"] == "admin page refused" && e["user"] == nil {
				anonymous++
			}
		}
		if anonymous != 2 {
			t.Errorf("%d anonymous refusals audited, want 2", anonymous)
		}
		if logs := g.readLogs(t, ""); strings.Contains(logs, key.Token) {
			t.Error("a token is in the logs")
		}
	})
}

// The webapi_admin directive as the Caddyfile writes it, and what it
// refuses; a header name that is none fails the config's load.
func TestAdminPageCaddyfile(t *testing.T) {
	tests := []struct {
		name, directive, want, err string
	}{
		{"plain", "webapi_admin", `{"handler":"webapi_admin"}`, ""},
		{"user_header", "webapi_admin {\n user_header Remote-User\n}", `{"handler":"webapi_admin","user_header":"Remote-User"}`, ""},
		{"an argument", "webapi_admin * Remote-User", "", "wrong argument count"},
		{"unknown option", "webapi_admin {\n user_cookie sso\n}", "", `unknown option "user_cookie"`},
		{"user_header without a name", "webapi_admin {\n user_header\n}", "", "wrong argument count"},
		{"user_header with two", "webapi_admin {\n user_header A B\n}", "", "wrong argument count"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := caddymodule.AdaptCaddyfile(t, ":8081 {\n handle /admin/* {\n"+tt.directive+"\n }\n}\n", tt.err)
			if out != nil && !strings.Contains(string(out), tt.want) {
				t.Errorf("%s\nholds no %s", out, tt.want)
			}
		})
	}

	t.Run("a header name that is none", func(t *testing.T) {
		p := caddymodule.AdminPage{UserHeader: "Remote User"}
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "not a header name") {
			t.Fatalf("Validate: %v", err)
		}
		p.UserHeader = "X-Forwarded-User"
		if err := p.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
	})
}
