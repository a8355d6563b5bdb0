package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

func init() {
	caddy.RegisterModule(Health{})
}

// Health answers whether this instance can serve, for load balancers and
// orchestrators: `webapi_health live` (liveness) answers 200 while the
// process serves; `webapi_health` (readiness) answers 200 only while the
// storage answers, the key index is loaded and the background workers
// run, else 503 with a problem body naming what is not ready. The default
// Caddyfile mounts them at /livez and /readyz, without a key: they say
// nothing a client could use beyond which part is not ready.
type Health struct {
	// Live makes this the liveness endpoint: 200 whatever the storage
	// says, so that an orchestrator restarts the process only when it
	// no longer serves at all, not when its database is away.
	Live bool `json:"live,omitempty"`

	app *App
}

// CaddyModule returns the Caddy module information.
func (Health) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_health",
		New: func() caddy.Module { return new(Health) },
	}
}

// Provision finds the webapi app, for readiness.
func (h *Health) Provision(ctx caddy.Context) error {
	if h.Live {
		return nil
	}
	app, err := webapiApp(ctx)
	if err != nil {
		return err
	}
	h.app = app
	return nil
}

// ServeHTTP answers GET and HEAD, never cached.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if onlyGetHead(w, r) {
		return nil
	}
	hd := w.Header()
	problem.SecureHeaders(hd)
	if h.Live {
		writeHealth(w, r, http.StatusOK, "application/json", healthReply{status: "live"})
		return nil
	}
	checks := h.app.readiness.check(r.Context())
	if failed := notReady(checks); len(failed) > 0 {
		hd.Set("Retry-After", "1")
		d := problem.New(http.StatusServiceUnavailable, codeNotReady, "not ready: "+strings.Join(failed, "; "))
		writeHealth(w, r, http.StatusServiceUnavailable, "application/problem+json",
			healthReply{problem: d, checks: checks})
		return nil
	}
	writeHealth(w, r, http.StatusOK, "application/json", healthReply{status: "ready", checks: checks})
	return nil
}

// codeNotReady is the problem code of a 503 from /readyz.
const codeNotReady = "not_ready"

// healthReply is the body of both endpoints: {"status": "live"|"ready",
// "checks": [...]}, or, not ready, a problem body (whose "status" is the
// HTTP status, as RFC 9457 has it) with the checks beside its fields.
type healthReply struct {
	problem *problem.Details
	status  string
	checks  []readyCheck
}

func (r healthReply) MarshalJSON() ([]byte, error) {
	if r.problem != nil {
		return json.Marshal(struct {
			*problem.Details
			Checks []readyCheck `json:"checks"`
		}{r.problem, r.checks})
	}
	return json.Marshal(struct {
		Status string       `json:"status"`
		Checks []readyCheck `json:"checks,omitempty"`
	}{r.status, r.checks})
}

func writeHealth(w http.ResponseWriter, r *http.Request, status int, contentType string, body healthReply) {
	b, err := json.Marshal(body)
	if err != nil {
		b = []byte(`{}`)
	}
	hd := w.Header()
	hd.Set("Content-Type", contentType)
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		_, _ = w.Write(b)
	}
}

// readyCheck is one part of readiness.
type readyCheck struct {
	Name   string `json:"name"`
	Ready  bool   `json:"ready"`
	Detail string `json:"detail,omitempty"`
	// cause is the error behind a part not ready, for the log.
	cause error
}

func notReady(checks []readyCheck) []string {
	var out []string
	for _, c := range checks {
		if !c.Ready {
			out = append(out, c.Name+" ("+c.Detail+")")
		}
	}
	return out
}

// Readiness timing: the storage must answer within pingTimeout; a result
// serves every request for readyTTL, so that a flood of /readyz costs the
// database one query a second; a caller waits at most readyWait for a
// check in progress, whatever the database does.
const (
	pingTimeout = time.Second
	readyTTL    = time.Second
	readyWait   = 2 * time.Second
)

// readiness checks an App's parts, one check at a time, its result kept
// for readyTTL.
type readiness struct {
	app *App
	// sweeping is true while the App's background loop (usage flush,
	// sweep) runs.
	sweeping atomic.Bool

	mu      sync.Mutex
	at      time.Time
	last    []readyCheck
	running chan struct{} // closed when the check in progress ends
}

// check returns the latest result, running a new check if it is older
// than readyTTL. A caller that would wait beyond readyWait gets a
// not-ready answer that says the check is still running.
func (rd *readiness) check(ctx context.Context) []readyCheck {
	rd.mu.Lock()
	if rd.last != nil && time.Since(rd.at) < readyTTL {
		last := rd.last
		rd.mu.Unlock()
		return last
	}
	done := rd.running
	if done == nil {
		done = make(chan struct{})
		rd.running = done
		go rd.run(done)
	}
	rd.mu.Unlock()

	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case <-done:
		rd.mu.Lock()
		defer rd.mu.Unlock()
		return rd.last
	case <-t.C:
	case <-ctx.Done():
	}
	return []readyCheck{{Name: "storage", Detail: "the check of the database is taking longer than " + readyWait.String()}}
}

func (rd *readiness) run(done chan struct{}) {
	checks := rd.app.checkParts()
	rd.mu.Lock()
	was := rd.last
	rd.last, rd.at, rd.running = checks, time.Now(), nil
	rd.mu.Unlock()
	close(done)
	// Each change of readiness is logged once, with its cause.
	if wasReady, isReady := len(notReady(was)) == 0, len(notReady(checks)) == 0; was == nil && !isReady || was != nil && wasReady != isReady {
		if isReady {
			rd.app.logger.Info("ready again")
			return
		}
		fields := []zap.Field{zap.Strings("not_ready", notReady(checks))}
		for _, c := range checks {
			if c.cause != nil {
				fields = append(fields, zap.NamedError(c.Name, c.cause))
			}
		}
		rd.app.logger.Warn("not ready", fields...)
	}
}

// checkParts checks the storage, the key index and the background
// workers of a.
func (a *App) checkParts() []readyCheck {
	s := a.state
	storage := readyCheck{Name: "storage", Ready: true}
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := s.stores.DB.Ping(ctx); err != nil {
		storage.Ready = false
		switch {
		case s.stores.DB.Backend() != pgdb.Name:
			storage.Detail = "the database file is not open"
		case ctx.Err() != nil:
			storage.Detail = "the postgres database did not answer within " + pingTimeout.String()
		default:
			// The cause goes to the log (the DSN's secrets cut out by
			// pgdb), not to a public endpoint.
			storage.Detail = "the postgres database could not be reached"
		}
		storage.cause = err
	}
	keys := readyCheck{Name: "keys", Ready: s.keys != nil}
	if !keys.Ready {
		keys.Detail = "the key index is not loaded"
	}
	workers := readyCheck{Name: "workers", Ready: true}
	var stopped []string
	if !a.readiness.sweeping.Load() {
		stopped = append(stopped, "usage flush and sweep")
	}
	if !s.delivering.Load() {
		stopped = append(stopped, "notification delivery")
	}
	if !s.deliveringWebhooks.Load() {
		stopped = append(stopped, "webhook delivery")
	}
	if s.stores.DB.Backend() == pgdb.Name && !s.following.Load() {
		stopped = append(stopped, "following other instances' key changes")
	}
	if len(stopped) > 0 {
		workers.Ready = false
		workers.Detail = "not running: " + strings.Join(stopped, ", ")
	}
	return []readyCheck{storage, keys, workers}
}

// ready is the App whose readiness keygate_ready reports: the one
// started last, until it stops.
var ready atomic.Pointer[App]

// readyValue is keygate_ready: 1 while the App started last is ready, 0
// otherwise.
func readyValue() float64 {
	a := ready.Load()
	if a == nil || len(notReady(a.readiness.check(context.Background()))) > 0 {
		return 0
	}
	return 1
}

// UnmarshalCaddyfile reads `webapi_health [live]`.
func (h *Health) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		if d.Val() != "live" {
			return d.Errf("webapi_health takes no argument but live, got %q", d.Val())
		}
		h.Live = true
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("webapi_health takes no block")
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Health)(nil)
	_ caddyhttp.MiddlewareHandler = (*Health)(nil)
	_ caddyfile.Unmarshaler       = (*Health)(nil)
)
