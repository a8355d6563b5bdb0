package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// The deploy files are checked by their own tools (Debian's systemd and
// prometheus packages, which scripts/test-deps.sh installs), and the
// example Caddyfiles by the gateway's `caddy adapt`.

// repoFile is the path of a file of the repository.
func repoFile(t *testing.T, parts ...string) string {
	t.Helper()
	root, err := gatewayproc.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, parts...)...)
}

// tool is the path of a command the test needs, or the test fails
// saying what installs it.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is missing: run scripts/test-deps.sh (Debian %s)", name, pkg)
	}
	return p
}

// TestSystemdUnit verifies deploy/systemd/keygate.service with
// systemd-analyze, its binary path pointed at this run's build. The tool
// exits 0 on a misspelt key or a bad value and only says so: any word
// from it fails the test.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	analyze := tool(t, "systemd-analyze", "systemd")
	raw, err := os.ReadFile(repoFile(t, "deploy", "systemd", "keygate.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	for _, want := range []string{"DynamicUser=yes", "StateDirectory=keygate", "ProtectSystem=strict", "NoNewPrivileges=yes",
		"CapabilityBoundingSet=CAP_NET_BIND_SERVICE", "LoadCredential=master.key:", "LoadCredential=database.dsn:", "Type=notify"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %s", want)
		}
	}
	file := filepath.Join(t.TempDir(), "keygate.service")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(unit, "/usr/local/bin/keygate", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", file).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestAlertRules checks deploy/prometheus/alerts.yml with promtool and
// runs its unit tests (alerts_test.yml).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", "prometheus")
	dir := repoFile(t, "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestExampleCaddyfiles adapts every shipped Caddyfile with this build:
// each must adapt without a warning (a deprecated option, a directive out
// of place).
func TestExampleCaddyfiles(t *testing.T) {
	t.Parallel()
	env := append(os.Environ(), "KEYGATE_ADMIN_PASSWORD_HASH=$2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG")
	for _, f := range [][]string{{"Caddyfile"}, {"examples", "balancer.Caddyfile"}, {"examples", "production.Caddyfile"}} {
		cmd := exec.Command(bin, "adapt", "--config", repoFile(t, f...), "--adapter", "caddyfile")
		cmd.Env = env
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || !json.Valid(out) || strings.Contains(stderr.String(), `"level":"warn"`) || strings.Contains(stderr.String(), `"level":"error"`) {
			t.Errorf("caddy adapt %s: %v\n%s", filepath.Join(f...), err, stderr.String())
		}
	}
}

// TestDashboard runs Debian's Prometheus against a gateway under a short
// load and evaluates the query of every panel of deploy/grafana/
// keygate.json: each must be valid and return a series.
func TestDashboard(t *testing.T) {
	t.Parallel()
	prometheus := tool(t, "prometheus", "prometheus")
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	raw, err := os.ReadFile(repoFile(t, "deploy", "grafana", "keygate.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	if len(dash.Panels) < 10 {
		t.Fatalf("%d panels", len(dash.Panels))
	}

	// A gateway with Caddy's own metrics, and a short load: uses,
	// refusals of every kind the load can make, a rate-limited key.
	g := start(t, gatewayproc.Options{Global: "metrics"})
	ok, err := g.CreateKey("share", "dashboard", "alice", []string{"get", "list"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	limited, err := g.CreateKey("share", "limited", "alice", []string{"get", "list"},
		map[string]any{"rateLimits": []map[string]any{{"name": "burst", "limit": 2, "windowSeconds": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	loaded := make(chan struct{})
	go func() {
		defer close(loaded)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, tok := range []string{ok.Token, limited.Token, "kg_not_a_key", ""} {
				req, _ := http.NewRequest(http.MethodGet, g.Site+"/webapi/share?page=1", nil)
				if tok != "" {
					req.Header.Set("Authorization", "Bearer "+tok)
				}
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { close(stop); <-loaded })

	// Prometheus scrapes the admin endpoint every second.
	port, err := gatewayproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: keygate\n    static_configs:\n      - targets: ['%s']\n",
		strings.TrimPrefix(g.Admin, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	startProcess(t, exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)), filepath.Join(dir, "prometheus.log"))
	api := fmt.Sprintf("http://127.0.0.1:%d", port)
	query := func(expr string) (status string, n int, errText string) {
		resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return "", 0, err.Error()
		}
		defer resp.Body.Close()
		var r struct {
			Status string
			Error  string
			Data   struct{ Result []json.RawMessage }
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return "", 0, err.Error()
		}
		return r.Status, len(r.Data.Result), r.Error
	}
	// Rates need two scrapes in their window: 10 s of load do.
	testwait.For(t, 60*time.Second, "Prometheus to scrape the gateway under load for a while", func() bool {
		_, n, _ := query(`count_over_time(keygate_requests_total[1m]) >= 8`)
		return n > 0
	})
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			expr := strings.NewReplacer("$__rate_interval", "10s", "$instance", ".*").Replace(tg.Expr)
			status, n, msg := query(expr)
			if status != "success" || n == 0 {
				t.Errorf("panel %q: %s gives %s with %d series %s", p.Title, expr, status, n, msg)
			}
		}
	}
}
