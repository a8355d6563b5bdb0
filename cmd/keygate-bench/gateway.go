package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
)

// benchSite is the API site of the bench gateway: the two APIs and the
// share pages as the default Caddyfile serves them. The gateway
// also serves a bare respond site and webapi_auth in front of the same
// respond, each on a port of its own.
const benchSite = `
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
`

var benchExtraSites = []string{
	"\trespond \"ok\" 200",
	"\twebapi_auth contracts\n\trespond \"ok\" 200",
}

// gatewayProc is a running bin/caddy (internal/gatewayproc) and the
// host:port of each of its sites.
type gatewayProc struct {
	*gatewayproc.Gateway
	bareAddr, authAddr, apiAddr, adminAddr string
}

// loadSpec is where to send what.
type loadSpec struct {
	name string // for -profile-of
	addr string
	next func(client, n int) request
}

// running is the gateway to stop before the bench exits on an error, so
// no stale process outlives it.
var running *gatewayProc

// stopBackend stops the bench's PostgreSQL, if it started one.
var stopBackend = func() {}

// fatalf stops the running gateway and the backend and exits.
func fatalf(format string, args ...any) {
	if running != nil {
		running.stop()
	}
	stopBackend()
	log.Fatalf(format, args...)
}

// startGateway runs bin on st's store with the bench's sites, the audit
// log through buffered_file as in the default Caddyfile, the default log
// at WARN, and its mail sent over SMTP to benchMail when the run has one.
func startGateway(bin string, st store) (*gatewayProc, error) {
	webapi := st.webapi
	if benchMail != nil {
		webapi += smtpTo(benchMail.addr)
	}
	g, err := gatewayproc.Start(gatewayproc.Options{
		Bin: bin, Dir: st.dir, Site: benchSite, ExtraSites: benchExtraSites,
		AuditOutput: "buffered_file", LogLevel: "WARN", WebAPI: webapi,
	})
	if err != nil {
		return nil, err
	}
	hostPort := func(base string) string { return strings.TrimPrefix(base, "http://") }
	running = &gatewayProc{Gateway: g, apiAddr: hostPort(g.Site), adminAddr: hostPort(g.Admin),
		bareAddr: hostPort(g.Extra[0]), authAddr: hostPort(g.Extra[1])}
	return running, nil
}

// benchMail is the SMTP server on loopback the bench gateways send their
// mail to, as a production gateway sends to its relay
// (examples/production.Caddyfile). Without it (-mail drop) they write
// each message into the data directory's mail drop, the development
// default, whose file and fsync per message cost as much CPU as the
// filesystem makes them.
var benchMail *mailSink

// smtpTo is the webapi block's lines that send mail to addr.
func smtpTo(addr string) string {
	return fmt.Sprintf("\n\t\tsmtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}", addr)
}

func (g *gatewayProc) stop() {
	running = nil
	if err := g.Stop(); err != nil {
		log.Print(err)
	}
}

func auth(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// bare is the baseline: the bare respond site given the request of the
// figure measured against it, its Authorization header included. A
// client sends that header whether or not a gateway stands in front, so
// the baseline reads and copies it too, and the ratio is what webapi_auth
// and the handler behind it add. bareNoKey sends it nothing, to show
// what the header alone costs.
func (g *gatewayProc) bare(d *dataset) loadSpec {
	req := newRequest("GET", g.bareAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", auth(d.contractsToken), nil, 200)
	return loadSpec{name: "bare", addr: g.bareAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) bareNoKey() loadSpec {
	req := newRequest("GET", g.bareAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", nil, nil, 200)
	return loadSpec{name: "bare-no-key", addr: g.bareAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) authRespond(d *dataset) loadSpec {
	req := newRequest("GET", g.authAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", auth(d.contractsToken), nil, 200)
	return loadSpec{name: "auth", addr: g.authAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) getContract(d *dataset) loadSpec {
	req := newRequest("GET", g.apiAddr, "/webapi/contracts/"+d.contractID, auth(d.contractsToken), nil, 200)
	return loadSpec{name: "contract-get", addr: g.apiAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) getShare(d *dataset) loadSpec {
	req := newRequest("GET", g.apiAddr, "/webapi/share/"+d.shareUUID, auth(d.shareToken), nil, 200)
	return loadSpec{name: "share-get", addr: g.apiAddr, next: func(int, int) request { return req }}
}

func (g *gatewayProc) createContract(d *dataset) loadSpec {
	h := auth(d.contractsToken)
	h.Set("Content-Type", "application/json")
	req := newRequest("POST", g.apiAddr, "/webapi/contracts", h, contractBody(d.templates[0], 1), 201)
	return loadSpec{name: "contract-create", addr: g.apiAddr, next: func(int, int) request { return req }}
}

// keySeq numbers the Idempotency-Keys of the bench, so that no two
// requests of a process share one, whichever run sends them.
var keySeq atomic.Int64

// createContractKeyed is createContract with an Idempotency-Key of its
// own on each request, so that each creates (and stores its reply).
func (g *gatewayProc) createContractKeyed(d *dataset) loadSpec {
	h := auth(d.contractsToken)
	h.Set("Content-Type", "application/json")
	h.Set("Idempotency-Key", "\x00")
	raw := newRequest("POST", g.apiAddr, "/webapi/contracts", h, contractBody(d.templates[0], 1), 201).raw
	at := bytes.IndexByte(raw, 0)
	before, after := raw[:at], raw[at+1:]
	return loadSpec{name: "contract-create-keyed", addr: g.apiAddr, next: func(worker, n int) request {
		b := make([]byte, 0, len(raw)+24)
		b = append(b, before...)
		b = fmt.Appendf(b, "bench-%d", keySeq.Add(1))
		return request{raw: append(b, after...), expect: 201}
	}}
}

func (g *gatewayProc) searchByTemplateCreator(d *dataset) loadSpec {
	var reqs []request
	for i := 0; i < 64; i++ {
		q := url.Values{"template-id": {d.templates[i%len(d.templates)]}, "creator-id": {d.creators[(i*7)%len(d.creators)]},
			"order": {"creation-date-desc"}, "page-size": {"100"}}
		reqs = append(reqs, newRequest("GET", g.apiAddr, "/webapi/contracts?"+q.Encode(), auth(d.contractsToken), nil, 200))
	}
	return loadSpec{name: "contract-search", addr: g.apiAddr, next: func(_ int, n int) request { return reqs[n%len(reqs)] }}
}

func (g *gatewayProc) searchSubstring(d *dataset) loadSpec {
	var reqs []request
	for _, s := range []string{"Zoë", "ngström", "brook", "ACME"} {
		q := url.Values{"substring": {s}, "order": {"creation-date-desc"}}
		reqs = append(reqs, newRequest("GET", g.apiAddr, "/webapi/contracts?"+q.Encode(), auth(d.contractsToken), nil, 200))
	}
	return loadSpec{name: "contract-substring", addr: g.apiAddr, next: func(_ int, n int) request { return reqs[n%len(reqs)] }}
}

func (g *gatewayProc) listShares(d *dataset) loadSpec {
	var reqs []request
	for i := 0; i < 64; i++ {
		q := url.Values{"projectId": {d.projects[(i*13)%len(d.projects)]}, "sort": {"created_at"}, "sortOrder": {"desc"}, "limit": {"100"}}
		reqs = append(reqs, newRequest("GET", g.apiAddr, "/webapi/share?"+q.Encode(), auth(d.shareToken), nil, 200))
	}
	return loadSpec{name: "share-list", addr: g.apiAddr, next: func(_ int, n int) request { return reqs[n%len(reqs)] }}
}

// clockTick is the unit of /proc/PID/stat's times (USER_HZ, 100 on
// every Linux the bench runs on).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time the gateway process has used so far, user and
// system, all its threads; 0 where /proc cannot tell.
func (g *gatewayProc) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g.Pid()))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and
	// may hold spaces: state is the first, utime the 12th, stime the 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
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
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", g.adminAddr, secs))
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
