package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/gatewayproc"
	"github.com/keygate/keygate/internal/testwait"
)

// TestShippedKeysPage runs the shipped Caddyfile as `make run` does, on
// free ports, and follows the README's one step: without a password the
// Web API Keys page says how to set one; with KEYGATE_ADMIN_PASSWORD_HASH
// from `caddy hash-password` it asks for the login, and serves the page
// and its JSON calls to the administrator.
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
				if ports[i], err = gatewayproc.FreePort(); err != nil {
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

			if tc.hash == "" {
				status, h, body := get(http.MethodGet, page+"/admin/")
				if status != http.StatusForbidden || h.Get("Content-Type") != "application/problem+json" || !strings.Contains(body, "KEYGATE_ADMIN_PASSWORD_HASH") {
					t.Fatalf("without a password: %d %s %s", status, h.Get("Content-Type"), body)
				}
				return
			}
			if status, h, _ := get(http.MethodGet, page+"/admin"); status != http.StatusPermanentRedirect || h.Get("Location") != "/admin/" {
				t.Errorf("/admin: %d %q", status, h.Get("Location"))
			}
			if status, h, _ := get(http.MethodGet, page+"/admin/"); status != http.StatusUnauthorized || !strings.HasPrefix(h.Get("WWW-Authenticate"), "Basic") {
				t.Fatalf("without a login: %d %v", status, h)
			}
			login := "Basic " + basicCredentials("admin", "s3cret passphrase")
			status, h, body := get(http.MethodGet, page+"/admin/", "Authorization", login)
			if status != http.StatusOK || !strings.Contains(body, "Web API Keys") || !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
				t.Fatalf("the page: %d %s", status, body)
			}
			status, _, body = get(http.MethodGet, page+"/admin/webapi/keys?service=share",
				"Authorization", login, "Sec-Fetch-Site", "same-origin", "Keygate-Admin", "1")
			var keys []any
			if status != http.StatusOK || json.Unmarshal([]byte(body), &keys) != nil {
				t.Fatalf("the page's key list: %d %s", status, body)
			}
			if status, _, body := get(http.MethodGet, page+"/", "Authorization", login); status != http.StatusNotFound || !strings.Contains(body, "/admin/") {
				t.Errorf("/ on the page's port: %d %s", status, body)
			}
			// The APIs are on their own port, not the page's.
			if status, _, _ := get(http.MethodGet, page+"/webapi/share", "Authorization", login); status != http.StatusNotFound {
				t.Errorf("the share API on the page's port: %d", status)
			}
		})
	}
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
