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
	hd := w.Header()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hd.Set("Allow", "GET, HEAD")
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "use GET or HEAD on this path"))
		return nil
	}
	problem.SecureHeaders(hd) // then no-cache rather than its no-store
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", h.etag)
	if etagMatches(r.Header.Get("If-None-Match"), h.etag) {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(h.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(h.body)
	}
	return nil
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
