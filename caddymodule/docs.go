package caddymodule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/keygate/keygate/internal/apidocs"
	"github.com/keygate/keygate/internal/openapi"
	"github.com/keygate/keygate/internal/problem"
)

func init() {
	caddy.RegisterModule(Docs{})
}

// Docs serves the API reference: the Web APIs' OpenAPI document rendered
// for people (internal/apidocs), with its stylesheet, to anyone. The page
// is made once, at provisioning, and runs no script: its
// Content-Security-Policy allows its own stylesheet and nothing else. The
// default Caddyfile mounts it with `handle /webapi/docs*`.
type Docs struct {
	// Path is where the page is; its stylesheet is Path/docs.css.
	// Default /webapi/docs.
	Path string `json:"path,omitempty"`
	// DocumentPath is where the page links the OpenAPI document as JSON.
	// Default /webapi/openapi.json.
	DocumentPath string `json:"document_path,omitempty"`

	page, css         []byte
	pageETag, cssETag string
}

// CaddyModule returns the Caddy module information.
func (Docs) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_docs",
		New: func() caddy.Module { return new(Docs) },
	}
}

// docsHeaders are the page's own beside every body's: a
// Content-Security-Policy that lets it load its stylesheet and nothing
// else, and no referrer.
var docsHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"Referrer-Policy":         "no-referrer",
}

// Provision renders the page once, naming the webapi app's
// public_base_url as the server when the config has the app.
func (h *Docs) Provision(ctx caddy.Context) error {
	if h.Path == "" {
		h.Path = "/webapi/docs"
	}
	if h.DocumentPath == "" {
		h.DocumentPath = "/webapi/openapi.json"
	}
	server := ""
	if v, err := ctx.AppIfConfigured("webapi"); err == nil {
		server = v.(*App).PublicBaseURL
	}
	doc, err := openapi.WebAPIFor(server)
	if err != nil {
		return fmt.Errorf("webapi_docs: %v", err)
	}
	if h.page, err = apidocs.Render(doc, h.Path+"/docs.css", h.DocumentPath); err != nil {
		return fmt.Errorf("webapi_docs: %v", err)
	}
	h.css = apidocs.Stylesheet
	h.pageETag, h.cssETag = etagOf(h.page), etagOf(h.css)
	return nil
}

// Validate checks the paths.
func (h *Docs) Validate() error {
	if !strings.HasPrefix(h.Path, "/") || strings.HasSuffix(h.Path, "/") {
		return fmt.Errorf("webapi_docs: path %q must start with / and not end with one", h.Path)
	}
	return nil
}

func etagOf(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// ServeHTTP answers GET and HEAD: the page at Path (or Path/), the
// stylesheet at Path/docs.css, a 404 problem for anything else below.
// Caches may keep both but must revalidate, so a new version shows at once.
func (h *Docs) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	var body []byte
	var etag, contentType string
	switch r.URL.Path {
	case h.Path, h.Path + "/":
		body, etag, contentType = h.page, h.pageETag, "text/html; charset=utf-8"
	case h.Path + "/docs.css":
		body, etag, contentType = h.css, h.cssETag, "text/css; charset=utf-8"
	default:
		problem.Write(w, problem.NotFound("no such page; the API reference is at "+h.Path))
		return nil
	}
	serveFixed(w, r, body, etag, contentType, docsHeaders)
	return nil
}

// UnmarshalCaddyfile reads `webapi_docs`, without arguments: a first
// argument that starts with / would be the directive's path matcher, so
// the page's path is set in JSON only ("path").
func (h *Docs) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("webapi_docs takes no block")
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Docs)(nil)
	_ caddy.Validator             = (*Docs)(nil)
	_ caddyhttp.MiddlewareHandler = (*Docs)(nil)
	_ caddyfile.Unmarshaler       = (*Docs)(nil)
)
