package caddymodule_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/keystore"
)

// echoSite answers authorized requests with what the key check handed on.
const echoSite = `
	handle /webapi/contracts* {
		webapi_auth contracts
		respond "key={http.webapi.key.id} owner={http.webapi.key.owner} op={http.webapi.operation} hdr={header.Keygate-Key-Id}/{header.Keygate-Key-Owner}/{header.Keygate-Operation} forged={header.Keygate-Forged} auth={header.Authorization}" 200
	}
	handle /webapi/share* {
		webapi_auth share
		respond "op={http.webapi.operation}" 200
	}
`

func TestKeyCheck(t *testing.T) { eachBackend(t, testKeyCheck) }

func testKeyCheck(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	now := time.Now().UTC()
	full := createKey(t, map[string]any{"service": "contracts", "name": "full", "owner": "alice",
		"privileges": []string{"get", "search", "create", "archive", "delete"}})
	getOnly := createKey(t, map[string]any{"service": "contracts", "name": "get only", "owner": "bob",
		"privileges": []string{"get"}})
	future := createKey(t, map[string]any{"service": "contracts", "name": "future", "owner": "carol",
		"privileges": []string{"get"}, "notValidBefore": now.Add(time.Hour).Format(time.RFC3339)})
	past := createKey(t, map[string]any{"service": "contracts", "name": "past", "owner": "carol",
		"privileges": []string{"get"}, "notValidAfter": now.Add(-time.Hour).Format(time.RFC3339)})
	elsewhere := createKey(t, map[string]any{"service": "contracts", "name": "elsewhere", "owner": "dave",
		"privileges": []string{"get"}, "allowedIps": []string{"10.0.0.0/8", "2001:db8::/32"}})
	loopback := createKey(t, map[string]any{"service": "contracts", "name": "loopback", "owner": "erin",
		"privileges": []string{"get"}, "allowedIps": []string{"127.0.0.1", "::1/128"}})
	shareKey := createKey(t, map[string]any{"service": "share", "name": "share", "owner": "frank",
		"privileges": []string{"get", "create"}})

	contract := siteURL + "/webapi/contracts/0b8f6d6e-2a5e-4d38-9a7e-1c2b3d4e5f60"
	tests := []struct {
		name      string
		method    string
		url       string
		header    []string
		status    int
		code      string
		wwwAuth   string
		allow     string
		bodyparts []string
	}{
		{name: "no header", method: "GET", url: contract, status: 401, code: "missing_key", wwwAuth: `Bearer realm="webapi"`},
		{name: "basic scheme", method: "GET", url: contract, header: []string{"Authorization", "Basic " + full.Token}, status: 401, code: "invalid_key", wwwAuth: `Bearer realm="webapi", error="invalid_token"`},
		{name: "two headers", method: "GET", url: contract, header: append(bearer(full.Token), bearer(full.Token)...), status: 401, code: "invalid_key", wwwAuth: `Bearer realm="webapi", error="invalid_token"`},
		{name: "unknown token", method: "GET", url: contract, header: bearer("kg_" + strings.Repeat("A", 43)), status: 401, code: "invalid_key", wwwAuth: `Bearer realm="webapi", error="invalid_token"`},
		{name: "key of the other service", method: "GET", url: contract, header: bearer(shareKey.Token), status: 401, code: "invalid_key", wwwAuth: `Bearer realm="webapi", error="invalid_token"`},
		{name: "not yet valid", method: "GET", url: contract, header: bearer(future.Token), status: 401, code: "key_not_valid", wwwAuth: `Bearer realm="webapi", error="invalid_token"`},
		{name: "no longer valid", method: "GET", url: contract, header: bearer(past.Token), status: 401, code: "key_not_valid", wwwAuth: `Bearer realm="webapi", error="invalid_token"`},
		{name: "address not allowed", method: "GET", url: contract, header: bearer(elsewhere.Token), status: 403, code: "ip_not_allowed"},
		{name: "address allowed", method: "GET", url: contract, header: bearer(loopback.Token), status: 200, bodyparts: []string{"op=get", "owner=erin"}},
		{name: "unknown path", method: "GET", url: contract + "/signers", header: bearer(full.Token), status: 404, code: "not_found"},
		{name: "wrong method", method: "PUT", url: contract, header: bearer(full.Token), status: 405, code: "method_not_allowed", allow: "GET, HEAD, PATCH, DELETE"},
		{name: "missing privilege", method: "POST", url: siteURL + "/webapi/contracts", header: bearer(getOnly.Token), status: 403, code: "missing_privilege", wwwAuth: `Bearer realm="webapi", error="insufficient_scope", scope="create"`},
		{name: "authorized, identity handed on, forged header dropped, token removed", method: "GET", url: contract,
			header: append(bearer(getOnly.Token), "Keygate-Forged", "evil", "Keygate-Key-Owner", "mallory"), status: 200,
			bodyparts: []string{"key=" + getOnly.ID, "owner=bob", "op=get", "hdr=" + getOnly.ID + "/bob/get", "forged= ", "auth="}},
		{name: "lowercase scheme", method: "GET", url: contract, header: []string{"Authorization", "bearer " + full.Token}, status: 200, bodyparts: []string{"owner=alice"}},
		{name: "search", method: "GET", url: siteURL + "/webapi/contracts?statuses=any", header: bearer(full.Token), status: 200, bodyparts: []string{"op=search"}},
		{name: "share create grants update", method: "PUT", url: siteURL + "/webapi/share/abc", header: bearer(shareKey.Token), status: 200, bodyparts: []string{"op=update"}},
		{name: "share get grants activity", method: "GET", url: siteURL + "/webapi/share/abc/activity", header: bearer(shareKey.Token), status: 200, bodyparts: []string{"op=activity"}},
		{name: "share key lacks list", method: "GET", url: siteURL + "/webapi/share", header: bearer(shareKey.Token), status: 403, code: "missing_privilege", wwwAuth: `Bearer realm="webapi", error="insufficient_scope", scope="list"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, tc.url, nil, tc.header...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			if tc.code != "" {
				if p := r.problem(t); p.Code != tc.code || p.Detail == "" {
					t.Errorf("problem %+v, want code %s with a detail", p, tc.code)
				}
			}
			if got := r.header.Get("WWW-Authenticate"); got != tc.wwwAuth {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.wwwAuth)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			for _, part := range tc.bodyparts {
				if !strings.Contains(string(r.body)+" ", part) {
					t.Errorf("body %q lacks %q", r.body, part)
				}
			}
		})
	}

	t.Run("audit entries, and no token in any log", func(t *testing.T) {
		entries := g.auditEntries(t, len(tests))
		var used, refused int
		for _, e := range entries {
			switch e["msg"] {
			case "key used":
				used++
				for _, f := range []string{"key_id", "key_name", "owner", "service", "operation", "method", "path", "client_ip", "status", "duration"} {
					if _, ok := e[f]; !ok {
						t.Errorf("key used entry lacks %s: %v", f, e)
					}
				}
			case "key refused":
				refused++
				if e["reason"] == "" || e["status"] == nil {
					t.Errorf("refusal without reason or status: %v", e)
				}
			}
			if e["logger"] != "webapi.audit" {
				t.Errorf("entry from logger %v", e["logger"])
			}
		}
		if used != 6 || refused != 12 {
			t.Errorf("%d used and %d refused entries, want 6 and 12", used, refused)
		}
		logs := g.readLogs(t, "")
		for _, k := range []string{full.Token, getOnly.Token, future.Token, past.Token, elsewhere.Token, loopback.Token, shareKey.Token} {
			if strings.Contains(logs, k) || strings.Contains(logs, k[len(k)-20:]) {
				t.Fatalf("a token appears in the logs")
			}
		}
	})

	t.Run("usage counted", func(t *testing.T) {
		r := do(t, "GET", adminURL+"/webapi/keys/"+full.ID, nil)
		if !strings.Contains(string(r.body), `"usageCount": 2`) || strings.Contains(string(r.body), `"lastUsageTime": null`) {
			t.Errorf("full key after 2 uses: %s", r.body)
		}
	})
}

func TestDeletedKeyStopsAtOnce(t *testing.T) { eachBackend(t, testDeletedKeyStopsAtOnce) }

func testDeletedKeyStopsAtOnce(t *testing.T, b backend) {
	startGateway(t, b, echoSite)
	k := createKey(t, map[string]any{"service": "contracts", "name": "doomed", "owner": "alice", "privileges": []string{"get"}})
	url := siteURL + "/webapi/contracts/x"
	if r := do(t, "GET", url, nil, bearer(k.Token)...); r.status != 200 {
		t.Fatalf("before delete: %d", r.status)
	}
	if r := do(t, "DELETE", adminURL+"/webapi/keys/"+k.ID, nil); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", url, nil, bearer(k.Token)...); r.status != 401 || r.problem(t).Code != "invalid_key" {
		t.Fatalf("after delete: %d %s", r.status, r.body)
	}
}

// TestRolledTokenRefusal: the token a roll replaced, once its grace
// period has ended, is refused invalid_key saying so, where any other
// unknown token gets the general words; neither names the key.
func TestRolledTokenRefusal(t *testing.T) {
	startGateway(t, bolt, echoSite)
	roll := func(k keystore.Key, grace int) keystore.Key {
		t.Helper()
		r := do(t, http.MethodPost, adminURL+"/webapi/keys/"+k.ID+"/roll", map[string]any{"graceSeconds": grace})
		if r.status != http.StatusOK {
			t.Fatalf("roll: %d %s", r.status, r.body)
		}
		var rolled keystore.Key
		r.json(t, &rolled)
		return rolled
	}
	body := map[string]any{"service": "contracts", "name": "rolled", "owner": "alice", "privileges": []string{"get"}}
	expired := createKey(t, body)
	expiredNew := roll(expired, 1)
	kept := createKey(t, body)
	keptNew := roll(kept, 3600)
	twice := createKey(t, body)
	roll(roll(twice, 3600), 3600)
	time.Sleep(time.Until(*expiredNew.PreviousTokenExpiry) + 100*time.Millisecond)

	const general = "the API key is not valid for this service"
	tests := []struct {
		name   string
		token  string
		status int
		detail string
	}{
		{"the new token", expiredNew.Token, http.StatusOK, ""},
		{"the previous token in its grace period", kept.Token, http.StatusOK, ""},
		{"the new token of a key rolled with a grace period", keptNew.Token, http.StatusOK, ""},
		{"the previous token after its grace period", expired.Token, http.StatusUnauthorized,
			"the API key's previous token expired when its grace period ended; use the new token"},
		{"a token two rolls back", twice.Token, http.StatusUnauthorized, general},
		{"an unknown token", "kg_" + strings.Repeat("A", 43), http.StatusUnauthorized, general},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, http.MethodGet, siteURL+"/webapi/contracts/0b8f6d6e-2a5e-4d38-9a7e-1c2b3d4e5f60", nil, bearer(tc.token)...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %s", r.status, tc.status, r.body)
			}
			if tc.status == http.StatusOK {
				return
			}
			if p := r.problem(t); p.Code != "invalid_key" || p.Detail != tc.detail {
				t.Errorf("problem %q %q, want invalid_key %q", p.Code, p.Detail, tc.detail)
			}
			if got := r.header.Get("WWW-Authenticate"); got != `Bearer realm="webapi", error="invalid_token"` {
				t.Errorf("WWW-Authenticate %q", got)
			}
			for _, secret := range []string{expired.ID, expiredNew.Token, "rolled", "alice"} {
				if strings.Contains(string(r.body), secret) {
					t.Errorf("the refusal names %q: %s", secret, r.body)
				}
			}
		})
	}
}

// TestBehindReverseProxy proves that an upstream behind webapi_auth and
// Caddy's reverse_proxy receives the identity and never the token.
func TestBehindReverseProxy(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.WriteHeader(http.StatusTeapot)
	}))
	defer upstream.Close()
	startGateway(t, bolt, `
	handle /webapi/contracts* {
		webapi_auth contracts
		reverse_proxy `+strings.TrimPrefix(upstream.URL, "http://")+`
	}`)
	k := createKey(t, map[string]any{"service": "contracts", "name": "proxy", "owner": "alice", "privileges": []string{"archive"}})

	r := do(t, "PATCH", siteURL+"/webapi/contracts/abc", nil, append(bearer(k.Token), "Keygate-Key-Owner", "mallory", "Keygate-Extra", "x")...)
	if r.status != http.StatusTeapot {
		t.Fatalf("status %d, want the upstream's 418; body %s", r.status, r.body)
	}
	if r := do(t, "GET", siteURL+"/webapi/contracts/abc", nil, bearer(k.Token)...); r.status != 403 {
		t.Fatalf("refused request reached upstream or wrong status: %d", r.status)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(seen))
	}
	h := seen[0]
	want := map[string]string{"Keygate-Key-Id": k.ID, "Keygate-Key-Owner": "alice", "Keygate-Operation": "archive", "Authorization": "", "Keygate-Extra": ""}
	for name, v := range want {
		if got := strings.Join(h.Values(name), ","); got != v {
			t.Errorf("upstream header %s = %q, want %q", name, got, v)
		}
	}
	for name, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, k.Token) {
				t.Errorf("upstream header %s carries the token", name)
			}
		}
	}
}
