package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// The bench gateway's addresses: a bare respond site, webapi_auth in front
// of the same respond, and the APIs as the default Caddyfile serves them.
const (
	adminAddr   = "localhost:12019"
	bareAddr    = "127.0.0.1:18081"
	authAddr    = "127.0.0.1:18082"
	apiAddr     = "127.0.0.1:18083"
	benchConfig = `{
	admin localhost:12019
	webapi {
		data_dir %[1]s
		public_base_url http://localhost:18083
	}
	log webapi_audit {
		output buffered_file %[1]s/audit.log {
			roll_disabled
		}
		format json
		include webapi.audit
	}
	log default {
		output file %[1]s/caddy.log
		level WARN
		exclude webapi.audit
	}
}

http://:18081 {
	respond "ok" 200
}

http://:18082 {
	webapi_auth contracts
	respond "ok" 200
}

http://:18083 {
	handle /webapi/contracts* {
		webapi_auth contracts
		webapi_contracts
	}
	handle /webapi/share* {
		webapi_auth share
		webapi_share
	}
}
`
)

// gatewayProc is a running bin/caddy.
type gatewayProc struct {
	cmd    *exec.Cmd
	dir    string
	exited <-chan struct{}
}

// loadSpec is where to send what.
type loadSpec struct {
	name string // for -profile-of
	addr string
	next func(client, n int) request
}

// running is the gateway to stop before the bench exits on an error, so
// no stale process keeps the ports for the next run.
var running *gatewayProc

// fatalf stops the running gateway and exits.
func fatalf(format string, args ...any) {
	if running != nil {
		running.stop()
	}
	log.Fatalf(format, args...)
}

func startGateway(bin, dir string) (*gatewayProc, error) {
	for _, addr := range []string{adminAddr, bareAddr, authAddr, apiAddr} {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is already in use: stop the process holding it", addr)
		}
	}
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(benchConfig, dir)), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
	logFile, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gatewayProc{cmd: cmd, dir: dir}
	running = g
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	g.exited = exited
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("tcp", apiAddr)
		if err == nil {
			c.Close()
			return g, nil
		}
		select {
		case <-exited:
			running = nil
			return nil, fmt.Errorf("gateway exited at start; see %s", logFile.Name())
		default:
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, fmt.Errorf("gateway did not start; see %s", logFile.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *gatewayProc) stop() {
	running = nil
	_ = g.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

func auth(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func (g *gatewayProc) bare() loadSpec {
	req := newRequest("GET", bareAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", nil, nil, 200)
	return loadSpec{name: "bare", addr: bareAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) authRespond(d *dataset) loadSpec {
	req := newRequest("GET", authAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", auth(d.contractsToken), nil, 200)
	return loadSpec{name: "auth", addr: authAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) getContract(d *dataset) loadSpec {
	req := newRequest("GET", apiAddr, "/webapi/contracts/"+d.contractID, auth(d.contractsToken), nil, 200)
	return loadSpec{name: "contract-get", addr: apiAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) getShare(d *dataset) loadSpec {
	req := newRequest("GET", apiAddr, "/webapi/share/"+d.shareUUID, auth(d.shareToken), nil, 200)
	return loadSpec{name: "share-get", addr: apiAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) createContract(d *dataset) loadSpec {
	h := auth(d.contractsToken)
	h.Set("Content-Type", "application/json")
	req := newRequest("POST", apiAddr, "/webapi/contracts", h, contractBody(d.templates[0], 1), 201)
	return loadSpec{name: "contract-create", addr: apiAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) searchByTemplateCreator(d *dataset) loadSpec {
	var reqs []request
	for i := 0; i < 64; i++ {
		q := url.Values{"template-id": {d.templates[i%len(d.templates)]}, "creator-id": {d.creators[(i*7)%len(d.creators)]},
			"order": {"creation-date-desc"}, "page-size": {"100"}}
		reqs = append(reqs, newRequest("GET", apiAddr, "/webapi/contracts?"+q.Encode(), auth(d.contractsToken), nil, 200))
	}
	return loadSpec{name: "contract-search", addr: apiAddr, next: func(_ int, n int) request { return reqs[n%len(reqs)] }}
}

func (g *gatewayProc) searchSubstring(d *dataset) loadSpec {
	var reqs []request
	for _, s := range []string{"Zoë", "ngström", "brook", "ACME"} {
		q := url.Values{"substring": {s}, "order": {"creation-date-desc"}}
		reqs = append(reqs, newRequest("GET", apiAddr, "/webapi/contracts?"+q.Encode(), auth(d.contractsToken), nil, 200))
	}
	return loadSpec{name: "contract-substring", addr: apiAddr, next: func(_ int, n int) request { return reqs[n%len(reqs)] }}
}

func (g *gatewayProc) listShares(d *dataset) loadSpec {
	var reqs []request
	for i := 0; i < 64; i++ {
		q := url.Values{"projectId": {d.projects[(i*13)%len(d.projects)]}, "sort": {"created_at"}, "sortOrder": {"desc"}, "limit": {"100"}}
		reqs = append(reqs, newRequest("GET", apiAddr, "/webapi/share?"+q.Encode(), auth(d.shareToken), nil, 200))
	}
	return loadSpec{name: "share-list", addr: apiAddr, next: func(_ int, n int) request { return reqs[n%len(reqs)] }}
}

// captureProfile fetches a CPU profile from the admin endpoint while a run
// goes on; the returned channel closes when the file is written.
func (g *gatewayProc) captureProfile(file string, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		secs := int(d.Seconds())
		if secs < 1 {
			secs = 1
		}
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", adminAddr, secs))
		if err != nil {
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(file)
		if err != nil {
			return
		}
		defer f.Close()
		io.Copy(f, resp.Body)
	}()
	return done
}
