package e2e

import (
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/freeport"
	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
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
	// The environment file it loads sets the metrics site's address.
	env, err := os.ReadFile(repoFile(t, "deploy", "systemd", "keygate.env"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(unit, "EnvironmentFile=/etc/keygate/keygate.env") || !regexp.MustCompile(`(?m)^KEYGATE_METRICS_BIND=\S+$`).Match(env) {
		t.Errorf("the unit does not load keygate.env, or its example sets no KEYGATE_METRICS_BIND")
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

// TestAlertRules checks deploy/prometheus/alerts.yml and the scrape
// config that loads it with promtool, and runs the alerts' unit tests
// (alerts_test.yml).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := tool(t, "promtool", "prometheus")
	dir := repoFile(t, "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}, {"check", "config", "prometheus.yml"}} {
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

	// Without the keys page's password hash, the production Caddyfile
	// fails naming the variable to set.
	cmd := exec.Command(bin, "adapt", "--config", repoFile(t, "examples", "production.Caddyfile"), "--adapter", "caddyfile")
	cmd.Env = slices.DeleteFunc(os.Environ(), func(v string) bool { return strings.HasPrefix(v, "KEYGATE_ADMIN_PASSWORD_HASH=") })
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "KEYGATE_ADMIN_PASSWORD_HASH") {
		t.Errorf("caddy adapt examples/production.Caddyfile without KEYGATE_ADMIN_PASSWORD_HASH: %v\n%s", err, out)
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
	port, err := freeport.One()
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

// TestProductionMetrics runs examples/production.Caddyfile as shipped but
// for its addresses and secrets, and Debian's Prometheus with
// deploy/prometheus/prometheus.yml as shipped but for its target: the
// metrics site answers /metrics, Prometheus scrapes it as job keygate,
// evaluates alerts.yml from beside its config, and no alert is pending or
// firing.
func TestProductionMetrics(t *testing.T) {
	t.Parallel()
	prometheus := tool(t, "prometheus", "prometheus")
	prod := startProduction(t)

	// keygate's, and Caddy's own (the global metrics option). Readiness
	// is checked anew at each scrape, a second after the last check, and
	// its database ping may miss its second on a machine loaded by the
	// other tests: a scrape of the ready gateway reports 1 within a few.
	wants := []string{"# TYPE keygate_ready gauge\nkeygate_ready 1\n", "# TYPE keygate_requests_total counter\n",
		"# TYPE caddy_http_requests_total counter\n"}
	for deadline := time.Now().Add(testwait.Generous); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(prod.Metrics + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Fatalf("GET %s/metrics: %d %s\n%.300s", prod.Metrics, resp.StatusCode, ct, body)
		}
		var lacking []string
		for _, want := range wants {
			if !strings.Contains(string(body), want) {
				lacking = append(lacking, want)
			}
		}
		if len(lacking) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s/metrics lacks %q", prod.Metrics, lacking)
		}
	}
	// /readyz is the API site's, as KeygateNotReady says; the metrics
	// site answers nothing but /metrics.
	for _, c := range []struct {
		url  string
		want int
	}{{prod.API + "/readyz", http.StatusOK}, {prod.Metrics + "/readyz", http.StatusNotFound}} {
		resp, err := http.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s: %d, want %d", c.url, resp.StatusCode, c.want)
		}
	}

	// Prometheus with the shipped config and alerts, the instances'
	// addresses replaced by the test's one.
	raw, err := os.ReadFile(repoFile(t, "deploy", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	targets := regexp.MustCompile(`(?m)^(\s*- targets: )\[[^\]]*\]$`)
	if n := len(targets.FindAllIndex(raw, -1)); n != 1 {
		t.Fatalf("deploy/prometheus/prometheus.yml has %d target lists, want 1", n)
	}
	dir := t.TempDir()
	config := targets.ReplaceAll(raw, []byte("${1}['"+strings.TrimPrefix(prod.Metrics, "http://")+"']"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	alerts, err := os.ReadFile(repoFile(t, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), alerts, 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	startProcess(t, exec.Command(prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port)), filepath.Join(dir, "prometheus.log"))
	api := fmt.Sprintf("http://127.0.0.1:%d/api/v1/", port)
	get := func(path string, data any) error {
		resp, err := http.Get(api + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var r struct {
			Status, Error string
			Data          json.RawMessage
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return err
		}
		if r.Status != "success" {
			return fmt.Errorf("%s: %s %s", path, r.Status, r.Error)
		}
		return json.Unmarshal(r.Data, data)
	}

	// The first scrape comes within one scrape_interval of the start.
	var up struct {
		Result []struct {
			Value [2]any
		}
	}
	testwait.For(t, 40*time.Second, "Prometheus to scrape the metrics site", func() bool {
		return get("query?query="+url.QueryEscape(`up{job="keygate"}`), &up) == nil && len(up.Result) > 0
	})
	// The query's time: the scrape was before it.
	seen, _ := up.Result[0].Value[0].(float64)
	if v := up.Result[0].Value[1]; v != "1" {
		var targets struct {
			ActiveTargets []struct{ ScrapeURL, LastError string }
		}
		err := get("targets", &targets)
		t.Fatalf(`up{job="keygate"} is %v: Prometheus could not scrape the metrics site: %+v %v`, v, targets.ActiveTargets, err)
	}

	// Then the alerts are evaluated on what it scraped: every rule loaded
	// and healthy, none pending or firing.
	var rules struct {
		Groups []struct {
			Name           string
			LastEvaluation time.Time
			Rules          []struct {
				Name, State, Health, LastError string
			}
		}
	}
	testwait.For(t, 40*time.Second, "Prometheus to evaluate the alerts after its first scrape", func() bool {
		return get("rules", &rules) == nil && len(rules.Groups) == 1 &&
			rules.Groups[0].LastEvaluation.After(time.Unix(0, int64(seen*1e9)))
	})
	names := map[string]bool{}
	for _, r := range rules.Groups[0].Rules {
		names[r.Name] = true
		if r.Health != "ok" || r.State != "inactive" {
			t.Errorf("rule %s: %s %s %s", r.Name, r.Health, r.State, r.LastError)
		}
	}
	if !names["KeygateDown"] || !names["KeygateNotReady"] || len(names) != strings.Count(string(alerts), "- alert: ") {
		t.Errorf("Prometheus loaded the rules %v", names)
	}
	var active struct{ Alerts []map[string]any }
	if err := get("alerts", &active); err != nil || len(active.Alerts) > 0 {
		t.Errorf("alerts pending or firing: %v %v", active.Alerts, err)
	}
}

// production is a running examples/production.Caddyfile: the base URLs of
// its API site, keys page site, metrics site and admin endpoint.
type production struct{ API, Keys, Metrics, Admin string }

// startProduction runs examples/production.Caddyfile as shipped but for
// its addresses (free loopback ports, plain HTTP) and the values the unit
// sets (files of the test's own), on a schema of the tests' PostgreSQL, or
// on bbolt with KEYGATE_TEST_POSTGRES=off. It is stopped when the test
// ends.
func startProduction(t *testing.T) production {
	t.Helper()
	raw, err := os.ReadFile(repoFile(t, "examples", "production.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for len(ports) < 4 {
		p, err := freeport.One()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	loop := func(p int) string { return fmt.Sprintf("http://127.0.0.1:%d", p) }
	prod := production{Admin: loop(ports[0]), API: loop(ports[1]), Keys: loop(ports[2]), Metrics: loop(ports[3])}
	dir := t.TempDir()
	file := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := make([]byte, 32)
	rand.Read(key)
	config := string(raw)
	replace := [][2]string{
		{"admin localhost:2019", "admin 127.0.0.1:" + fmt.Sprint(ports[0])},
		{"\napi.example.com {", "\n" + prod.API + " {"},
		{"\nkeys.example.com {", "\n" + prod.Keys + " {"},
		{"\nhttp://:2112 {", fmt.Sprintf("\nhttp://:%d {", ports[3])},
	}
	dsn := "unused"
	if os.Getenv(pgtest.EnvDSN) == "off" {
		storage := regexp.MustCompile(`(?s)\n\t\tstorage postgres \{.*?\n\t\t\}`)
		if !storage.MatchString(config) {
			t.Fatal("examples/production.Caddyfile has no storage postgres block")
		}
		config = storage.ReplaceAllLiteralString(config, "")
	} else {
		pg := pgtest.Shared(t)
		dsn = pg.DSN
		replace = append(replace, [2]string{"schema keygate", "schema " + pg.Schema(t)})
	}
	for _, r := range replace {
		if !strings.Contains(config, r[0]) {
			t.Fatalf("examples/production.Caddyfile has no %q", r[0])
		}
		config = strings.Replace(config, r[0], r[1], 1)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", file("Caddyfile", []byte(config)), "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(),
		"KEYGATE_DATA_DIR="+data,
		"KEYGATE_MASTER_KEY_FILE="+file("master.key", key),
		"KEYGATE_DATABASE_DSN_FILE="+file("database.dsn", []byte(dsn)),
		"KEYGATE_SMTP_PASSWORD_FILE="+file("smtp.password", []byte("test")),
		"KEYGATE_ADMIN_PASSWORD_HASH=$2a$14$Zkx19XLiW6VYouLHR5NmfOFU0z2GTNmpkT/5qqR7hx4IjWJPDhjvG",
		"KEYGATE_METRICS_BIND=127.0.0.1",
		"XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	logPath := filepath.Join(dir, "output.log")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() {
		// A clean stop, as systemd's, before the schema is dropped.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	if v, err := openapitest.Default(); err == nil {
		v.SetHostsOf(prod.API, prod.Admin)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get(prod.API + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return prod
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("examples/production.Caddyfile: the gateway exited at start\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("examples/production.Caddyfile: /readyz not 200 within 60 s\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLogrotate runs deploy/logrotate/keygate, its directory pointed at
// the test's, with Debian's logrotate: its dry run (-d) finds nothing to
// say, and a real run gzips every audit file Caddy rolled into the name
// Caddy's roll_keep counts, leaving the live audit.log and the files
// already compressed alone; a second run changes nothing.
func TestLogrotate(t *testing.T) {
	t.Parallel()
	logrotate, err := exec.LookPath("logrotate")
	if err != nil {
		// Debian puts it in /usr/sbin, which a user's PATH may lack.
		logrotate = tool(t, "/usr/sbin/logrotate", "logrotate")
	}
	raw, err := os.ReadFile(repoFile(t, "deploy", "logrotate", "keygate"))
	if err != nil {
		t.Fatal(err)
	}
	const logs = "/var/lib/keygate/audit-*.log"
	if !strings.Contains(string(raw), logs) {
		t.Fatalf("deploy/logrotate/keygate does not name %s", logs)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "keygate")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "logrotate.conf")
	if err := os.WriteFile(config, []byte(strings.ReplaceAll(string(raw), "/var/lib/keygate/", data+"/")), 0o644); err != nil {
		t.Fatal(err)
	}

	// Caddy's names: the live file, two it rolled (timberjack's
	// <name>-<time>-<reason><ext>) and one compressed before.
	line := `{"level":"info","logger":"webapi.audit","msg":"request"}` + "\n"
	rolled := map[string]string{
		"audit-2026-01-02T15-04-05.000-size.log": strings.Repeat(line, 1000),
		"audit-2026-01-03T09-00-00.000-size.log": strings.Repeat(line, 10),
	}
	before := map[string]string{"audit.log": line}
	var gz strings.Builder
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(line))
	zw.Close()
	before["audit-2026-01-01T00-00-00.000-size.log.gz"] = gz.String()
	for name, content := range rolled {
		before[name] = content
	}
	for name, content := range before {
		if err := os.WriteFile(filepath.Join(data, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(logrotate, append(args, "--state", filepath.Join(dir, "state"), config)...).CombinedOutput()
		if err != nil || strings.Contains(strings.ToLower(string(out)), "error") {
			t.Fatalf("logrotate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("-d"); !strings.Contains(out, "log needs rotating") {
		t.Fatalf("logrotate -d rotates nothing:\n%s", out)
	}
	for range 2 {
		run()
		entries, err := os.ReadDir(data)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		want := []string{"audit-2026-01-01T00-00-00.000-size.log.gz", "audit-2026-01-02T15-04-05.000-size.log.gz",
			"audit-2026-01-03T09-00-00.000-size.log.gz", "audit.log"}
		if !slices.Equal(names, want) {
			t.Fatalf("after logrotate: %v, want %v", names, want)
		}
		for _, name := range []string{"audit.log", "audit-2026-01-01T00-00-00.000-size.log.gz"} {
			if b, err := os.ReadFile(filepath.Join(data, name)); err != nil || string(b) != before[name] {
				t.Errorf("%s changed: %v", name, err)
			}
		}
		for name, content := range rolled {
			f, err := os.Open(filepath.Join(data, name+".gz"))
			if err != nil {
				t.Fatal(err)
			}
			// The audit log is the gateway's alone, compressed or not.
			if fi, err := f.Stat(); err != nil {
				t.Fatal(err)
			} else if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s.gz: mode %v, want 0600", name, fi.Mode())
			}
			zr, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(zr)
			f.Close()
			if err != nil || string(b) != content {
				t.Errorf("%s.gz: %d bytes, want %d: %v", name, len(b), len(content), err)
			}
		}
	}
}
