// Package adminpage serves the Web API Keys page (docs/administrators.md, "The Web
// API Keys page"): the "Web API Keys" admin tab of both APIs as one HTML page,
// its script and style sheet, all embedded in the binary, and the JSON
// calls the page makes, which it hands to the administration API under
// the same paths as on Caddy's admin endpoint (/webapi/keys,
// /webapi/consumers, /webapi/plans, /webapi/templates).
//
// The package knows nothing of Caddy: who the user is, the caller decides
// (an authentication handler in front of it) and passes in. What this
// package owns is the page and its protection: no anonymous user, no
// outside asset, a strict Content-Security-Policy, and JSON calls only
// from the page's own origin carrying the page's own request header, so
// that another site cannot drive an administrator's browser.
package adminpage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// RequestHeader is the header every JSON call of the page carries
// (RequestHeader: 1). A cross-origin page cannot add a custom header to a
// request without a CORS preflight, which this handler never grants, so
// the header proves the call came from a script of the page's origin.
const RequestHeader = "Keygate-Admin"

// ContentSecurityPolicy allows the page its own script, style sheet and
// JSON calls and nothing else: no inline script or style, no other
// origin, no frame, no form submission, no base URL, and no HTML built
// from strings (Trusted Types with no policy: the script only creates
// elements and sets their text).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'none'; frame-ancestors 'none'; base-uri 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

// apiPaths are the administration API's resources the page may call, as
// the admin endpoint names them.
var apiPaths = []string{"/webapi/keys", "/webapi/consumers", "/webapi/plans", "/webapi/templates"}

//go:embed assets
var assets embed.FS

// asset is one embedded file served as is.
type asset struct {
	contentType string
	body        []byte
	etag        string
}

var (
	pageTemplate = template.Must(template.ParseFS(assets, "assets/index.html"))
	staticAssets = map[string]asset{
		"admin.js":  load("assets/admin.js", "text/javascript; charset=utf-8"),
		"admin.css": load("assets/admin.css", "text/css; charset=utf-8"),
		// The page's icon, so that browsers do not ask for /favicon.ico.
		"favicon.svg": load("assets/favicon.svg", "image/svg+xml"),
	}
)

// load reads an embedded asset and tags it with a hash of its content.
func load(name, contentType string) asset {
	body, err := assets.ReadFile(name)
	if err != nil {
		panic("adminpage: " + err.Error())
	}
	sum := sha256.Sum256(body)
	return asset{contentType: contentType, body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// Handler serves the page, its assets and its JSON calls under whatever
// path it is mounted: the page at any path ending in "/", the assets
// beside it, and the calls at <mount>/webapi/keys... (the page addresses
// them relative to itself).
type Handler struct {
	// API serves the JSON calls, with paths as on the admin endpoint
	// (/webapi/keys...). It finds the user with User.
	API http.Handler
	// Refused is told of each request refused here (no user, another
	// origin, no RequestHeader), for the audit log. Optional.
	Refused func(r *http.Request, user string, status int, reason string)
}

type (
	userKey  struct{}
	mountKey struct{}
)

// User returns the authenticated user Serve was given for r's request.
func User(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// Mount returns the escaped path before the API path of a JSON call of
// the page ("/admin" for /admin/webapi/keys), as Serve saw it.
func Mount(ctx context.Context) string {
	m, _ := ctx.Value(mountKey{}).(string)
	return m
}

// Serve answers r for user, whom an authentication handler in front
// authenticated ("" if none did).
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, user string) {
	if user == "" {
		h.refuse(w, r, user, "no authenticated user",
			"the Web API Keys page is only served to an authenticated user: put basic_auth (or forward_auth, with webapi_admin's user_header) in front of webapi_admin")
		return
	}
	if mount, rest, ok := splitAPI(r.URL.EscapedPath()); ok {
		if reason := crossOrigin(r); reason != "" {
			h.refuse(w, r, user, reason,
				"the Web API Keys page's calls are only taken from the page itself: "+reason)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), userKey{}, user), mountKey{}, mount)
		h.API.ServeHTTP(w, withPath(r.WithContext(ctx), rest))
		return
	}
	name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	a, isAsset := staticAssets[name]
	if name != "" && !isAsset {
		problem.Write(w, problem.NotFound("no such page; the Web API Keys page is at the path that ends in /"))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		problem.Write(w, problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, r.Method+" is not allowed here"))
		return
	}
	if isAsset {
		serveAsset(w, r, a)
		return
	}
	servePage(w, r, user)
}

func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, user, reason, detail string) {
	if h.Refused != nil {
		h.Refused(r, user, http.StatusForbidden, reason)
	}
	problem.Write(w, problem.New(http.StatusForbidden, problem.CodeForbidden, detail))
}

// pageHeaders are the headers of the page and its assets.
func pageHeaders(h http.Header, contentType string) {
	problem.SecureHeaders(h)
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("X-Robots-Tag", "noindex, nofollow")
}

// keyPanel is one service's tab of keys.
type keyPanel struct{ Service, Title, API, Path, Noun string }

var keyPanels = []keyPanel{
	{"contracts", "Contract keys", "Contract Signing API", "/webapi/contracts", "contract"},
	{"share", "Share keys", "External Share API", "/webapi/share", "share"},
}

func servePage(w http.ResponseWriter, r *http.Request, user string) {
	var buf bytes.Buffer
	data := struct {
		User      string
		KeyPanels []keyPanel
	}{user, keyPanels}
	if err := pageTemplate.Execute(&buf, data); err != nil {
		problem.Write(w, problem.Internal())
		return
	}
	pageHeaders(w.Header(), "text/html; charset=utf-8")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(buf.Bytes()))
}

// serveAsset sends an embedded file, revalidated by its ETag: a new build
// changes the file and its tag, so a browser never runs a stale script
// against a new page.
func serveAsset(w http.ResponseWriter, r *http.Request, a asset) {
	pageHeaders(w.Header(), a.contentType)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// splitAPI splits an escaped path into the page's mount and the API path
// (/webapi/keys...) it names, at the earliest segment pair of apiPaths
// (/webapi/keys, /webapi/templates, ...), so that the page works under
// any mount.
// The escaped form matters: a template id may hold an escaped "/", which
// must not make its path look like a key's.
func splitAPI(escaped string) (mount, rest string, ok bool) {
	at := -1
	for _, p := range apiPaths {
		for from := 0; ; {
			i := strings.Index(escaped[from:], p)
			if i < 0 {
				break
			}
			i += from
			if end := i + len(p); end == len(escaped) || escaped[end] == '/' {
				if at < 0 || i < at {
					at = i
				}
				break
			}
			from = i + 1
		}
	}
	if at < 0 {
		return "", "", false
	}
	return escaped[:at], escaped[at:], true
}

// withPath is r with its path replaced by the escaped API path rest, as
// http.StripPrefix does: Path its unescaped form, RawPath rest itself
// when the two differ.
func withPath(r *http.Request, rest string) *http.Request {
	r2 := new(http.Request)
	*r2 = *r
	r2.URL = new(url.URL)
	*r2.URL = *r.URL
	path, err := url.PathUnescape(rest)
	if err != nil { // EscapedPath of a parsed URL always unescapes
		path = rest
	}
	r2.URL.Path, r2.URL.RawPath = path, ""
	if path != rest {
		r2.URL.RawPath = rest
	}
	return r2
}

// crossOrigin says why r may not be a call of the page itself, or "".
// Browsers send Sec-Fetch-Site, which no script can set; only
// "same-origin" passes ("same-site" would let the API's own pages on
// another port of the same host in). An Origin, when sent, must name the
// page's host, with Sec-Fetch-Site or without it (curl, an old browser).
// Every call must carry RequestHeader.
func crossOrigin(r *http.Request) string {
	sites := r.Header.Values("Sec-Fetch-Site")
	for _, site := range sites {
		if site != "same-origin" {
			return "the request comes from another origin (Sec-Fetch-Site: " + site + ")"
		}
	}
	// An Origin is judged too, also beside Sec-Fetch-Site: a browser
	// never sends the two at odds, so a request that does is no call of
	// the page. The host, not the scheme: behind a proxy that ends TLS
	// the gateway sees http for the browser's https.
	for _, o := range r.Header.Values("Origin") {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return "the request comes from another origin"
		}
	}
	if v := r.Header.Values(RequestHeader); len(v) != 1 || v[0] != "1" {
		return "the request lacks the page's " + RequestHeader + " header"
	}
	return ""
}
