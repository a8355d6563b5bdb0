package caddymodule

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/keygate/keygate/caddymodule/auditlog"
	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
)

func init() {
	caddy.RegisterModule(Auth{})
}

// Auth checks the bearer API key of every request against a service's
// operation table (docs/clients.md, Checking a request) and hands authorized
// requests on with the key's identity: in the request context for our
// API handlers, in placeholders, and in Keygate-* headers for a
// reverse_proxy behind it.
type Auth struct {
	// Service is the API the keys must belong to: contracts or share.
	Service string `json:"service,omitempty"`

	table   *access.Table
	keys    *keystore.Keys
	audit   *auditlog.Log
	logger  *zap.Logger
	metrics map[string]*opMetrics // by operation name, "none" for unrouted
	// refused is keygate_auth_refusals_total by reason, looked up once
	// at provision: a flood of refusals then hashes no label values and
	// takes no lock of the vector on each.
	refused map[string]prometheus.Counter
}

// opMetrics are one operation's series, looked up once at provision so
// a request does not hash label values.
type opMetrics struct {
	duration prometheus.Observer
	ok       prometheus.Counter         // requests[200], the usual one, without a map probe
	requests map[int]prometheus.Counter // by status; others looked up
	service  string
	name     string
}

// commonStatuses are the statuses whose counters are made in advance.
var commonStatuses = []int{200, 201, 204, 400, 401, 403, 404, 405, 409, 410, 413, 415, 429, 500, 502, 503}

func newOpMetrics(service, op string) *opMetrics {
	m := &opMetrics{
		duration: metrics.duration.WithLabelValues(service, op),
		requests: make(map[int]prometheus.Counter, len(commonStatuses)),
		service:  service,
		name:     op,
	}
	for _, code := range commonStatuses {
		m.requests[code] = metrics.requests.WithLabelValues(service, op, strconv.Itoa(code))
	}
	m.ok = m.requests[http.StatusOK]
	return m
}

func (m *opMetrics) count(status int) {
	if status == http.StatusOK {
		m.ok.Inc()
		return
	}
	if c, ok := m.requests[status]; ok {
		c.Inc()
		return
	}
	metrics.requests.WithLabelValues(m.service, m.name, strconv.Itoa(status)).Inc()
}

// CaddyModule returns the Caddy module information.
func (Auth) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_auth",
		New: func() caddy.Module { return new(Auth) },
	}
}

// tables maps each service to its operation table, the one its API
// handler routes by.
var tables = map[access.Service]*access.Table{
	access.ServiceContracts: &contracts.Operations,
	access.ServiceShare:     &share.Operations,
}

// Provision finds the table and the key store.
func (h *Auth) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.table = tables[access.Service(h.Service)]
	app, err := webapiApp(ctx)
	if err != nil {
		return err
	}
	h.keys = app.state.keys
	h.audit = app.audit
	if h.table != nil {
		h.metrics = map[string]*opMetrics{"none": newOpMetrics(h.Service, "none")}
		for _, op := range h.table.Operations {
			h.metrics[op.Name] = newOpMetrics(h.Service, op.Name)
		}
	}
	h.refused = make(map[string]prometheus.Counter, len(refusals))
	for reason := range refusals {
		h.refused[reason] = metrics.refusals.WithLabelValues(h.Service, reason)
	}
	return nil
}

// Validate checks the service name.
func (h *Auth) Validate() error {
	if h.table == nil {
		return fmt.Errorf("webapi_auth: service must be contracts or share, not %q", h.Service)
	}
	return nil
}

// identityVar is the Caddy request variable holding the *access.Identity
// of an authorized request.
const identityVar = "webapi.identity"

// identityHeaders are set for a reverse_proxy behind the check; any that
// arrive from the client are forged and dropped.
const (
	headerKeyID     = "Keygate-Key-Id"
	headerKeyOwner  = "Keygate-Key-Owner"
	headerOperation = "Keygate-Operation"
)

func (h *Auth) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	start := time.Now()
	for name := range r.Header {
		// The first byte alone rules out most names.
		if len(name) >= 8 && name[0]|0x20 == 'k' && strings.EqualFold(name[:8], "Keygate-") {
			delete(r.Header, name)
		}
	}
	// Caddy's variables, looked up once for client_ip and the identity.
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	ip := varsClientIP(vars)
	d := keystore.Authorize(&keystore.Request{
		Service: access.Service(h.Service),
		// The name is canonical already: Values would only canonicalize
		// it again (and Del below).
		Authorization: r.Header["Authorization"],
		ClientIP:      ip,
		Method:        r.Method,
		Path:          r.URL.Path,
		Now:           start,
	}, h.table, h.keys.Lookup)
	if policy, current := d.RateLimitHeaders(start); policy != "" {
		// Spelled as the draft spells them (HTTP/1.1 writes map keys as
		// they are; HTTP/2 lower-cases them), not Go's Ratelimit.
		hdr := w.Header()
		hdr["RateLimit-Policy"] = []string{policy}
		hdr["RateLimit"] = []string{current}
	}
	if !d.Authorized() {
		h.refuse(w, r, &d, ip, start)
		return nil
	}
	h.keys.Use(d.Entry, start)
	id := identity{d.Identity()}

	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Map(id.placeholder)
	}
	pass := &passed{sw: statusWriter{ResponseWriter: w}, values: [3]string{id.KeyID, id.Owner, id.Operation}}
	delete(r.Header, "Authorization")
	// Each value a slice of its own capacity: an append by a later
	// handler copies instead of writing over the next one.
	r.Header[headerKeyID] = pass.values[0:1:1]
	r.Header[headerKeyOwner] = pass.values[1:2:2]
	r.Header[headerOperation] = pass.values[2:3:3]
	// The identity rides in Caddy's request variables, which every request
	// has already: a handler that is not ours (reverse_proxy, respond) then
	// costs no context copy; apiHandler puts it into the context ours read.
	if vars != nil {
		vars[identityVar] = id.Identity
	}

	sw := &pass.sw
	err := next.ServeHTTP(sw, r)
	status := sw.status
	if err != nil {
		status = http.StatusInternalServerError
		if he, ok := err.(caddyhttp.HandlerError); ok && he.StatusCode != 0 {
			status = he.StatusCode
		}
	} else if status == 0 {
		status = http.StatusOK
	}
	elapsed := time.Since(start)
	m := h.metrics[id.Operation]
	m.count(status)
	m.duration.Observe(elapsed.Seconds())
	h.audit.Add(auditlog.Record{
		At:         start,
		Msg:        "key used",
		KeyID:      id.KeyID,
		KeyName:    id.KeyName,
		Owner:      id.Owner,
		ConsumerID: id.ConsumerID,
		PlanID:     id.PlanID,
		Service:    h.Service,
		Operation:  id.Operation,
		Method:     r.Method,
		Path:       r.URL.Path,
		ClientIP:   ip,
		Status:     status,
		Duration:   elapsed,
		// A use of the token a roll replaced, in its grace period.
		PreviousToken: d.PreviousToken,
	})
	return err
}

// passed is what an authorized request needs of its own, in one
// allocation: the writer that sees its status and the values of its
// identity headers.
type passed struct {
	sw     statusWriter
	values [3]string
}

// identity adds the placeholders to the key's identity.
type identity struct{ *access.Identity }

// placeholder provides {http.webapi.key.id}, {http.webapi.key.owner} and
// {http.webapi.operation} without a replacer map write per request.
func (id identity) placeholder(key string) (any, bool) {
	switch key {
	case "http.webapi.key.id":
		return id.KeyID, true
	case "http.webapi.key.owner":
		return id.Owner, true
	case "http.webapi.operation":
		return id.Operation, true
	}
	return nil, false
}

// refusals holds the detail of each refusal, for people reading the body.
var refusals = map[string]string{
	problem.CodeMissingKey:       "the request has no Authorization header: send Authorization: Bearer <key>",
	problem.CodeInvalidKey:       "the API key is not valid for this service",
	problem.CodeKeyNotValid:      "the API key is outside its validity period",
	problem.CodeKeyDisabled:      "the API key is disabled",
	problem.CodeIPNotAllowed:     "the API key may not be used from this address",
	problem.CodeNotFound:         "no such resource",
	problem.CodeMethodNotAllowed: "this method is not allowed on this resource",
	problem.CodeMissingPrivilege: "the API key lacks the privilege for this operation",
	problem.CodeRateLimited:      "the API key has made too many requests; retry after the time Retry-After gives",
	problem.CodeQuotaExceeded:    "the API key's quota for this period is spent; it resets when Retry-After has passed",
	problem.CodeUnavailable:      "the API key's quota cannot be checked now; try again later",
}

// consumerRefusals holds the detail of a refusal by the limits of the
// key's consumer.
var consumerRefusals = map[string]string{
	problem.CodeRateLimited:   "the API key's consumer has made too many requests over all its keys; retry after the time Retry-After gives",
	problem.CodeQuotaExceeded: "the quota of the API key's consumer for this period is spent over all its keys; it resets when Retry-After has passed",
}

func (h *Auth) refuse(w http.ResponseWriter, r *http.Request, d *keystore.Decision, ip netip.Addr, start time.Time) {
	hdr := w.Header()
	switch d.Reason {
	case problem.CodeInvalidKey, problem.CodeKeyNotValid, problem.CodeKeyDisabled:
		hdr.Set("WWW-Authenticate", `Bearer realm="webapi", error="invalid_token"`)
	case problem.CodeMissingKey:
		hdr.Set("WWW-Authenticate", `Bearer realm="webapi"`)
	case problem.CodeMissingPrivilege:
		hdr.Set("WWW-Authenticate", `Bearer realm="webapi", error="insufficient_scope", scope="`+string(d.Missing)+`"`)
	case problem.CodeMethodNotAllowed:
		hdr.Set("Allow", strings.Join(d.Allow, ", "))
	}
	detail := refusals[d.Reason]
	switch {
	case d.Reason == problem.CodeMissingPrivilege:
		detail = "the API key lacks the " + string(d.Missing) + " privilege"
	case d.PreviousTokenExpired:
		// Only the token's holder gets here, who knew it worked: saying
		// it expired discloses nothing, and saves a hunt for a wrong service.
		detail = "the API key's previous token expired when its grace period ended; use the new token"
	}
	if len(d.Violated) > 0 && strings.HasPrefix(d.Violated[0], "consumer:") {
		// The consumer's limits, which all its keys share, refused it.
		detail = consumerRefusals[d.Reason]
	}
	if len(d.Violated) > 0 {
		writeLimitRefusal(w, d, detail)
	} else {
		p := problem.New(d.Status, d.Reason, detail)
		p.RetryAfter = int(d.RetryAfter)
		problem.Write(w, p)
	}
	if d.Entry != nil {
		h.keys.Refused(d.Entry, d.Reason, start)
	}

	operation := "none"
	if d.Operation != nil {
		operation = d.Operation.Name
	}
	if c, ok := h.refused[d.Reason]; ok {
		c.Inc()
	} else {
		metrics.refusals.WithLabelValues(h.Service, d.Reason).Inc()
	}
	h.metrics[operation].count(d.Status)
	rec := auditlog.Record{
		At:        start,
		Msg:       "key refused",
		Service:   h.Service,
		Operation: operation,
		Method:    r.Method,
		Path:      r.URL.Path,
		ClientIP:  ip,
		Status:    d.Status,
		Reason:    d.Reason,
		Duration:  time.Since(start),
		// A refused use of the token a roll replaced says so too.
		PreviousToken: d.PreviousToken,
	}
	if k := d.Key(); k != nil {
		rec.KeyID, rec.KeyName, rec.Owner = k.ID, k.Name, k.Owner
		rec.ConsumerID, rec.PlanID = k.Scopes()
	}
	if d.Reason == problem.CodeRateLimited || d.Reason == problem.CodeQuotaExceeded {
		// A flood writes one entry a second a key, with the count of
		// the refusals it stands for.
		n, ok := d.Entry.AuditLimitRefusal(d.Reason, start)
		if !ok {
			return
		}
		rec.Refusals = n
	}
	h.audit.Add(rec)
}

// limitBodies holds the encoded problem bodies of rate-limit and quota
// refusals by reason and violated policies: a flood of them is answered
// without encoding each (a refusal of a known key must cost no more than
// one of an unknown key). The map is replaced, never written, so a
// lookup takes no lock; its key is built without allocating for the
// usual one violated policy. At most maxLimitBodies are kept.
var (
	limitBodies   atomic.Pointer[map[limitBodyKey][]byte]
	limitBodiesMu sync.Mutex // serializes replacing limitBodies
)

type limitBodyKey struct{ reason, policies string }

const maxLimitBodies = 10000

// writeLimitRefusal writes the 429 of d, which names violated policies.
func writeLimitRefusal(w http.ResponseWriter, d *keystore.Decision, detail string) {
	// Join returns a single policy's name as it is, allocating nothing.
	key := limitBodyKey{reason: d.Reason, policies: strings.Join(d.Violated, "\x00")}
	var body []byte
	if m := limitBodies.Load(); m != nil {
		body = (*m)[key]
	}
	if body == nil {
		p := problem.New(d.Status, d.Reason, detail)
		p.ViolatedPolicies = d.Violated
		b, err := json.Marshal(p)
		if err != nil {
			problem.Write(w, p)
			return
		}
		body = append(b, '\n')
		keepLimitBody(key, body)
	}
	h := w.Header()
	problem.SecureProblemHeaders(h, d.Status)
	h["Content-Type"] = []string{problem.ContentType}
	h["Retry-After"] = []string{strconv.FormatInt(d.RetryAfter, 10)}
	w.WriteHeader(d.Status)
	_, _ = w.Write(body)
}

// keepLimitBody adds body to limitBodies, in a copy of the map.
func keepLimitBody(key limitBodyKey, body []byte) {
	limitBodiesMu.Lock()
	defer limitBodiesMu.Unlock()
	var old map[limitBodyKey][]byte
	if m := limitBodies.Load(); m != nil {
		old = *m
	}
	if len(old) >= maxLimitBodies {
		return
	}
	m := make(map[limitBodyKey][]byte, len(old)+1)
	maps.Copy(m, old)
	m[key] = body
	limitBodies.Store(&m)
}

// requestClientIP is Caddy's client_ip, which honours trusted_proxies.
func requestClientIP(r *http.Request) netip.Addr {
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	return varsClientIP(vars)
}

// varsClientIP is client_ip from Caddy's request variables.
func varsClientIP(vars map[string]any) netip.Addr {
	s, _ := vars[caddyhttp.ClientIPVarKey].(string)
	return clientip.Parse(s)
}

// statusWriter remembers the status an API handler or proxy wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// webapiApp returns the webapi app of ctx's config, loading it with its
// defaults when the config has no webapi global option.
func webapiApp(ctx caddy.Context) (*App, error) {
	v, err := ctx.App("webapi")
	if err != nil {
		return nil, err
	}
	return v.(*App), nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Auth)(nil)
	_ caddy.Validator             = (*Auth)(nil)
	_ caddyhttp.MiddlewareHandler = (*Auth)(nil)
)
