package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/keystore"
)

var (
	adminURL = fmt.Sprintf("http://localhost:%d", caddymodule.TestAdminPort)
	siteURL  = fmt.Sprintf("http://localhost:%d", caddymodule.TestSitePort)
)

// Every reply a test receives from the gateway, through any client that
// sets no Transport of its own, is checked against the OpenAPI documents
// (internal/openapitest): an undocumented status, header or field fails
// the test. do and kgSend report at once; other clients' mismatches are
// reported when the test's gateway stops, or else after the run.
func init() {
	if _, err := openapitest.Install(); err != nil {
		panic(err)
	}
	v, _ := openapitest.Default()
	v.SetHostsOf(siteURL, adminURL)
}

// gateway is one loaded test config with its data directory and storage.
type gateway struct {
	t      *testing.T
	tester *caddytest.Tester
	dir    string
	// storage are the webapi block's lines that choose the backend.
	storage string
}

// backend is a storage the API tests run on.
type backend struct {
	name string
	// storage makes the webapi block's lines for a fresh, empty database
	// of this backend, dropped when t ends; empty for the default bbolt
	// file in the data directory.
	storage func(t *testing.T) string
}

// backends: every API test runs on each, one suite for both.
var backends = []backend{
	{name: "bolt", storage: func(*testing.T) string { return "" }},
	{name: "postgres", storage: func(t *testing.T) string {
		srv := pgtest.Shared(t)
		return fmt.Sprintf("storage postgres {\n\t\t\tdsn %q\n\t\t\tschema %s\n\t\t}", srv.DSN, srv.Schema(t))
	}},
}

// bolt is the backend of the tests that are about Caddy, not storage.
var bolt = backends[0]

// eachBackend runs fn once per backend, as subtests named after them.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// globalOptions are every test config's global block; %[1]s is the data
// directory, %[2]d the admin port, %[3]d the site port, %[5]s more lines
// of the webapi block. The tests' webhook receivers are on loopback.
const globalOptions = `{
	admin localhost:%[2]d
	http_port %[3]d
	https_port %[4]d
	grace_period 1s
	skip_install_trust
	webapi {
		data_dir %[1]s
		usage_flush_interval 50ms
		public_base_url http://localhost:%[3]d
		webhook_allow_networks 127.0.0.0/8 ::1/128
		%[5]s
	}
	log webapi_audit {
		output buffered_file %[1]s/audit.log
		format webapi_json
		include webapi.audit
	}
	log default {
		output file %[1]s/caddy.log
		format json
		level DEBUG
		exclude webapi.audit
	}
}
`

// startGateway loads a config made of the test global options and site, a
// Caddyfile site block body served on the test site port.
func startGateway(t *testing.T, b backend, site string) *gateway {
	t.Helper()
	// The database is made first, so that it is dropped after the
	// cleanup below has closed it.
	g := &gateway{t: t, tester: newTester(t), dir: t.TempDir(), storage: b.storage(t)}
	// Cleanups run last-in first-out: this one, before the data directory
	// is removed, loads a config without the webapi app, so the database
	// closes and the notification worker stops writing into the directory.
	t.Cleanup(func() {
		unloadWebAPI(g.tester)
		openapitest.Unreported.Report(t)
	})
	g.load(site)
	return g
}

func (g *gateway) config(site string) string { return testConfig(g.dir, g.storage, site) }

// testConfig is a test Caddyfile: the global options on data directory
// dir with webapiExtra added to the webapi block, and site served on the
// test site port.
func testConfig(dir, webapiExtra, site string) string {
	p := caddymodule.TestSitePort
	return fmt.Sprintf(globalOptions, dir, caddymodule.TestAdminPort, p, p+363, webapiExtra) +
		fmt.Sprintf("\nhttp://localhost:%d {\n", p) + site + "\n}\n"
}

// serve loads config on a new tester. When the test ends, a config
// without the webapi app is loaded, so that the database closes before
// what config names and was made earlier (the data directory, the
// PostgreSQL schema) goes: a schema dropped under a running gateway can
// deadlock with its background work.
func serve(t *testing.T, config string) *caddytest.Tester {
	tester := newTester(t)
	t.Cleanup(func() { unloadWebAPI(tester) })
	tester.InitServer(config, "caddyfile")
	return tester
}

// unloadWebAPI loads a config with the admin endpoint alone.
func unloadWebAPI(tester *caddytest.Tester) {
	tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", caddymodule.TestAdminPort), "caddyfile")
}

func newTester(t *testing.T) *caddytest.Tester {
	return caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: caddymodule.TestAdminPort})
}

// load (re)loads the config with site on this gateway's data directory.
func (g *gateway) load(site string) {
	g.t.Helper()
	// A site without the API handlers answers authorized requests with a
	// test's own handler: only the key check's refusals are keygate's.
	kind := openapitest.KeyCheckOnly
	if strings.Contains(site, "webapi_contracts") || apiShareHandler.MatchString(site) {
		kind = openapitest.Site
	}
	v, _ := openapitest.Default()
	v.SetHost(strings.TrimPrefix(siteURL, "http://"), kind)
	g.tester.InitServer(g.config(site), "caddyfile")
}

var apiShareHandler = regexp.MustCompile(`webapi_share\s`)

// defaultSite is the API routing of the default Caddyfile.
const defaultSite = `
	handle /webapi/openapi.json {
		webapi_openapi
	}
	handle /webapi/docs* {
		webapi_docs
	}
	handle /webapi/contracts* {
		webapi_auth contracts
		webapi_contracts
	}
	handle /webapi/share* {
		webapi_auth share
		webapi_share
	}
	handle /s/* {
		webapi_share_viewer
	}
	handle /sign/* {
		webapi_signing
	}
	handle /verify* {
		webapi_verify
	}
`

// response is a reply read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

func (r response) problem(t *testing.T) problem.Details {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type %q, want %s; body %s", ct, problem.ContentType, r.body)
	}
	var p problem.Details
	r.json(t, &p)
	if p.Status != r.status || p.Type != "about:blank" || p.Title != http.StatusText(r.status) {
		t.Fatalf("problem %+v does not match status %d", p, r.status)
	}
	return p
}

// do sends a request; body is JSON-encoded unless it is a string or nil.
func do(t *testing.T, method, url string, body any, header ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(openapitest.WithTB(context.Background(), t), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Content-Type" { // in place of the JSON default
			req.Header.Set(header[i], header[i+1])
			continue
		}
		req.Header.Add(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// must fails the test at once when a step, what, failed.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// bearer is the header pair for a token.
func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// createKey makes a key through the admin API and returns it with its token.
func createKey(t *testing.T, body map[string]any) keystore.Key {
	t.Helper()
	r := do(t, http.MethodPost, adminURL+"/webapi/keys", body)
	if r.status != http.StatusCreated {
		t.Fatalf("creating key: %d %s", r.status, r.body)
	}
	var k keystore.Key
	r.json(t, &k)
	if k.Token == "" {
		t.Fatalf("no token in %s", r.body)
	}
	return k
}

// readLogs returns every log file of the gateway's data directory, once
// the audit writer has had time to drain.
func (g *gateway) readLogs(t *testing.T, wantIn string) string {
	t.Helper()
	var all string
	deadline := time.Now().Add(testwait.Generous)
	for {
		all = ""
		for _, name := range []string{"audit.log", "caddy.log"} {
			b, _ := os.ReadFile(filepath.Join(g.dir, name))
			all += string(b)
		}
		if wantIn == "" || strings.Contains(all, wantIn) || time.Now().After(deadline) {
			return all
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clearOfWindowEdge waits, when less than margin is left of the
// current fixed window of the given length, for the next one to begin,
// so a short run of requests falls in a single window.
func clearOfWindowEdge(window, margin time.Duration) {
	if now := time.Now(); now.Truncate(window).Add(window).Sub(now) < margin {
		testwait.NextWindow(window, 10*time.Millisecond)
	}
}

// auditEntries reads the audit log once it holds wantRequests entries of
// requests (used or refused); entries of administration (keys created by
// the test's setup) are in the log too but do not count towards it.
func (g *gateway) auditEntries(t *testing.T, wantRequests int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(testwait.Generous)
	for {
		b, _ := os.ReadFile(filepath.Join(g.dir, "audit.log"))
		var out []map[string]any
		requests := 0
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue
			}
			var e map[string]any
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			out = append(out, e)
			if e["msg"] == "key used" || e["msg"] == "key refused" {
				requests++
			}
		}
		if requests >= wantRequests || time.Now().After(deadline) {
			return out
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitSealed waits until the contract at url (a GET with header) shows
// its documents sealed, which happens right after its completion, in the
// background.
func awaitSealed(t *testing.T, url string, header ...string) {
	t.Helper()
	testwait.For(t, testwait.Generous, "the documents of "+url+" to be sealed", func() bool {
		var c struct{ DocumentStatus string }
		do(t, http.MethodGet, url, nil, header...).json(t, &c)
		return c.DocumentStatus == "sealed"
	})
}
