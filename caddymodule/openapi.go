package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/keygate/keygate/internal/openapi"
	"github.com/keygate/keygate/internal/problem"
)

func init() {
	caddy.RegisterModule(OpenAPI{})
}

// OpenAPI serves the OpenAPI 3.1 document of the Web APIs (the Contract
// Signing and External Share APIs, the public pages' JSON forms and the
// webhook deliveries) as JSON, to anyone: it holds no secret, and tools
// that generate clients or show the API fetch it without a key. The
// default Caddyfile serves it at /webapi/openapi.json.
type OpenAPI struct {
	// ServerURL is the URL the document names as the API's server.
	// Default: the webapi app's public_base_url when the config has the
	// app, else "/" (the host that serves the document).
	ServerURL string `json:"server_url,omitempty"`

	body []byte
	etag string
}

// CaddyModule returns the Caddy module information.
func (OpenAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_openapi",
		New: func() caddy.Module { return new(OpenAPI) },
	}
}

// Provision renders the document once, with its server, and its ETag.
func (h *OpenAPI) Provision(ctx caddy.Context) error {
	server := h.ServerURL
	if server == "" {
		// Only a configured app: asking for one that is not would start
		// it, database and all, for a document.
		if v, err := ctx.AppIfConfigured("webapi"); err == nil {
			server = v.(*App).PublicBaseURL
		}
	}
	body, err := openapi.WebAPIFor(server)
	if err != nil {
		return fmt.Errorf("webapi_openapi: %v", err)
	}
	h.body, h.etag = body, etagOf(body)
	return nil
}

// ServeHTTP answers GET and HEAD with the document; a client that has it
// (If-None-Match) gets a 304. Both carry the security headers of every
// body (problem.SecureHeaders); caches may keep the document but must
// revalidate, so that a new version of the gateway is seen at once.
func (h *OpenAPI) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	serveFixed(w, r, h.body, h.etag, "application/json", nil)
	return nil
}

// onlyGetHead answers 405 to a method other than GET and HEAD, and says
// whether it did.
func onlyGetHead(w http.ResponseWriter, r *http.Request) (refused bool) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	w.Header().Set("Allow", "GET, HEAD")
	problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "use GET or HEAD on this path"))
	return true
}

// serveFixed answers GET and HEAD with body, which stays the same until
// the next config: the security headers of every body (problem.
// SecureHeaders, then those of header), a 304 to a client that has etag,
// and no-cache, so that caches keep it but see a new version at once.
func serveFixed(w http.ResponseWriter, r *http.Request, body []byte, etag, contentType string, header map[string]string) {
	if onlyGetHead(w, r) {
		return
	}
	hd := w.Header()
	problem.SecureHeaders(hd) // then no-cache rather than its no-store
	for k, v := range header {
		hd.Set(k, v)
	}
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", etag)
	if etagMatches(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hd.Set("Content-Type", contentType)
	hd.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// etagMatches applies If-None-Match's weak comparison: "*" or any listed
// tag, with or without W/.
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// UnmarshalCaddyfile reads `webapi_openapi [<server_url>]`.
func (h *OpenAPI) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		h.ServerURL = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("webapi_openapi takes no block")
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*OpenAPI)(nil)
	_ caddyhttp.MiddlewareHandler = (*OpenAPI)(nil)
	_ caddyfile.Unmarshaler       = (*OpenAPI)(nil)
)
