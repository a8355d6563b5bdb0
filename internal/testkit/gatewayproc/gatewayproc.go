// Package gatewayproc runs the real keygate binary (bin/caddy) as a child
// process on free loopback ports: for the tests that must kill it, fill its
// disk or read its files (internal/e2e), and for the load generator of
// `make bench` and `make soak`. It knows nothing of the APIs beyond the admin
// calls every such test needs (keys, templates).
package gatewayproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/keygate/keygate/internal/testkit/freeport"
)

// Build compiles ./cmd/caddy of the module at root into out. The binary is
// built without the race detector: it is the product as shipped.
func Build(root, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/caddy")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/caddy: %v\n%s", err, b)
	}
	return nil
}

// ModuleRoot finds the directory of go.mod above dir.
func ModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("gatewayproc: no go.mod above the working directory")
		}
		dir = parent
	}
}

// DefaultSite is the site block of the default Caddyfile: the health
// endpoints, both APIs, the signing and share pages, and a problem body
// for everything else.
const DefaultSite = `
	handle /livez {
		webapi_health live
	}
	handle /readyz {
		webapi_health
	}
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
	handle {
		header {
			Content-Type application/problem+json
			X-Content-Type-Options nosniff
			X-Frame-Options DENY
			Content-Security-Policy "default-src 'none'; frame-ancestors 'none'"
			Cache-Control no-store
		}
		respond ` + "`" + `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"no such resource"}` + "`" + ` 404
	}
`

// Options describe one gateway.
type Options struct {
	// Bin is the keygate binary.
	Bin string
	// Dir is the data directory. The Caddyfile, the logs and the process's
	// output (stderr.log) are written into it too, so that one directory
	// holds everything of one gateway.
	Dir string
	// DataDir, when set, is the data directory (webapi.db, master.key,
	// mail/) instead of Dir; the Caddyfile and the logs stay in Dir. For
	// tests that put the data on a file system of its own (a small tmpfs).
	DataDir string
	// Site is the body of the site block; DefaultSite when empty.
	Site string
	// WebAPI are more lines of the webapi global option block (smtp, sms,
	// contract_validity, master_key_file).
	WebAPI string
	// Global are more lines of the global options block (servers, timeouts).
	Global string
	// FlushInterval is usage_flush_interval; 1s when zero.
	FlushInterval time.Duration
	// Env is added to the process's environment.
	Env []string
	// ExtraSites are the bodies of more site blocks, each served on a free
	// loopback port of its own (Gateway.Extra, in this order), as the
	// bench's bare respond site is.
	ExtraSites []string
	// AuditOutput is the audit log's writer: "file" when empty, or
	// "buffered_file" as the default Caddyfile has it.
	AuditOutput string
	// LogLevel is the default log's level; INFO when empty.
	LogLevel string
	// AuditRoll is the body of the audit writer's block: its rolling
	// options; "roll_disabled" when empty.
	AuditRoll string
}

// Gateway is one running (or stopped) keygate process.
type Gateway struct {
	opts Options
	// Admin and Site are base URLs: http://127.0.0.1:port.
	Admin, Site string
	// Config is the path of the Caddyfile it runs.
	Config string
	// Output is the path of the file that receives its stdout and stderr.
	Output string
	// Extra are the base URLs of Options.ExtraSites, in their order.
	Extra []string

	// ports are the admin, site and extra sites' ports, in that order.
	ports []int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // of Wait
}

// Caddyfile is the config the gateway runs with these ports; extraPorts
// are those of ExtraSites, one each.
func (o Options) Caddyfile(adminPort, sitePort int, extraPorts ...int) string {
	site := o.Site
	if site == "" {
		site = DefaultSite
	}
	flush := o.FlushInterval
	if flush == 0 {
		flush = time.Second
	}
	audit := o.AuditOutput
	if audit == "" {
		audit = "file"
	}
	level := o.LogLevel
	if level == "" {
		level = "INFO"
	}
	roll := o.AuditRoll
	if roll == "" {
		roll = "roll_disabled"
	}
	var extra strings.Builder
	for i, body := range o.ExtraSites {
		if i < len(extraPorts) {
			fmt.Fprintf(&extra, "\nhttp://127.0.0.1:%d {\n%s\n}\n", extraPorts[i], body)
		}
	}
	dataDir := o.DataDir
	if dataDir == "" {
		dataDir = o.Dir
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%[2]d
	grace_period 2s
	%[7]s
	webapi {
		data_dir %[11]s
		public_base_url http://127.0.0.1:%[3]d
		usage_flush_interval %[4]s
		# The tests' webhook receivers listen on loopback.
		webhook_allow_networks 127.0.0.0/8 ::1/128
		%[5]s
	}
	log webapi_audit {
		output %[8]s %[1]s/audit.log {
			%[12]s
		}
		format webapi_json
		include webapi.audit
	}
	log default {
		output file %[1]s/caddy.log {
			roll_disabled
		}
		format json
		level %[9]s
		exclude webapi.audit
	}
}

http://127.0.0.1:%[3]d {
%[6]s
}
%[10]s`, o.Dir, adminPort, sitePort, flush, o.WebAPI, site, o.Global, audit, level, extra.String(), dataDir, roll)
}

// Start writes the Caddyfile, starts the process and waits until both its
// site and its admin endpoint answer. Another process may take a chosen
// port before the gateway binds it (test packages run side by side, each
// starting servers on free ports): then it starts again on other ports.
func Start(o Options) (*Gateway, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if o.DataDir != "" {
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return nil, err
		}
	}
	for attempt := 1; ; attempt++ {
		g, portTaken, err := startOnFreePorts(o)
		if err == nil || attempt == 3 || !portTaken {
			return g, err
		}
	}
}

// startOnFreePorts is one attempt of Start; portTaken says whether it
// failed for a port that was taken meanwhile, by what this attempt logged.
func startOnFreePorts(o Options) (g *Gateway, portTaken bool, err error) {
	ports, err := freeport.Take(2 + len(o.ExtraSites))
	if err != nil {
		return nil, false, err
	}
	adminPort, sitePort, extraPorts := ports[0], ports[1], ports[2:]
	g = &Gateway{
		opts:   o,
		Admin:  "http://127.0.0.1:" + strconv.Itoa(adminPort),
		Site:   "http://127.0.0.1:" + strconv.Itoa(sitePort),
		Config: filepath.Join(o.Dir, "Caddyfile"),
		Output: filepath.Join(o.Dir, "stderr.log"),
		ports:  ports,
	}
	for _, p := range extraPorts {
		g.Extra = append(g.Extra, "http://127.0.0.1:"+strconv.Itoa(p))
	}
	if err := os.WriteFile(g.Config, []byte(o.Caddyfile(adminPort, sitePort, extraPorts...)), 0o600); err != nil {
		return nil, false, err
	}
	caddyLog := filepath.Join(o.Dir, "caddy.log")
	outFrom, logFrom := sizeOf(g.Output), sizeOf(caddyLog)
	if err := g.Restart(); err != nil {
		logged := readFrom(g.Output, outFrom) + readFrom(caddyLog, logFrom)
		return g, strings.Contains(logged, "address already in use"), err
	}
	return g, false, nil
}

// sizeOf is the size of the file at path, 0 without it.
func sizeOf(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom is the file at path from offset on, "" without it.
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// Twin is a gateway of o on g's ports (admin endpoint, site and extra
// sites), written but not started: for the tests of a second process on
// the addresses of a first. Its Dir must be another.
func (g *Gateway) Twin(o Options) (*Gateway, error) {
	if o.Dir == "" || o.Dir == g.opts.Dir {
		return nil, errors.New("gatewayproc: a twin needs a Dir of its own")
	}
	if len(o.ExtraSites) != len(g.ports)-2 {
		return nil, errors.New("gatewayproc: a twin has as many extra sites")
	}
	if o.Bin == "" {
		o.Bin = g.opts.Bin
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	t := &Gateway{opts: o, Admin: g.Admin, Site: g.Site, Extra: g.Extra, ports: g.ports,
		Config: filepath.Join(o.Dir, "Caddyfile"), Output: filepath.Join(o.Dir, "stderr.log")}
	return t, os.WriteFile(t.Config, []byte(o.Caddyfile(g.ports[0], g.ports[1], g.ports[2:]...)), 0o600)
}

// Reconfigure makes the next Restart run o's config on the gateway's
// ports, as an operator changes a stopped gateway's Caddyfile: its
// addresses, and so the links it gave out (public_base_url), stay the
// same. Bin and Dir are the gateway's when o leaves them empty; Dir keeps
// the Caddyfile, the logs and the output.
func (g *Gateway) Reconfigure(o Options) error {
	if o.Bin == "" {
		o.Bin = g.opts.Bin
	}
	if o.Dir == "" {
		o.Dir = g.opts.Dir
	}
	if o.Dir != g.opts.Dir {
		return errors.New("gatewayproc: Reconfigure keeps the gateway's Dir")
	}
	if len(o.ExtraSites) != len(g.ports)-2 {
		return errors.New("gatewayproc: Reconfigure keeps the number of extra sites")
	}
	if err := os.WriteFile(g.Config, []byte(o.Caddyfile(g.ports[0], g.ports[1], g.ports[2:]...)), 0o600); err != nil {
		return err
	}
	g.mu.Lock()
	g.opts = o
	g.mu.Unlock()
	return nil
}

// Restart starts the process again on the same ports and config, after
// Stop or Kill (or for the first time, from Start).
func (g *Gateway) Restart() error {
	if err := g.Launch(); err != nil {
		return err
	}
	return g.WaitReady(60 * time.Second)
}

// Launch starts the process without waiting for it to serve, for tests
// that expect it to fail at start.
func (g *Gateway) Launch() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd != nil {
		select {
		case <-g.exited:
		default:
			return errors.New("gatewayproc: already running")
		}
	}
	out, err := os.OpenFile(g.Output, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(g.opts.Bin, "run", "--config", g.Config, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), g.opts.Env...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	exited := make(chan struct{})
	g.cmd, g.exited, g.err = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		out.Close()
		g.mu.Lock()
		g.err = err
		g.mu.Unlock()
		close(exited)
	}()
	return nil
}

// WaitReady waits until the site and the admin endpoint accept
// connections, or the process exits (an error quoting its output).
func (g *Gateway) WaitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, base := range []string{g.Site, g.Admin} {
		addr := strings.TrimPrefix(base, "http://")
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-g.Exited():
				return fmt.Errorf("gateway exited at start: %v\n%s", g.ExitErr(), g.startLog())
			default:
			}
			if time.Now().After(deadline) {
				g.Kill()
				return fmt.Errorf("gateway did not listen on %s within %s\n%s", addr, limit, g.startLog())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Caddy listens before it makes the new config the running one; until
	// then the admin API answers "no webapi app". A config without the
	// app never gets past that, so the wait for it is bounded.
	appBy := time.Now().Add(10 * time.Second)
	for time.Now().Before(appBy) && time.Now().Before(deadline) {
		resp, err := probe.Get(g.Admin + "/webapi/keys")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// probe asks whether a gateway is ready. It has a Transport of its own,
// so the tests' OpenAPI check (which watches the default transport) does
// not see it: the test has not yet said which document the new ports
// serve, and a port reused from an earlier gateway's site would be
// checked against the wrong one.
var probe = &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}

// Exited is closed when the process has exited.
func (g *Gateway) Exited() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.exited
}

// ExitErr is the process's exit status once it has exited.
func (g *Gateway) ExitErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Pid is the running process's id.
func (g *Gateway) Pid() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cmd.Process.Pid
}

// Stop asks the process to stop (SIGINT, as Ctrl-C does) and waits for it;
// after 30 s it is killed.
func (g *Gateway) Stop() error {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("gateway did not stop within 30 s of SIGINT; killed")
	}
}

// Kill ends the process with SIGKILL, as a crash or the OOM killer would,
// and waits until it is gone.
func (g *Gateway) Kill() {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// Tail is the last n bytes of the process's output.
func (g *Gateway) Tail(n int64) string { return tailOf(g.Output, n) }

// startLog is what a failed start left: the process's output and, as
// Caddy logs an error of its initial config to the configured default
// log (caddy.log) rather than to stderr, that log's end too.
func (g *Gateway) startLog() string {
	return g.Tail(4096) + "\n--- caddy.log:\n" + tailOf(filepath.Join(g.opts.Dir, "caddy.log"), 4096)
}

// tailOf is the last n bytes of the file at path, or "" without it.
func tailOf(path string, n int64) string { return readFrom(path, max(sizeOf(path)-n, 0)) }

// Dir is the data directory: Options.DataDir if set, else Options.Dir.
func (g *Gateway) Dir() string {
	if g.opts.DataDir != "" {
		return g.opts.DataDir
	}
	return g.opts.Dir
}

// client is shared by the admin calls; a test's own requests use whatever
// client fits them.
var client = &http.Client{Timeout: 30 * time.Second}

// AdminJSON calls the admin endpoint with a JSON body (nil for none) and
// decodes a 2xx reply into out (nil to discard). Other statuses are errors
// carrying the body.
func (g *Gateway) AdminJSON(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, g.Admin+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return &StatusError{Method: method, Path: path, Status: resp.StatusCode, Body: string(b)}
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// StatusError is a reply of the admin endpoint other than 2xx.
type StatusError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.Method, e.Path, e.Status, e.Body)
}

// Key is a created key as the admin API returns it.
type Key struct {
	ID         string   `json:"id"`
	Service    string   `json:"service"`
	Name       string   `json:"name"`
	Owner      string   `json:"owner"`
	Privileges []string `json:"privileges"`
	UsageCount int64    `json:"usageCount"`
	Token      string   `json:"token,omitempty"`
}

// CreateKey creates a key through the admin API. extra adds attributes
// (allowedIps, adminProjects, ...).
func (g *Gateway) CreateKey(service, name, owner string, privileges []string, extra map[string]any) (Key, error) {
	body := map[string]any{"service": service, "name": name, "owner": owner, "privileges": privileges}
	for k, v := range extra {
		body[k] = v
	}
	var k Key
	err := g.AdminJSON("POST", "/webapi/keys", body, &k)
	return k, err
}

// AddTemplate registers a contract template through the admin API.
func (g *Gateway) AddTemplate(id, collection, title, body string) error {
	return g.AdminJSON("POST", "/webapi/templates",
		map[string]string{"id": id, "collectionId": collection, "title": title, "body": body}, nil)
}
