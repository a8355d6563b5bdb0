package caddymodule

import (
	"context"
	"encoding/json"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/keygate/keygate/caddymodule/auditlog"
	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/adminpage"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/host"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
)

func init() {
	caddy.RegisterModule(Admin{})
}

// Admin serves key, template and webhook administration on Caddy's admin
// endpoint (docs/administrators.md, Administration; clients.md, Webhooks). It is
// always on with the webapi app.
type Admin struct {
	mux *http.ServeMux
}

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.webapi",
		New: func() caddy.Module { return new(Admin) },
	}
}

// Provision sets up the routes. The admin endpoint is set up before the
// config's apps, and a config may have no webapi app at all, so the app is
// looked up per request: routes answer 404 while there is none, and a
// plain Caddy config run by this build opens no database.
func (a *Admin) Provision(caddy.Context) error {
	a.mux = a.routes(true)
	return nil
}

// routes is the admin API's mux: keys, consumers, plans and templates,
// and with webhooks the webhook subscriptions. The Web API Keys page
// (webapi_admin) serves its keys, consumers, plans and templates part.
func (a *Admin) routes(webhooks bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /webapi/keys", a.createKey)
	mux.HandleFunc("POST /webapi/keys/import", a.importKeys)
	mux.HandleFunc("GET /webapi/keys", a.listKeys)
	mux.HandleFunc("GET /webapi/keys/{id}", a.getKey)
	mux.HandleFunc("PATCH /webapi/keys/{id}", a.updateKey)
	mux.HandleFunc("DELETE /webapi/keys/{id}", a.deleteKey)
	mux.HandleFunc("POST /webapi/keys/{id}/reveal", a.revealKey)
	mux.HandleFunc("POST /webapi/keys/{id}/roll", a.rollKey)
	mux.HandleFunc("GET /webapi/keys/{id}/usage", a.keyUsage)
	mux.HandleFunc("POST /webapi/plans", a.createPlan)
	mux.HandleFunc("GET /webapi/plans", a.listPlans)
	mux.HandleFunc("GET /webapi/plans/{id}", a.getPlan)
	mux.HandleFunc("PATCH /webapi/plans/{id}", a.updatePlan)
	mux.HandleFunc("DELETE /webapi/plans/{id}", a.deletePlan)
	mux.HandleFunc("POST /webapi/consumers", a.createConsumer)
	mux.HandleFunc("GET /webapi/consumers", a.listConsumers)
	mux.HandleFunc("GET /webapi/consumers/{id}", a.getConsumer)
	mux.HandleFunc("PATCH /webapi/consumers/{id}", a.updateConsumer)
	mux.HandleFunc("DELETE /webapi/consumers/{id}", a.deleteConsumer)
	mux.HandleFunc("GET /webapi/consumers/{id}/usage", a.consumerUsage)
	mux.HandleFunc("GET /webapi/seal", a.showSeal)
	mux.HandleFunc("GET /webapi/host", a.checkHost)
	mux.HandleFunc("POST /webapi/templates", a.addTemplate)
	mux.HandleFunc("GET /webapi/templates", a.listTemplates)
	mux.HandleFunc("GET /webapi/templates/{id}", a.getTemplate)
	mux.HandleFunc("PUT /webapi/templates/{id}", a.putTemplate)
	mux.HandleFunc("DELETE /webapi/templates/{id}", a.deleteTemplate)
	if webhooks {
		mux.HandleFunc("POST /webapi/webhooks", a.createWebhook)
		mux.HandleFunc("GET /webapi/webhooks", a.listWebhooks)
		mux.HandleFunc("GET /webapi/webhooks/{id}", a.getWebhook)
		mux.HandleFunc("PATCH /webapi/webhooks/{id}", a.updateWebhook)
		mux.HandleFunc("DELETE /webapi/webhooks/{id}", a.deleteWebhook)
		mux.HandleFunc("POST /webapi/webhooks/{id}/rotate-secret", a.rotateWebhookSecret)
		mux.HandleFunc("POST /webapi/webhooks/{id}/test", a.testWebhook)
		mux.HandleFunc("GET /webapi/webhooks/{id}/deliveries", a.webhookDeliveries)
	}
	return mux
}

// Routes returns the admin routes.
func (a *Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: "/webapi/", Handler: caddy.AdminHandlerFunc(a.serve)}}
}

type adminAppKey struct{}

// appOf returns the webapi app serve found for r.
func appOf(r *http.Request) *App { return r.Context().Value(adminAppKey{}).(*App) }

// fail writes err as its problem (problem.FromError: a full disk is a
// 507, another storage failure a 503), logging what a 5xx hides. A change
// or reveal that failed is audited too, with the problem's code.
func (a *Admin) fail(w http.ResponseWriter, r *http.Request, err error) {
	d := problem.FromError(err)
	if d.Status >= 500 {
		appOf(r).logger.Error("admin request failed", zap.String("method", r.Method),
			zap.String("path", r.URL.Path), zap.Error(err))
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		rec := adminAudit(r, "admin action failed", "", d.Status)
		rec.Reason = d.Code
		failedResource(&rec, r)
		appOf(r).audit.Add(rec)
	}
	problem.Write(w, d)
}

// failedResource names in rec, a failed action's entry, the record its
// path addresses, in the field the action's own entry would name it: a
// search of the audit log by key_id then finds the failed delete of the
// key too. A token pasted into a path must reach only the entry's path,
// which the writer redacts, never a field, which it does not: an id is
// taken only when the redaction would leave it as it is, and a key's,
// consumer's, plan's or webhook's only when it is a UUID, as theirs are.
func failedResource(rec *auditlog.Record, r *http.Request) {
	_, pattern, _ := strings.Cut(r.Pattern, " ")
	id := r.PathValue("id")
	if id == "" || appOf(r).state.keys.RedactPath("/"+id) != "/"+id {
		return
	}
	kind, _, _ := strings.Cut(strings.TrimPrefix(pattern, "/webapi/"), "/")
	if kind == "templates" {
		rec.TemplateID = id
		return
	}
	if u, err := uuid.Parse(id); err != nil || u.String() != id {
		return
	}
	switch kind {
	case "keys":
		rec.KeyID = id
		if k, err := appOf(r).state.keys.Get(id); err == nil {
			// As the key's own entries name it.
			rec.KeyName, rec.Owner, rec.Service = k.Name, k.Owner, string(k.Service)
			rec.ConsumerID, rec.PlanID = k.Scopes()
		}
	case "consumers":
		rec.ConsumerID = id
	case "plans":
		rec.PlanID = id
	case "webhooks":
		rec.WebhookID = id
	}
}

func (a *Admin) serve(w http.ResponseWriter, r *http.Request) error {
	// The app of the running config, not of the config this module was
	// provisioned for: Caddy starts a new config's admin endpoint before
	// its apps, and keeps it when the apps then fail (a reload onto a
	// damaged database), while the previous config goes on running.
	v, err := caddy.ActiveContext().AppIfConfigured("webapi")
	if err != nil {
		problem.Write(w, problem.NotFound("the running config has no webapi app"))
		return nil
	}
	a.serveFor(w, r, v.(*App))
	return nil
}

// serveFor answers r for app's stores.
func (a *Admin) serveFor(w http.ResponseWriter, r *http.Request, app *App) {
	r = r.WithContext(context.WithValue(r.Context(), adminAppKey{}, app))
	if _, pattern := a.mux.Handler(r); pattern == "" {
		// The mux's own 404 and 405 are plain text; answer problems.
		if allow := allowedAdminMethods(a.mux, r); allow != "" {
			w.Header().Set("Allow", allow)
			problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, r.Method+" is not allowed here"))
			return
		}
		problem.Write(w, problem.NotFound("no such administration resource"))
		return
	}
	a.mux.ServeHTTP(w, r) // sets the path values Handler does not
}

// allowedAdminMethods probes the mux for the methods a path would take.
func allowedAdminMethods(mux *http.ServeMux, r *http.Request) string {
	allow := ""
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, p := mux.Handler(probe); p != "" {
			if allow != "" {
				allow += ", "
			}
			allow += m
		}
	}
	return allow
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	problem.SecureHeaders(w.Header()) // keys and tokens
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// adminAudit is the audit entry of an administration action on r: the
// user of the Web API Keys page (none on the admin endpoint) and the
// client address Caddy decided on (the socket's on the admin endpoint).
func adminAudit(r *http.Request, msg, service string, status int) auditlog.Record {
	return auditlog.Record{
		At:        time.Now(),
		Msg:       msg,
		User:      adminpage.User(r.Context()),
		Service:   service,
		Operation: "admin",
		Method:    r.Method,
		Path:      auditPath(r),
		ClientIP:  clientip.From(r),
		Status:    status,
		Duration:  -1,
	}
}

// strippedKey carries the escaped path prefix that Caddy stripped from a
// Web API Keys page request before webapi_admin saw it (handle_path).
type strippedKey struct{}

// pagePrefix is the escaped path the client put before the admin API's
// path: the Web API Keys page's mount, with any prefix Caddy stripped
// before it; "" on the admin endpoint. Locations and audit paths name
// resources as the client addressed them.
func pagePrefix(r *http.Request) string {
	p, _ := r.Context().Value(strippedKey{}).(string)
	return p + adminpage.Mount(r.Context())
}

// auditPath is the path the client asked for, unescaped as the audit log
// shows paths.
func auditPath(r *http.Request) string {
	p := pagePrefix(r)
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	return p + r.URL.Path
}

// auditAdmin records an administration action on key k like a key use.
func (a *Admin) auditAdmin(r *http.Request, msg string, k keystore.Key, status int) {
	rec := adminAudit(r, msg, string(k.Service), status)
	rec.KeyID, rec.KeyName, rec.Owner = k.ID, k.Name, k.Owner
	rec.ConsumerID, rec.PlanID = k.Scopes()
	appOf(r).audit.Add(rec)
}

// auditTemplate records an administration action on template id.
func (a *Admin) auditTemplate(r *http.Request, msg, id string, status int) {
	rec := adminAudit(r, msg, "contracts", status)
	rec.TemplateID = id
	appOf(r).audit.Add(rec)
}

func (a *Admin) createKey(w http.ResponseWriter, r *http.Request) {
	var in keystore.KeyInput
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	k, err := appOf(r).state.keys.Create(&in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	appOf(r).state.updateKeyGauges()
	a.auditAdmin(r, "key created", k, http.StatusCreated)
	w.Header().Set("Location", pagePrefix(r)+"/webapi/keys/"+k.ID)
	writeJSON(w, http.StatusCreated, k)
}

func (a *Admin) listKeys(w http.ResponseWriter, r *http.Request) {
	var f problem.Fields
	query, err := routeQuery(r, &f, "this list", "service", "consumerId", "planId")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	svc := access.Service(query.Get("service"))
	if svc != "" && !svc.Valid() {
		f.Add("service", "invalid", "service must be contracts or share")
	}
	if err := f.Err(); err != nil {
		a.fail(w, r, err)
		return
	}
	a.sync(r, "")
	keys := appOf(r).state.keys
	list := keys.List(svc)
	// The keys of one consumer (the Consumers view of the keys page), or
	// those that take a plan themselves. An unknown one is a mistake to
	// say, not an empty list.
	for _, by := range []struct {
		param, what string
		exists      func(id string) error
		of          func(k keystore.Key) string
	}{
		{"consumerId", "consumer", func(id string) error { _, err := keys.GetConsumer(id); return err },
			func(k keystore.Key) string { c, _ := k.Scopes(); return c }},
		{"planId", "plan", func(id string) error { _, err := keys.GetPlan(id); return err },
			func(k keystore.Key) string { _, p := k.Scopes(); return p }},
	} {
		if _, ok := query[by.param]; !ok {
			continue
		}
		id := query.Get(by.param)
		if by.exists(id) != nil {
			f.Add(by.param, "unknown", "no "+by.what+" has this id")
			continue
		}
		list = slices.DeleteFunc(list, func(k keystore.Key) bool { return by.of(k) != id })
	}
	if err := f.Err(); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// sync brings key id (every key when empty) up to date with the other
// instances of a shared database before it is shown; without the
// database the view in memory is shown, which the key check uses too.
func (a *Admin) sync(r *http.Request, id string) {
	if err := appOf(r).state.keys.Sync(id); err != nil {
		appOf(r).logger.Warn("reading keys back from the database", zap.Error(err))
	}
	// What instances took of each quota this period, this one before a
	// restart included.
	if err := appOf(r).state.keys.ReadQuotas(id); err != nil {
		appOf(r).logger.Warn("reading quota use from the database", zap.Error(err))
	}
}

func (a *Admin) getKey(w http.ResponseWriter, r *http.Request) {
	a.sync(r, r.PathValue("id"))
	k, err := appOf(r).state.keys.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, k)
}

func (a *Admin) updateKey(w http.ResponseWriter, r *http.Request) {
	var in keystore.KeyInput
	before, err := appOf(r).state.keys.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	if patch.Empty(&in) {
		a.getKey(w, r) // {} changes nothing: answered as a read
		return
	}
	k, err := appOf(r).state.keys.Update(r.PathValue("id"), &in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	msg := "key updated"
	switch {
	case before.Enabled && !k.Enabled:
		msg = "key disabled" // who switched a key off, and when
	case !before.Enabled && k.Enabled:
		msg = "key enabled"
	}
	a.auditAdmin(r, msg, k, http.StatusOK)
	writeJSON(w, http.StatusOK, k)
}

func (a *Admin) revealKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	k, err := appOf(r).state.keys.Get(id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	token, err := appOf(r).state.keys.Reveal(id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditAdmin(r, "key revealed", k, http.StatusOK)
	writeJSON(w, http.StatusOK, map[string]string{"token": token})
}

// defaultRollGrace is how long a rolled key's previous token goes on
// working when the roll names no graceSeconds.
const defaultRollGrace = 24 * time.Hour

// rollKey gives a key a new token: 200 with the key and its token, as a
// create answers. The body {"graceSeconds": N} is optional.
func (a *Admin) rollKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := appOf(r).state.keys.Get(id); err != nil {
		a.fail(w, r, err) // an unknown id is a 404 whatever the body
		return
	}
	// A JSON number: 86400, 86400.0 and 8.64e4 are the same whole number.
	var in struct {
		GraceSeconds *float64 `json:"graceSeconds"`
	}
	if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
		if err := problem.DecodeJSON(w, r, &in); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	grace := defaultRollGrace
	if g := in.GraceSeconds; g != nil {
		if *g != math.Trunc(*g) {
			a.fail(w, r, problem.Invalid([]problem.FieldError{{Field: "graceSeconds", Code: "invalid",
				Message: "graceSeconds must be a whole number of seconds"}}))
			return
		}
		grace = time.Duration(*g) * time.Second
		if *g < 0 || *g > float64(keystore.MaxRollGrace/time.Second) {
			grace = -1 // refused by Roll, naming the field
		}
	}
	k, err := appOf(r).state.keys.Roll(id, grace)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditAdmin(r, "key rolled", k, http.StatusOK)
	writeJSON(w, http.StatusOK, k)
}

func (a *Admin) deleteKey(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	k, err := appOf(r).state.keys.Get(id)
	if err == nil {
		err = appOf(r).state.keys.Delete(id)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	appOf(r).state.updateKeyGauges()
	a.auditAdmin(r, "key deleted", k, http.StatusNoContent)
	w.WriteHeader(http.StatusNoContent)
}

func (a *Admin) addTemplate(w http.ResponseWriter, r *http.Request) {
	var t contracts.Template
	if err := problem.DecodeJSON(w, r, &t); err != nil {
		a.fail(w, r, err)
		return
	}
	if err := appOf(r).state.templates.Add(t); err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditTemplate(r, "template added", t.ID, http.StatusCreated)
	w.Header().Set("Location", pagePrefix(r)+"/webapi/templates/"+url.PathEscape(t.ID))
	writeJSON(w, http.StatusCreated, t)
}

func (a *Admin) listTemplates(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	list, err := appOf(r).state.templates.List()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (a *Admin) getTemplate(w http.ResponseWriter, r *http.Request) {
	t, err := appOf(r).state.templates.Get(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (a *Admin) putTemplate(w http.ResponseWriter, r *http.Request) {
	var t contracts.Template
	if err := problem.DecodeJSON(w, r, &t); err != nil {
		a.fail(w, r, err)
		return
	}
	if t.ID == "" {
		t.ID = r.PathValue("id")
	}
	if t.ID != r.PathValue("id") {
		a.fail(w, r, problem.Invalid([]problem.FieldError{{Field: "id", Code: "mismatch", Message: "id must match the id in the path"}}))
		return
	}
	created, err := appOf(r).state.templates.Put(t)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	status, msg := http.StatusOK, "template replaced"
	if created {
		status, msg = http.StatusCreated, "template added"
	}
	a.auditTemplate(r, msg, t.ID, status)
	writeJSON(w, status, t)
}

func (a *Admin) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := appOf(r).state.templates.Delete(r.PathValue("id")); err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditTemplate(r, "template removed", r.PathValue("id"), http.StatusNoContent)
	w.WriteHeader(http.StatusNoContent)
}

// Interface guards
var (
	_ caddy.Provisioner = (*Admin)(nil)
	_ caddy.AdminRouter = (*Admin)(nil)
)

// showSeal shows the certificate that seals completed contracts'
// documents: subject, issuer, SHA-256 fingerprint and validity.
func (a *Admin) showSeal(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, appOf(r).sealInfo())
}

// checkHost calls the issue tracker with the configured account and says
// who it is and which projects it sees: 404 without a tracker, 503
// host_unavailable (saying why, never with a credential) when it does
// not answer or refuses the account.
func (a *Admin) checkHost(w http.ResponseWriter, r *http.Request) {
	h := appOf(r).host
	if h == nil {
		a.fail(w, r, problem.NotFound("no issue tracker is configured: add a host block to the webapi app"))
		return
	}
	acc, err := h.Account(r.Context())
	if err != nil {
		d := problem.New(http.StatusServiceUnavailable, problem.CodeHostUnavailable, err.Error())
		d.RetryAfter = 1
		a.fail(w, r, d)
		return
	}
	writeJSON(w, http.StatusOK, host.Check{Platform: h.Platform(), Account: acc})
}

// The usage series' defaults and bounds: the keys page's two charts, and
// no further back than hourly usage is kept.
const (
	defaultUsageHours = 48 * time.Hour
	defaultUsageDays  = 30 * 24 * time.Hour
)

// keyUsage returns a key's requests over time by outcome:
// ?from=&to=&resolution=hour|day (RFC 3339 bounds; by default the last
// 48 hours by hour, or the last 30 days by day).
func (a *Admin) keyUsage(w http.ResponseWriter, r *http.Request) {
	keys := appOf(r).state.keys
	a.serveUsage(w, r, func(id string) error { _, err := keys.Get(id); return err }, keys.UsageOver)
}

// serveUsage answers the usage series of the key or consumer of r's
// path: 404 when exists says it is not there, then the query's bounds,
// then the series.
func (a *Admin) serveUsage(w http.ResponseWriter, r *http.Request, exists func(id string) error,
	series func(id string, from, to time.Time, byDay bool) (keystore.UsageSeries, error)) {
	id := r.PathValue("id")
	if err := exists(id); err != nil {
		a.fail(w, r, err)
		return
	}
	from, to, byDay, err := usageQuery(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	s, err := series(id, from, to, byDay)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// routeQuery decodes r's query for an administration route that takes
// the parameters allowed, naming in f each parameter it does not take
// and each given more than once: a second value is never silently
// dropped. The error is the query's own (bad escapes or UTF-8).
func routeQuery(r *http.Request, f *problem.Fields, of string, allowed ...string) (url.Values, error) {
	query, err := problem.DecodeQuery(r.URL.RawQuery)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(query)) {
		switch {
		case !slices.Contains(allowed, name):
			msg := name + " is not a parameter of " + of
			if len(allowed) > 0 {
				msg += ": " + strings.Join(allowed, ", ")
			}
			f.Add(name, "unknown_parameter", msg)
		case len(query[name]) > 1:
			f.Add(name, "duplicate", name+" is given more than once")
		}
	}
	return query, nil
}

// usageQuery reads the bounds and resolution of a usage series from r's
// query, naming every bad parameter.
func usageQuery(r *http.Request) (from, to time.Time, byDay bool, err error) {
	var f problem.Fields
	query, err := routeQuery(r, &f, "the usage series", "from", "to", "resolution")
	if err != nil {
		return from, to, false, err
	}
	switch query.Get("resolution") {
	case "", "hour":
	case "day":
		byDay = true
	default:
		f.Add("resolution", "invalid", "resolution must be hour or day")
	}
	now := time.Now().UTC()
	bound := func(name string) (time.Time, bool) {
		v := query.Get(name)
		if v == "" {
			return time.Time{}, false
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			f.Add(name, "invalid", name+" must be an RFC 3339 time such as 2026-01-31T12:00:00Z")
			return time.Time{}, false
		}
		return t.UTC(), true
	}
	to, hasTo := bound("to")
	from, hasFrom := bound("from")
	if !hasTo {
		to = now
	}
	// The oldest start a series may have: the hour (or day) in which the
	// kept hours begin, as a from inside it is widened to its start.
	unit, span := time.Hour, defaultUsageHours
	if byDay {
		unit, span = 24*time.Hour, defaultUsageDays
	}
	oldest := now.Add(-keystore.UsageRetention).Truncate(unit)
	if !hasFrom {
		// Only to given, or neither: the default span, but never from
		// before the kept hours, which to alone did not ask for.
		from = to.Add(-span)
		if from.Before(oldest) {
			from = oldest
		}
	}
	switch {
	case hasTo && !hasFrom && !to.After(oldest):
		f.Add("to", "out_of_range", "to must be within the last 90 days: hourly usage is kept 90 days")
	case !from.Before(to):
		f.Add("from", "invalid", "from must be earlier than to")
	case from.Before(oldest):
		f.Add("from", "out_of_range", "from must be within the last 90 days: hourly usage is kept 90 days")
	// 48 hours: the end of a date's whole day, in any time zone, is
	// within them (a client east of UTC may well be in tomorrow).
	case to.After(now.Add(48 * time.Hour)):
		f.Add("to", "out_of_range", "to must be at most 48 hours from now")
	}
	return from, to, byDay, f.Err()
}
