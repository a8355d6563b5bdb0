// Package openapitest checks HTTP exchanges with a gateway against
// keygate's OpenAPI documents (internal/openapi), so that the documents
// cannot drift from the code: the integration tests send every request
// through Transport, and any reply that does not match (an undocumented
// status, header, field or value) fails the test that received it, with
// the operation and the mismatch named.
//
// Requests are checked too, with one rule: a request that the document
// refuses must get a 4xx (a test may send a bad request on purpose, but
// the gateway must not accept what the document says it refuses).
// Replies that are not the API (HTML pages, PDFs) are checked for status,
// media type and headers only. Routes, parameters, security, statuses
// and headers are checked with kin-openapi's openapi3filter; JSON bodies
// with the JSON Schema 2020-12 validator it uses for OpenAPI 3.1
// (santhosh-tekuri/jsonschema), each schema compiled once (schemas.go).
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/mail"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/keygate/keygate/internal/openapi"
)

// genericHeaders are the reply headers no operation documents: those of
// HTTP itself and of the server, and the security headers every page and
// body of keygate carries alike (problem.SecureHeaders), which say
// nothing about the API. Keys are canonical.
var genericHeaders = map[string]bool{
	"Date": true, "Content-Length": true, "Content-Type": true, "Server": true,
	"Vary": true, "Connection": true, "Alt-Svc": true, "Via": true,
	"Transfer-Encoding": true, "Keep-Alive": true, "Trailer": true,
	"X-Content-Type-Options": true, "X-Frame-Options": true,
	"Content-Security-Policy": true, "Referrer-Policy": true, "X-Robots-Tag": true,
	"Strict-Transport-Security": true,
}

// adminPrefixes are the paths of the admin document, on Caddy's admin
// endpoint; pagePrefixes those of them a Web API Keys page serves too,
// under its mount.
var (
	adminPrefixes = []string{"/webapi/keys", "/webapi/consumers", "/webapi/plans", "/webapi/templates", "/webapi/webhooks", "/webapi/seal"}
	pagePrefixes  = []string{"/webapi/keys", "/webapi/consumers", "/webapi/plans", "/webapi/templates"}
)

// apiPrefixes are the paths of the Web API document, on the site.
var apiPrefixes = []string{"/webapi/", "/sign/", "/s/"}

// Kind tells which document a host's replies are checked against.
type Kind int

const (
	// Unknown hosts are told apart by path.
	Unknown Kind = iota
	// Site hosts serve the Web APIs and pages.
	Site
	// Admin hosts are Caddy's admin endpoint.
	Admin
	// KeyCheckOnly hosts run webapi_auth in front of something else (a
	// test's echo handler, a reverse_proxy): only the key check's
	// refusals, problem bodies, are keygate's to check.
	KeyCheckOnly
)

// document is one loaded OpenAPI document with its router.
type document struct {
	name   string
	doc    *openapi3.T
	router routers.Router
	// schemas compiles the document's schemas once each: kin-openapi
	// compiles a schema anew for every value it checks in 3.1 mode (tens
	// of milliseconds for a share), which would slow every test down.
	schemas *schemaCache
}

// Validator checks exchanges against the two documents. It is safe for
// concurrent use.
type Validator struct {
	api, admin *document
	opts       []openapi3.SchemaValidationOption

	mu    sync.Mutex
	hosts map[string]Kind
	// pages are the mounts of the Web API Keys page by host: its JSON
	// calls under them are the admin document's operations.
	pages map[string][]string
	// checked counts the exchanges checked against a document.
	checked atomic.Int64
}

// Checked is the number of exchanges checked so far.
func (v *Validator) Checked() int64 { return v.checked.Load() }

var (
	defaultOnce sync.Once
	defaultV    *Validator
	defaultErr  error
)

// Default returns the one Validator of the embedded documents, loaded on
// first use.
func Default() (*Validator, error) {
	defaultOnce.Do(func() { defaultV, defaultErr = New(openapi.WebAPI(), openapi.Admin()) })
	return defaultV, defaultErr
}

// New loads the Web API and admin documents (JSON or YAML).
func New(api, admin []byte) (*Validator, error) {
	v := &Validator{hosts: map[string]Kind{}, pages: map[string][]string{}}
	v.opts = []openapi3.SchemaValidationOption{openapi3.WithStringFormatValidators(formats)}
	var err error
	if v.api, err = load("webapi", api); err != nil {
		return nil, err
	}
	if v.admin, err = load("admin", admin); err != nil {
		return nil, err
	}
	return v, nil
}

func load(name string, data []byte) (*document, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("openapitest: loading the %s document: %w", name, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapitest: the %s document is invalid: %w", name, err)
	}
	// Route on paths alone: the tests' gateways listen on ports of their
	// own, not on the document's servers.
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapitest: routing the %s document: %w", name, err)
	}
	d := &document{name: name, doc: doc, router: router}
	if d.schemas, err = newSchemaCache(name, data); err != nil {
		return nil, err
	}
	if _, err := d.schemas.get("/components/schemas/Problem"); err != nil {
		return nil, fmt.Errorf("openapitest: the %s document's Problem schema: %w", name, err)
	}
	return d, nil
}

// SetHost makes the replies of host (host:port, as in a URL) be checked
// against the document of kind; hosts never set are told apart by path.
func (v *Validator) SetHost(host string, kind Kind) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.hosts[host] = kind
}

func (v *Validator) kindOf(r *http.Request) Kind {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.hosts[r.URL.Host]
}

// SetAdminPage makes the replies under the mounts on host (host:port),
// the JSON calls of Web API Keys pages, be checked against the admin
// document as its operations, the mount stripped; no mounts forgets the
// host's.
func (v *Validator) SetAdminPage(host string, mounts ...string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pages[host] = mounts
}

// onAdminPage is req with the page's mount stripped, when req is a JSON
// call of a Web API Keys page.
func (v *Validator) onAdminPage(req *http.Request) (*http.Request, bool) {
	v.mu.Lock()
	mounts := v.pages[req.URL.Host]
	v.mu.Unlock()
	for _, mount := range mounts {
		rest, ok := strings.CutPrefix(req.URL.Path, strings.TrimSuffix(mount, "/"))
		if !ok || !slices.ContainsFunc(pagePrefixes, func(pre string) bool { return rest == pre || strings.HasPrefix(rest, pre+"/") }) {
			continue
		}
		r := req.Clone(req.Context())
		r.URL.Path, r.URL.RawPath = rest, ""
		return r, true
	}
	return nil, false
}

// SetHostsOf registers a gateway's site and admin base URLs.
func (v *Validator) SetHostsOf(siteURL, adminURL string) {
	for _, s := range []struct {
		u string
		k Kind
	}{{siteURL, Site}, {adminURL, Admin}} {
		if u, err := url.Parse(s.u); err == nil && u.Host != "" {
			v.SetHost(u.Host, s.k)
		}
	}
}

// route is the request as its document sees it (a Web API Keys page's
// mount stripped) and that document, or nil (documentFor).
func (v *Validator) route(req *http.Request) (*http.Request, *document) {
	if r, ok := v.onAdminPage(req); ok {
		return r, v.admin
	}
	return req, v.documentFor(req)
}

// documentFor picks the document a request is checked against, or nil
// when the request is not one of keygate's APIs (metrics, Caddy's own
// admin routes, another server of the test).
func (v *Validator) documentFor(r *http.Request) *document {
	kind := v.kindOf(r)
	p := r.URL.Path
	isAdmin := slices.ContainsFunc(adminPrefixes, func(pre string) bool { return p == pre || strings.HasPrefix(p, pre+"/") })
	isAPI := slices.ContainsFunc(apiPrefixes, func(pre string) bool { return strings.HasPrefix(p, pre) })
	switch kind {
	case Admin:
		if strings.HasPrefix(p, "/webapi/") {
			return v.admin
		}
	case Site, KeyCheckOnly:
		if isAPI {
			return v.api
		}
	default:
		switch {
		case isAdmin:
			return v.admin
		case isAPI:
			return v.api
		}
	}
	return nil
}

// Check validates one exchange: req as sent with its body reqBody, and
// the reply resp with its body respBody. It returns nil, or an error
// naming the operation and every mismatch.
func (v *Validator) Check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) error {
	req, d := v.route(req)
	if d == nil {
		return nil
	}
	if v.kindOf(req) == KeyCheckOnly && mediaType(resp.Header.Get("Content-Type")) != "application/problem+json" {
		return nil // not keygate's reply
	}
	if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
		return nil // net/http's own refusal, before any handler of keygate
	}
	v.checked.Add(1)
	e := &exchange{v: v, d: d, req: req, reqBody: reqBody, resp: resp, respBody: respBody}
	e.check()
	if len(e.problems) == 0 {
		return nil
	}
	return &Mismatch{Document: d.name, Operation: e.opName(), Method: req.Method, Path: req.URL.Path,
		Status: resp.StatusCode, Problems: e.problems, Body: clip(respBody)}
}

// Mismatch is an exchange that its document does not describe.
type Mismatch struct {
	Document, Operation, Method, Path string
	Status                            int
	Problems                          []string
	Body                              string
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("openapi (%s document): %s %s (%s) answered %d, which the document does not describe:\n  - %s\n  reply body: %s",
		m.Document, m.Method, m.Path, m.Operation, m.Status, strings.Join(m.Problems, "\n  - "), m.Body)
}

func clip(b []byte) string {
	const max = 600
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

type exchange struct {
	v        *Validator
	d        *document
	req      *http.Request
	reqBody  []byte
	resp     *http.Response
	respBody []byte

	route    *routers.Route
	params   map[string]string
	problems []string
}

func (e *exchange) fail(format string, args ...any) {
	e.problems = append(e.problems, fmt.Sprintf(format, args...))
}

func (e *exchange) opName() string {
	if e.route == nil || e.route.Operation == nil {
		return "no operation"
	}
	return e.route.Operation.OperationID
}

// request is a copy of the request as sent, its body readable again.
func (e *exchange) request() *http.Request {
	r := e.req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(e.reqBody))
	r.ContentLength = int64(len(e.reqBody))
	if r.Method == http.MethodHead {
		// HEAD is GET without a body; the documents describe GET.
		r.Method = http.MethodGet
	}
	return r
}

func (e *exchange) check() {
	r := e.request()
	route, params, err := e.d.router.FindRoute(r)
	if err != nil {
		e.checkUnrouted()
		return
	}
	e.route, e.params = route, params

	reqMT := mediaType(e.req.Header.Get("Content-Type"))
	reqJSON := isJSON(reqMT) && len(e.reqBody) > 0
	reqInput := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			MultiError:              true,
			SkipSettingDefaults:     true,
			AuthenticationFunc:      bearerPresent,
			SchemaValidationOptions: e.v.opts,
			ExcludeRequestBody:      reqJSON,
		},
	}
	reqErr := openapi3filter.ValidateRequest(context.Background(), reqInput)
	if reqErr == nil && reqJSON {
		reqErr = e.checkRequestBody(route, reqMT)
	}
	status := e.resp.StatusCode
	if reqErr != nil && status < 400 {
		e.fail("the document refuses the request, yet the gateway accepted it: %s", oneLine(reqErr))
	}

	op := route.Operation
	respRef := op.Responses.Status(status)
	if respRef == nil {
		respRef = op.Responses.Default()
	}
	if respRef == nil || respRef.Value == nil {
		e.fail("status %d is not documented (documented: %s)", status, strings.Join(statuses(op), ", "))
		return
	}
	resp := respRef.Value
	e.checkHeaders(resp)

	mt := mediaType(e.resp.Header.Get("Content-Type"))
	json := isJSON(mt)
	e.checkMediaType(resp, mt)
	respInput := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 status,
		Header:                 e.resp.Header,
		Options: &openapi3filter.Options{
			MultiError:              true,
			IncludeResponseStatus:   true,
			ExcludeResponseBody:     true,
			SchemaValidationOptions: e.v.opts,
		},
	}
	respInput.SetBodyBytes(e.respBody)
	if e.req.Method == http.MethodHead || status == http.StatusNotModified {
		return // openapi3filter checks neither
	}
	if err := openapi3filter.ValidateResponse(context.Background(), respInput); err != nil {
		e.fail("%s", oneLine(err))
	}
	if json && resp.Content.Get(mt) != nil {
		base := respRef.Ref
		if base == "" {
			key := strconv.Itoa(status)
			if op.Responses.Value(key) == nil {
				key = "default"
			}
			base = "#/paths/" + escape(route.Path) + "/" + strings.ToLower(route.Method) + "/responses/" + key
		}
		e.checkBody("the reply body", strings.TrimPrefix(base, "#")+"/content/"+escape(contentKey(resp.Content, mt))+"/schema", e.respBody)
	}
}

// checkRequestBody checks a JSON request body against its schema; an
// error is a request the document refuses.
func (e *exchange) checkRequestBody(route *routers.Route, mt string) error {
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		return nil // openapi3filter has judged the body's absence or presence
	}
	if rb.Value.Content.Get(mt) == nil {
		return fmt.Errorf("request Content-Type %q is not documented", mt)
	}
	base := rb.Ref
	if base == "" {
		base = "#/paths/" + escape(route.Path) + "/" + strings.ToLower(route.Method) + "/requestBody"
	}
	var v any
	if err := json.Unmarshal(e.reqBody, &v); err != nil {
		return fmt.Errorf("the request body is not JSON: %v", err)
	}
	return e.d.schemas.validate(strings.TrimPrefix(base, "#")+"/content/"+escape(contentKey(rb.Value.Content, mt))+"/schema", v)
}

// checkBody checks a JSON body against the schema at pointer.
func (e *exchange) checkBody(what, pointer string, body []byte) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		e.fail("%s is not JSON: %v", what, err)
		return
	}
	if err := e.d.schemas.validate(pointer, v); err != nil {
		e.fail("%s does not match its schema: %v", what, err)
	}
}

// contentKey is the key of content that mt matched (an exact media type,
// or a range such as application/*).
func contentKey(content openapi3.Content, mt string) string {
	want := content.Get(mt)
	for k, v := range content {
		if v == want {
			return k
		}
	}
	return mt
}

// escape is a JSON pointer token.
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func isJSON(mt string) bool { return mt == "application/json" || strings.HasSuffix(mt, "+json") }

// checkUnrouted checks the reply to a path (or method) no operation
// has: it must be refused with a problem (or, on the pages, an HTML page)
// that says so: 404 for a path, 405 with Allow for a method; the key
// check, which runs first, may refuse with 401 or 403, and on the Web
// APIs with its rate limits' and quota's 429 or 503 (before the route is
// matched), with the RateLimit headers of a key that has them.
func (e *exchange) checkUnrouted() {
	status := e.resp.StatusCode
	keyCheck := e.d == e.v.api && strings.HasPrefix(e.req.URL.Path, "/webapi/")
	switch {
	case status == http.StatusNotFound, status == http.StatusUnauthorized, status == http.StatusForbidden:
	case status == http.StatusMethodNotAllowed:
		if e.resp.Header.Get("Allow") == "" {
			e.fail("a 405 without Allow")
		}
	case keyCheck && (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable):
		if e.resp.Header.Get("Retry-After") == "" {
			e.fail("a %d without Retry-After", status)
		}
	default:
		e.fail("no operation has this method and path, yet it answered %d (want 404, 405, or the key check's 401, 403, 429 or 503)", status)
	}
	mt := mediaType(e.resp.Header.Get("Content-Type"))
	switch {
	case mt == "application/problem+json":
		e.checkBody("the problem body", "/components/schemas/Problem", e.respBody)
	case mt == "text/html" && e.d == e.v.api && !strings.HasPrefix(e.req.URL.Path, "/webapi/"):
	case e.req.Method == http.MethodHead:
	default:
		e.fail("Content-Type %q, want application/problem+json", e.resp.Header.Get("Content-Type"))
	}
	for name := range e.resp.Header {
		switch {
		case genericHeaders[name], name == "Allow", name == "Www-Authenticate", name == "Retry-After":
		case name == "Cache-Control" && status != http.StatusTooManyRequests: // no cache may store a 429
		case keyCheck && rateLimitHeaders[name] != "":
			e.checkHeaderValue(name, rateLimitHeaders[name])
		default:
			e.fail("header %s is not documented", name)
		}
	}
}

// rateLimitHeaders are the headers the Web APIs' key check sets on every
// reply to a key with rate limits or a quota, by the component that
// documents each.
var rateLimitHeaders = map[string]string{
	"Ratelimit-Policy": "/components/headers/RateLimitPolicy/schema",
	"Ratelimit":        "/components/headers/RateLimit/schema",
}

// checkHeaderValue checks a reply header's one value against the schema
// at pointer, for a reply no operation describes.
func (e *exchange) checkHeaderValue(name, pointer string) {
	vals := e.resp.Header.Values(name)
	if len(vals) != 1 {
		e.fail("header %s sent %d times", name, len(vals))
		return
	}
	if err := e.d.schemas.validate(pointer, vals[0]); err != nil {
		e.fail("header %s %q does not match its schema: %v", name, vals[0], err)
	}
}

// checkHeaders fails on a reply header that is neither generic nor
// documented for this response.
func (e *exchange) checkHeaders(resp *openapi3.Response) {
	documented := map[string]bool{}
	for name := range resp.Headers {
		documented[http.CanonicalHeaderKey(name)] = true
	}
	var names []string
	for name := range e.resp.Header {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !genericHeaders[name] && !documented[name] {
			e.fail("header %s is not documented for %d (value %q)", name, e.resp.StatusCode, e.resp.Header.Get(name))
		}
	}
}

// checkMediaType checks a reply that is not JSON (a page, a PDF, an empty
// body) for its media type alone.
func (e *exchange) checkMediaType(resp *openapi3.Response, mt string) {
	if len(resp.Content) == 0 {
		if len(e.respBody) > 0 && e.req.Method != http.MethodHead {
			e.fail("a %d has no body in the document, yet %d bytes of %s came", e.resp.StatusCode, len(e.respBody), mt)
		}
		return
	}
	if mt == "" {
		if len(e.respBody) > 0 {
			e.fail("a body without Content-Type")
		}
		return
	}
	if resp.Content.Get(mt) == nil {
		var want []string
		for k := range resp.Content {
			want = append(want, k)
		}
		sort.Strings(want)
		e.fail("Content-Type %q is not documented for %d (documented: %s)", mt, e.resp.StatusCode, strings.Join(want, ", "))
	}
}

func statuses(op *openapi3.Operation) []string {
	var out []string
	for code := range op.Responses.Map() {
		out = append(out, code)
	}
	sort.Strings(out)
	return out
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.TrimSpace(strings.ToLower(ct))
	}
	return mt
}

// bearerPresent is the security check of a request: the documents'
// schemes are HTTP bearer, and whether the key is good is the gateway's
// to say; a request without one is one the document refuses.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Values("Authorization")
	if len(h) != 1 {
		return errors.New("one Authorization header is required")
	}
	scheme, token, ok := strings.Cut(h[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return errors.New("the Authorization header is not Bearer <key>")
	}
	return nil
}

var space = regexp.MustCompile(`\s+`)

// oneLine shortens openapi3filter's errors, which repeat the schema and
// the value over many lines, to what names the mismatch.
func oneLine(err error) string {
	var parts []string
	var walk func(error)
	walk = func(err error) {
		var me openapi3.MultiError
		switch {
		case errors.As(err, &me) && len(me) > 0:
			for _, e := range me {
				walk(e)
			}
			return
		}
		var se *openapi3.SchemaError
		var re *openapi3filter.ResponseError
		var rqe *openapi3filter.RequestError
		switch {
		case errors.As(err, &se):
			prefix := ""
			if errors.As(err, &re) {
				prefix = re.Reason + ": "
			} else if errors.As(err, &rqe) {
				prefix = rqe.Error()
				if i := strings.Index(prefix, "\n"); i > 0 {
					prefix = prefix[:i]
				}
				prefix += ": "
			}
			reason := se.Reason
			if i := strings.LastIndex(reason, "at '"); i >= 0 {
				// The JSON Schema validator's reason names the place itself.
				parts = append(parts, prefix+reason[i:])
				break
			}
			at := "/" + strings.Join(se.JSONPointer(), "/")
			parts = append(parts, fmt.Sprintf("%sat %s: %s", prefix, at, reason))
		default:
			s := err.Error()
			if i := strings.Index(s, "\nSchema:"); i > 0 {
				s = s[:i]
			}
			parts = append(parts, space.ReplaceAllString(s, " "))
		}
	}
	walk(err)
	return strings.Join(parts, "; ")
}

// formats are the string formats the documents use that kin-openapi
// leaves unchecked by default.
var formats = map[string]openapi3.StringFormatValidator{
	"uuid": openapi3.NewRegexpFormatValidator(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`),
	"email": openapi3.NewCallbackValidator(func(s string) error {
		a, err := mail.ParseAddress(s)
		if err != nil || a.Name != "" || a.Address != s {
			return fmt.Errorf("%q is not a bare e-mail address", s)
		}
		return nil
	}),
	"uri": openapi3.NewCallbackValidator(func(s string) error {
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || (u.Host == "" && u.Opaque == "") {
			return fmt.Errorf("%q is not an absolute URI", s)
		}
		return nil
	}),
	"uri-reference": openapi3.NewCallbackValidator(func(s string) error {
		if _, err := url.Parse(s); err != nil {
			return fmt.Errorf("%q is not a URI reference", s)
		}
		return nil
	}),
	"ipv4": openapi3.NewCallbackValidator(func(s string) error {
		if a, err := netip.ParseAddr(s); err != nil || !a.Is4() {
			return fmt.Errorf("%q is not an IPv4 address", s)
		}
		return nil
	}),
	"ipv6": openapi3.NewCallbackValidator(func(s string) error {
		if a, err := netip.ParseAddr(s); err != nil || !a.Is6() {
			return fmt.Errorf("%q is not an IPv6 address", s)
		}
		return nil
	}),
}

// Transport returns a RoundTripper that sends through base
// (http.DefaultTransport when nil) and checks every exchange. A mismatch
// is reported to the test that WithTB put in the request's context, else
// to fallback. The reply is handed on unchanged, so a test goes on as it
// would without the check.
func (v *Validator) Transport(base http.RoundTripper, fallback func(error)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, base: base, fallback: fallback}
}

type transport struct {
	v        *Validator
	base     http.RoundTripper
	fallback func(error)
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, d := t.v.route(r); d == nil {
		return t.base.RoundTrip(r)
	}
	var reqBody []byte
	if r.Body != nil && r.Body != http.NoBody {
		if r.GetBody != nil {
			if rc, err := r.GetBody(); err == nil {
				reqBody, _ = io.ReadAll(rc)
				rc.Close()
			}
		} else {
			b, err := io.ReadAll(r.Body)
			r.Body.Close()
			if err != nil {
				return nil, err
			}
			reqBody = b
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		// A reply cut off (a gateway killed mid-write) is not one to check;
		// the client sees the same error it would have.
		resp.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		return resp, nil
	}
	if err := t.v.Check(r, reqBody, resp, body); err != nil {
		if tb, ok := r.Context().Value(tbKey{}).(testing.TB); ok {
			tb.Error(err)
		} else if t.fallback != nil {
			t.fallback(err)
		}
	}
	return resp, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type tbKey struct{}

// WithTB makes the transport report a mismatch of a request made with ctx
// to tb, at once.
func WithTB(ctx context.Context, tb testing.TB) context.Context {
	return context.WithValue(ctx, tbKey{}, tb)
}

// Failures collects mismatches that no test could be told of at once
// (a request made without a test in its context, from a goroutine of
// load), for the test to report when it ends.
type Failures struct {
	mu   sync.Mutex
	list []error
}

// Add records err.
func (f *Failures) Add(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, err)
}

// Take returns the recorded mismatches and forgets them.
func (f *Failures) Take() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.list
	f.list = nil
	return out
}

// Report fails tb with every recorded mismatch (each once, however often
// it happened) and forgets them.
func (f *Failures) Report(tb testing.TB) {
	tb.Helper()
	seen := map[string]int{}
	var order []string
	for _, err := range f.Take() {
		s := err.Error()
		if seen[s] == 0 {
			order = append(order, s)
		}
		seen[s]++
	}
	for _, s := range order {
		if n := seen[s]; n > 1 {
			s += fmt.Sprintf("\n  (%d times)", n)
		}
		tb.Error(s)
	}
}

// Unreported holds the mismatches of requests made without a test in
// their context (WithTB), for the test that made them to report when it
// ends (Unreported.Report in a cleanup) or, failing that, for TestMain
// (CheckUnreported).
var Unreported Failures

// Install makes http.DefaultTransport check every exchange with a
// keygate path against the documents, reporting to the test in the
// request's context or else to Unreported, and returns a function that
// restores it. Every client of a test binary that sets no Transport of
// its own (http.DefaultClient, &http.Client{Timeout: ...}) then goes
// through it. Hosts named with SetHost are checked against their
// document; others by path.
func Install() (restore func(), err error) {
	v, err := Default()
	if err != nil {
		return nil, err
	}
	prev := http.DefaultTransport
	http.DefaultTransport = v.Transport(prev, Unreported.Add)
	return func() { http.DefaultTransport = prev }, nil
}

// CheckUnreported prints the mismatches no test reported to w and tells
// whether there were any, for TestMain to fail the run. It prints how
// many replies were checked, too.
func CheckUnreported(w io.Writer) bool {
	if v, err := Default(); err == nil {
		fmt.Fprintf(w, "openapitest: %d replies checked against the OpenAPI documents\n", v.Checked())
	}
	errs := Unreported.Take()
	for _, err := range errs {
		fmt.Fprintln(w, "FAIL (after the tests):", err)
	}
	return len(errs) > 0
}
