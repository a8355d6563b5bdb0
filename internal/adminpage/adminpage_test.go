package adminpage_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/adminpage"
)

// recorder is an API that records what reached it.
type recorder struct {
	calls []call
}

type call struct{ method, path, rawPath, user, mount string }

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.calls = append(rec.calls, call{r.Method, r.URL.Path, r.URL.RawPath, adminpage.User(r.Context()), adminpage.Mount(r.Context())})
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `[]`)
}

type refusal struct {
	user, reason string
	status       int
}

func newHandler() (*adminpage.Handler, *recorder, *[]refusal) {
	rec := new(recorder)
	var refused []refusal
	h := &adminpage.Handler{API: rec, Refused: func(_ *http.Request, user string, status int, reason string) {
		refused = append(refused, refusal{user, reason, status})
	}}
	return h, rec, &refused
}

// pageCall is a call of the page's own script: same origin, with the
// page's header.
func pageCall(method, target string) *http.Request {
	r := httptest.NewRequest(method, "http://localhost:8081"+target, nil)
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	r.Header.Set("Origin", "http://localhost:8081")
	r.Header.Set(adminpage.RequestHeader, "1")
	return r
}

func problemOf(t *testing.T, w *httptest.ResponseRecorder) (code, detail string) {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want a problem: %s", ct, w.Body)
	}
	var p struct{ Code, Detail string }
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	return p.Code, p.Detail
}

func TestNoUserIsRefused(t *testing.T) {
	for _, target := range []string{"/admin/", "/admin/admin.js", "/admin/webapi/keys", "/admin/webapi/keys/k1/reveal"} {
		t.Run(target, func(t *testing.T) {
			h, rec, refused := newHandler()
			w := httptest.NewRecorder()
			h.Serve(w, pageCall(http.MethodGet, target), "")
			if w.Code != http.StatusForbidden {
				t.Fatalf("status %d, want 403", w.Code)
			}
			code, detail := problemOf(t, w)
			if code != "forbidden" || !strings.Contains(detail, "basic_auth") || !strings.Contains(detail, "user_header") {
				t.Errorf("problem %s %q: it must say how to protect the page", code, detail)
			}
			if len(rec.calls) != 0 {
				t.Errorf("the API was called: %v", rec.calls)
			}
			if len(*refused) != 1 || (*refused)[0].user != "" || (*refused)[0].status != http.StatusForbidden {
				t.Errorf("refusals told: %+v", *refused)
			}
		})
	}
}

func TestPage(t *testing.T) {
	h, _, _ := newHandler()
	w := httptest.NewRecorder()
	h.Serve(w, httptest.NewRequest(http.MethodGet, "/admin/", nil), `<b>alice</b>`)
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	want := map[string]string{
		"Content-Type":                 "text/html; charset=utf-8",
		"Content-Security-Policy":      adminpage.ContentSecurityPolicy,
		"Cache-Control":                "no-store",
		"X-Frame-Options":              "DENY",
		"X-Content-Type-Options":       "nosniff",
		"Referrer-Policy":              "no-referrer",
		"Cross-Origin-Resource-Policy": "same-origin",
	}
	for k, v := range want {
		if got := w.Header().Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	body := w.Body.String()
	for _, s := range []string{"Contract keys", "Share keys", "Consumers", "Plans", "Templates", "Key Name", "Description", "Not valid before", "Not valid after", "Allowed IPs", "Owner", "Admin projects", "&lt;b&gt;alice&lt;/b&gt;"} {
		if !strings.Contains(body, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	if strings.Contains(body, "<b>alice") {
		t.Error("the user's name is not escaped")
	}
	// Nothing from outside the binary, and no inline script or style
	// (which the policy would block anyway).
	rest := strings.Replace(body, `<script src="admin.js" defer></script>`, "", 1)
	for _, s := range []string{"http://", "https://", "<script", "style=", "<style"} {
		if strings.Contains(rest, s) {
			t.Errorf("the page holds %q", s)
		}
	}
	if !strings.Contains(adminpage.ContentSecurityPolicy, "script-src 'self'") || strings.Contains(adminpage.ContentSecurityPolicy, "unsafe") {
		t.Errorf("policy %q", adminpage.ContentSecurityPolicy)
	}
}

func TestAssets(t *testing.T) {
	for _, tc := range []struct{ name, contentType, holds string }{
		{"admin.js", "text/javascript; charset=utf-8", "Keygate-Admin"},
		{"admin.css", "text/css; charset=utf-8", "prefers-color-scheme: dark"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, _ := newHandler()
			w := httptest.NewRecorder()
			h.Serve(w, httptest.NewRequest(http.MethodGet, "/keys/"+tc.name, nil), "alice")
			if w.Code != http.StatusOK || w.Header().Get("Content-Type") != tc.contentType || !strings.Contains(w.Body.String(), tc.holds) {
				t.Fatalf("%d %q", w.Code, w.Header().Get("Content-Type"))
			}
			etag := w.Header().Get("ETag")
			if etag == "" || w.Header().Get("Cache-Control") != "no-cache" {
				t.Fatalf("ETag %q, Cache-Control %q", etag, w.Header().Get("Cache-Control"))
			}
			r := httptest.NewRequest(http.MethodGet, "/keys/"+tc.name, nil)
			r.Header.Set("If-None-Match", etag)
			w = httptest.NewRecorder()
			h.Serve(w, r, "alice")
			if w.Code != http.StatusNotModified {
				t.Errorf("revalidation: %d, want 304", w.Code)
			}
		})
	}
}

func TestOtherPaths(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		status         int
		allow          string
	}{
		{http.MethodGet, "/admin/secrets.txt", http.StatusNotFound, ""},
		{http.MethodGet, "/admin/webapi/other", http.StatusNotFound, ""},
		{http.MethodPost, "/admin/", http.StatusMethodNotAllowed, "GET, HEAD"},
		{http.MethodDelete, "/admin/admin.js", http.StatusMethodNotAllowed, "GET, HEAD"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			h, rec, _ := newHandler()
			w := httptest.NewRecorder()
			h.Serve(w, pageCall(tc.method, tc.target), "alice")
			if w.Code != tc.status || w.Header().Get("Allow") != tc.allow {
				t.Fatalf("%d Allow %q, want %d %q", w.Code, w.Header().Get("Allow"), tc.status, tc.allow)
			}
			problemOf(t, w)
			if len(rec.calls) != 0 {
				t.Errorf("the API was called: %v", rec.calls)
			}
		})
	}
}

// The API sees its own paths whatever the mount, and the user.
func TestAPIPaths(t *testing.T) {
	for _, tc := range []struct{ target, mount, path, rawPath string }{
		{"/admin/webapi/keys?service=share", "/admin", "/webapi/keys", ""},
		{"/webapi/keys", "", "/webapi/keys", ""},
		{"/ops/keygate/webapi/keys/k-1/reveal", "/ops/keygate", "/webapi/keys/k-1/reveal", ""},
		{"/admin/webapi/templates/T%2F1", "/admin", "/webapi/templates/T/1", "/webapi/templates/T%2F1"},
		{"/my%20admin/webapi/templates", "/my%20admin", "/webapi/templates", ""},
		{"/webapi/keysmith/webapi/keys", "/webapi/keysmith", "/webapi/keys", ""},
		// A template whose id holds a key's path stays a template.
		{"/admin/webapi/templates/x%2Fwebapi%2Fkeys%2Fabc", "/admin", "/webapi/templates/x/webapi/keys/abc", "/webapi/templates/x%2Fwebapi%2Fkeys%2Fabc"},
		{"/admin/webapi/templates/webapi/keys", "/admin", "/webapi/templates/webapi/keys", ""},
		// The Consumers view's calls.
		{"/admin/webapi/consumers", "/admin", "/webapi/consumers", ""},
		{"/admin/webapi/consumers/c-1/usage?resolution=day", "/admin", "/webapi/consumers/c-1/usage", ""},
		{"/admin/webapi/keys?consumerId=c-1", "/admin", "/webapi/keys", ""},
		{"/ops/webapi/plans/p-1", "/ops", "/webapi/plans/p-1", ""},
		{"/admin/webapi/plansx/webapi/plans", "/admin/webapi/plansx", "/webapi/plans", ""},
	} {
		t.Run(tc.target, func(t *testing.T) {
			h, rec, refused := newHandler()
			w := httptest.NewRecorder()
			h.Serve(w, pageCall(http.MethodGet, tc.target), "alice")
			if w.Code != http.StatusOK || len(*refused) != 0 {
				t.Fatalf("%d %s %+v", w.Code, w.Body, *refused)
			}
			want := call{http.MethodGet, tc.path, tc.rawPath, "alice", tc.mount}
			if len(rec.calls) != 1 || rec.calls[0] != want {
				t.Fatalf("the API got %+v, want %+v", rec.calls, want)
			}
		})
	}
}

// Only the page's own script may call the API: another site cannot
// drive an administrator's browser, whose credentials it would send.
func TestCrossOriginCallsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name          string
		headers       map[string]string
		ok            bool
		reasonHolding string
	}{
		{"the page's own call", map[string]string{"Sec-Fetch-Site": "same-origin", adminpage.RequestHeader: "1"}, true, ""},
		{"a client without fetch metadata, same Origin", map[string]string{"Origin": "http://localhost:8081", adminpage.RequestHeader: "1"}, true, ""},
		{"a client with neither (curl)", map[string]string{adminpage.RequestHeader: "1"}, true, ""},
		{"a cross-site form post", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, false, "cross-site"},
		{"cross-site even with the header", map[string]string{"Sec-Fetch-Site": "cross-site", adminpage.RequestHeader: "1"}, false, "cross-site"},
		{"the API's own pages on another port", map[string]string{"Sec-Fetch-Site": "same-site", adminpage.RequestHeader: "1"}, false, "same-site"},
		{"same-origin at odds with a foreign Origin", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://evil.example", adminpage.RequestHeader: "1"}, false, "another origin"},
		{"typed into the address bar", map[string]string{"Sec-Fetch-Site": "none"}, false, "none"},
		{"another Origin without fetch metadata", map[string]string{"Origin": "http://evil.example", adminpage.RequestHeader: "1"}, false, "another origin"},
		{"an unreadable Origin", map[string]string{"Origin": "::", adminpage.RequestHeader: "1"}, false, "another origin"},
		{"an opaque Origin (a sandboxed frame, a file)", map[string]string{"Origin": "null", adminpage.RequestHeader: "1"}, false, "another origin"},
		{"same origin without the header", map[string]string{"Sec-Fetch-Site": "same-origin"}, false, adminpage.RequestHeader},
		{"the header with another value", map[string]string{"Sec-Fetch-Site": "same-origin", adminpage.RequestHeader: "yes"}, false, adminpage.RequestHeader},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				h, rec, refused := newHandler()
				r := httptest.NewRequest(method, "http://localhost:8081/admin/webapi/keys", strings.NewReader(`{"name":"x"}`))
				for k, v := range tc.headers {
					r.Header.Set(k, v)
				}
				w := httptest.NewRecorder()
				h.Serve(w, r, "alice")
				if tc.ok {
					if w.Code != http.StatusOK || len(rec.calls) != 1 {
						t.Fatalf("%d %s", w.Code, w.Body)
					}
					return
				}
				if w.Code != http.StatusForbidden || len(rec.calls) != 0 {
					t.Fatalf("%d, API calls %v: want 403 and no call", w.Code, rec.calls)
				}
				if code, detail := problemOf(t, w); code != "forbidden" || !strings.Contains(detail, tc.reasonHolding) {
					t.Errorf("problem %s %q", code, detail)
				}
				if len(*refused) != 1 || (*refused)[0].user != "alice" || !strings.Contains((*refused)[0].reason, tc.reasonHolding) {
					t.Errorf("refusals told: %+v", *refused)
				}
			})
		}
	}
}
