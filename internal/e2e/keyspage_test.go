package e2e

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/adminpage"
	"github.com/keygate/keygate/internal/testkit/freeport"
	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestShippedKeysPage runs the shipped Caddyfile as `make run` does, on
// free ports, and follows the README's one step: without a password the
// Web API Keys page says how to set one (a small HTML page to a browser, a
// problem body to other clients); with KEYGATE_ADMIN_PASSWORD_HASH from
// `caddy hash-password` it asks for the login, and serves the page and its
// JSON calls to the administrator. Every reply of the page's site, the
// login's 401 and the redirect included, carries the security headers.
func TestShippedKeysPage(t *testing.T) {
	root, err := gatewayproc.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "hash-password", "--plaintext", "s3cret passphrase").Output()
	if err != nil {
		t.Fatalf("caddy hash-password: %v", err)
	}
	hash := strings.TrimSpace(string(out))

	for _, tc := range []struct {
		name string
		hash string
	}{{"no password yet", ""}, {"the README's step done", hash}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ports := make([]int, 3)
			for i := range ports {
				if ports[i], err = freeport.One(); err != nil {
					t.Fatal(err)
				}
			}
			page := fmt.Sprintf("http://localhost:%d", ports[2])
			cmd := exec.Command(bin, "run", "--config", filepath.Join(root, "Caddyfile"), "--adapter", "caddyfile")
			cmd.Dir = dir
			cmd.Env = append(withoutKeygateEnv(),
				fmt.Sprintf("KEYGATE_ADMIN_PORT=%d", ports[0]),
				fmt.Sprintf("KEYGATE_PORT=%d", ports[1]),
				fmt.Sprintf("KEYGATE_KEYS_PAGE_PORT=%d", ports[2]),
				fmt.Sprintf("KEYGATE_PUBLIC_URL=http://localhost:%d", ports[1]),
				"KEYGATE_DATA_DIR="+dir,
				"KEYGATE_MASTER_KEY_FILE="+filepath.Join(dir, "master.key"),
			)
			if tc.hash != "" {
				cmd.Env = append(cmd.Env, "KEYGATE_ADMIN_PASSWORD_HASH="+tc.hash)
			}
			logFile, err := os.Create(filepath.Join(dir, "output.log"))
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout, cmd.Stderr = logFile, logFile
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Signal(os.Interrupt)
				done := make(chan struct{})
				go func() { _ = cmd.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					_ = cmd.Process.Kill()
					<-done
				}
				logFile.Close()
			})
			// A transport of its own: the page's port is not an API's, and
			// its 404s are not the OpenAPI document's to check.
			client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			get := func(method, url string, header ...string) (int, http.Header, string) {
				t.Helper()
				r := sendWith(t, client, method, url, nil, header...)
				return r.status, r.header, string(r.body)
			}
			testwait.For(t, testwait.Generous, "the keys page to listen", func() bool {
				resp, err := client.Get(page + "/admin/")
				if err == nil {
					resp.Body.Close()
				}
				return err == nil
			})

			// Another Host on the page's port, as a name that resolves to
			// 127.0.0.1 would bring: no page, a problem with the headers.
			hostPage := strings.Replace(page, "localhost", "127.0.0.1", 1)
			for _, path := range []string{"/admin/", "/admin/webapi/keys?service=share", "/"} {
				status, h, body := get(http.MethodGet, hostPage+path, "Host", "rebound.example")
				if status != http.StatusNotFound || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "/admin/ only") {
					t.Fatalf("Host rebound.example, %s: %d %s %s", path, status, h.Get("Content-Type"), body)
				}
				secureHeaders(t, "another Host", h, strictCSP, "no-store")
			}

			if tc.hash == "" {
				// API clients: the problem body, whatever else they accept.
				var detail string
				for _, accept := range []string{"", "application/json", "*/*", "application/problem+json, text/plain"} {
					status, h, body := get(http.MethodGet, page+"/admin/", "Accept", accept)
					if status != http.StatusForbidden || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "KEYGATE_ADMIN_PASSWORD_HASH") {
						t.Fatalf("without a password, Accept %q: %d %s %s", accept, status, h.Get("Content-Type"), body)
					}
					secureHeaders(t, "without a password, Accept "+accept, h, strictCSP, "no-store")
					var p struct{ Detail string }
					if err := json.Unmarshal([]byte(body), &p); err != nil || p.Detail == "" {
						t.Fatalf("the problem body %s: %v", body, err)
					}
					detail = p.Detail
				}
				// A browser: the same words as a small page of their own.
				for _, accept := range []string{
					"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", // Chromium, Firefox
					"Text/HTML",
				} {
					for _, path := range []string{"/admin/", "/"} {
						status, h, body := get(http.MethodGet, page+path, "Accept", accept)
						what := "without a password, a browser at " + path
						if status != http.StatusForbidden || h.Get("Content-Type") != "text/html; charset=utf-8" {
							t.Fatalf("%s: %d %s %s", what, status, h.Get("Content-Type"), body)
						}
						secureHeaders(t, what, h, strictCSP, "no-store")
						if !utf8.ValidString(body) || !strings.HasPrefix(body, "<!DOCTYPE html>") ||
							!strings.Contains(body, `<html lang="en">`) || !strings.Contains(body, `<meta charset="utf-8">`) ||
							strings.Contains(body, "<script") || strings.Contains(body, "<style") || strings.Contains(body, " style=") {
							t.Fatalf("%s: %s", what, body)
						}
						// A sentence on the page; the command is code there,
						// quoted in the problem.
						if got := pageText(body, "<p>", "</p>"); !strings.EqualFold(strings.TrimSuffix(got, "."), strings.ReplaceAll(detail, "'", "")) {
							t.Errorf("%s says %q, the problem body %q", what, got, detail)
						}
					}
				}
				return
			}
			status, h, _ := get(http.MethodGet, page+"/admin")
			if status != http.StatusPermanentRedirect || h.Get("Location") != "/admin/" {
				t.Errorf("/admin: %d %q", status, h.Get("Location"))
			}
			secureHeaders(t, "/admin", h, strictCSP, "no-store")
			for _, login := range []string{"", "Basic " + basicCredentials("admin", "wrong")} {
				status, h, _ := get(http.MethodGet, page+"/admin/", "Authorization", login)
				if status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic") {
					t.Fatalf("without a login: %d %v", status, h)
				}
				secureHeaders(t, "the login's 401", h, strictCSP, "no-store")
			}
			login := "Basic " + basicCredentials("admin", "s3cret passphrase")
			status, h, body := get(http.MethodGet, page+"/admin/", "Authorization", login)
			if status != http.StatusOK || !strings.Contains(body, "Web API Keys") || !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Fatalf("the page: %d %s", status, body)
			}
			// The page's own, fuller policy replaces the site's.
			secureHeaders(t, "the page", h, adminpage.ContentSecurityPolicy, "no-store")
			status, h, _ = get(http.MethodGet, page+"/admin/admin.js", "Authorization", login)
			if status != http.StatusOK || h.Get("Content-Type") != "text/javascript; charset=utf-8" {
				t.Fatalf("the page's script: %d %s", status, h.Get("Content-Type"))
			}
			secureHeaders(t, "the page's script", h, adminpage.ContentSecurityPolicy, "no-cache")
			status, _, body = get(http.MethodGet, page+"/admin/webapi/keys?service=share",
				"Authorization", login, "Sec-Fetch-Site", "same-origin", "Keygate-Admin", "1")
			var keys []any
			if status != http.StatusOK || json.Unmarshal([]byte(body), &keys) != nil {
				t.Fatalf("the page's key list: %d %s", status, body)
			}
			status, h, body = get(http.MethodGet, page+"/", "Authorization", login)
			if status != http.StatusNotFound || !strings.Contains(body, "/admin/") || h.Get("Content-Type") != "application/problem+json" {
				t.Errorf("/ on the page's port: %d %s", status, body)
			}
			secureHeaders(t, "/ on the page's port", h, strictCSP, "no-store")
			// The APIs are on their own port, not the page's.
			if status, _, _ := get(http.MethodGet, page+"/webapi/share", "Authorization", login); status != http.StatusNotFound {
				t.Errorf("the share API on the page's port: %d", status)
			}
		})
	}
}

// strictCSP is the policy of every body that is not a page with assets
// of its own (problem.SecureHeaders).
const strictCSP = "default-src 'none'; frame-ancestors 'none'"

// secureHeaders checks the security headers every reply of keygate
// carries, with the given policy and Cache-Control, each set once.
func secureHeaders(t *testing.T, what string, h http.Header, csp, cacheControl string) {
	t.Helper()
	for k, v := range map[string]string{
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Content-Security-Policy": csp,
		"Cache-Control":           cacheControl,
	} {
		if got := h.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s: %s %q, want %q", what, k, got, v)
		}
	}
}

// pageText is the text between the first open and the next close in
// body, its tags dropped, its character references decoded and its
// white space collapsed.
func pageText(body, open, close string) string {
	_, rest, _ := strings.Cut(body, open)
	rest, _, _ = strings.Cut(rest, close)
	var b strings.Builder
	for {
		before, after, found := strings.Cut(rest, "<")
		b.WriteString(before)
		if !found {
			break
		}
		_, rest, _ = strings.Cut(after, ">")
	}
	return strings.Join(strings.Fields(html.UnescapeString(b.String())), " ")
}

// withoutKeygateEnv is the test's environment without the KEYGATE_
// variables a developer may have exported for `make run`.
func withoutKeygateEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KEYGATE_") {
			env = append(env, kv)
		}
	}
	return env
}

func basicCredentials(user, password string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, password)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
