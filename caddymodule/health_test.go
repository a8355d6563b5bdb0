package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/caddymodule"
)

// healthSite mounts the health endpoints as the default Caddyfile does.
const healthSite = `
	handle /livez {
		webapi_health live
	}
	handle /readyz {
		webapi_health
	}`

// TestHealth checks both endpoints on each backend: live and ready, the
// checks named, GET and HEAD only, never cached, and keygate_ready.
func TestHealth(t *testing.T) { eachBackend(t, testHealth) }

func testHealth(t *testing.T, b backend) {
	g := startGateway(t, b, healthSite+defaultSite)

	// The line an operator looks for at start, once the site listens.
	want := fmt.Sprintf("keygate ready: APIs on %s (listening on :%d), admin on localhost:%d, storage %s ", siteURL, caddymodule.TestSitePort, caddymodule.TestAdminPort, b.name)
	if logs := g.readLogs(t, want); !strings.Contains(logs, want) {
		t.Errorf("no %q in the log", want)
	}

	r := do(t, http.MethodGet, siteURL+"/livez", nil)
	if r.status != http.StatusOK || string(r.body) != `{"status":"live"}` || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("livez: %d %v %s", r.status, r.header, r.body)
	}
	r = do(t, http.MethodGet, siteURL+"/readyz", nil)
	var ready struct {
		Status string
		Checks []struct {
			Name   string
			Ready  bool
			Detail string
		}
	}
	if err := json.Unmarshal(r.body, &ready); err != nil || r.status != http.StatusOK || ready.Status != "ready" ||
		r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("readyz: %d %v %s", r.status, r.header, r.body)
	}
	var names []string
	for _, c := range ready.Checks {
		names = append(names, c.Name)
		if !c.Ready || c.Detail != "" {
			t.Errorf("check %+v of a ready gateway", c)
		}
	}
	if len(names) != 3 || names[0] != "storage" || names[1] != "keys" || names[2] != "workers" {
		t.Errorf("checks %v", names)
	}
	if r := do(t, http.MethodHead, siteURL+"/readyz", nil); r.status != http.StatusOK || len(r.body) != 0 {
		t.Errorf("HEAD readyz: %d %q", r.status, r.body)
	}
	for _, path := range []string{"/livez", "/readyz"} {
		if r := do(t, http.MethodPost, siteURL+path, nil); r.status != http.StatusMethodNotAllowed || r.header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST %s: %d %v", path, r.status, r.header)
		}
	}
	if v := metricValue(t, "keygate_ready"); v != 1 {
		t.Errorf("keygate_ready = %v", v)
	}
	m := regexp.MustCompile(`(?m)^keygate_usage_flush_last_success_timestamp_seconds (\S+)$`).FindSubmatch(do(t, http.MethodGet, adminURL+"/metrics", nil).body)
	if m == nil {
		t.Fatal("no keygate_usage_flush_last_success_timestamp_seconds")
	}
	if v, err := strconv.ParseFloat(string(m[1]), 64); err != nil || time.Since(time.Unix(int64(v), 0)) > time.Minute {
		t.Errorf("keygate_usage_flush_last_success_timestamp_seconds = %s", m[1])
	}
}
