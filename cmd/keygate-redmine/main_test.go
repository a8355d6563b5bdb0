package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/keygate/keygate/caddymodule"
)

// TestTourRedmine: make redmine's Redmine is seeded for the tour, writes
// a host block that the default Caddyfile imports from webapi.d beside
// it, with a key that signs in as keygate's account; a second run is
// refused while the block exists, and stopping removes it.
func TestTourRedmine(t *testing.T) {
	// The default Caddyfile and its webapi.d, copied: the repository's
	// own are left to a developer's make redmine.
	root := t.TempDir()
	hostDir := filepath.Join(root, "webapi.d")
	for _, f := range []string{"Caddyfile", "webapi.d/none.caddyfile"} {
		raw, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, f)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r := &runner{}
	t.Cleanup(r.stop)
	if err := r.run(hostDir); err != nil {
		t.Fatal(err)
	}
	block := filepath.Join(hostDir, "redmine.caddyfile")
	conf, err := os.ReadFile(block)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(hostDir, "redmine.key")
	info, err := os.Stat(keyFile)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the key's file: %v %v", info, err)
	}
	key, _ := os.ReadFile(keyFile)
	if strings.Contains(string(conf), strings.TrimSpace(string(key))) {
		t.Error("the host block holds the key itself")
	}

	// The default Caddyfile connects to it.
	caddyfile := filepath.Join(root, "Caddyfile")
	raw, err := os.ReadFile(caddyfile)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt(raw, map[string]any{"filename": caddyfile})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Apps struct {
			Webapi struct {
				Host struct {
					Module     string `json:"module"`
					URL        string `json:"url"`
					APIKeyFile string `json:"api_key_file"`
				} `json:"host"`
			} `json:"webapi"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	h := cfg.Apps.Webapi.Host
	if h.Module != "redmine" || !strings.HasPrefix(h.URL, "http://127.0.0.1:") || h.APIKeyFile != keyFile {
		t.Fatalf("the default Caddyfile's host: %+v\n%s", h, out)
	}

	// The key signs in as keygate, who sees the issue and the wiki page.
	for path, want := range map[string]string{
		"/users/current.json":             `"login":"keygate"`,
		"/issues/1.json":                  "Printer jams on page 2",
		"/projects/acme/wiki/NDA.json":    "Mutual non-disclosure agreement",
		"/issues/1.json?include=journals": "new roller",
	} {
		req, _ := http.NewRequest("GET", h.URL+path, nil)
		req.Header.Set("X-Redmine-API-Key", strings.TrimSpace(string(key)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), want) || strings.Contains(string(body), "premium plan") {
			t.Errorf("GET %s as keygate: %d %s", path, resp.StatusCode, body)
		}
	}

	if err := (&runner{}).run(hostDir); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second run while the block exists: %v", err)
	}
	r.stop()
	if _, err := os.Stat(filepath.Join(hostDir, "none.caddyfile")); err != nil {
		t.Errorf("stopping removed none.caddyfile: %v", err)
	}
	for _, f := range []string{block, keyFile} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
}
