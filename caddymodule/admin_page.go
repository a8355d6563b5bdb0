package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/keygate/keygate/internal/adminpage"
	"github.com/keygate/keygate/internal/clientip"
)

func init() {
	caddy.RegisterModule(AdminPage{})
}

// AdminPage serves the Web API Keys page (docs/administrators.md, "The Web API Keys
// page"): the keys and templates of the admin API as a page for
// administrators, with the JSON calls it makes, under whatever path it is
// mounted. It serves nobody anonymous: an authentication handler before
// it (basic_auth, or forward_auth with UserHeader) must have named the
// user, as whom every action is audited.
type AdminPage struct {
	// UserHeader names the request header that carries the user when an
	// SSO proxy authenticates through forward_auth (its copy_headers,
	// which also drops a copy the client sent). Default: the user that a
	// Caddy authentication handler such as basic_auth set,
	// {http.auth.user.id}.
	UserHeader string `json:"user_header,omitempty"`

	app  *App
	api  *Admin
	page adminpage.Handler
}

// CaddyModule returns the Caddy module information.
func (AdminPage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_admin",
		New: func() caddy.Module { return new(AdminPage) },
	}
}

// Provision takes the stores from the webapi app and serves the admin
// API's key, consumer, plan and template routes for the page (not the
// webhooks: the page manages keys, consumers, plans and templates).
func (h *AdminPage) Provision(ctx caddy.Context) error {
	app, err := webapiApp(ctx)
	if err != nil {
		return err
	}
	h.app = app
	if h.UserHeader != "" {
		// Whoever can send this header is whoever they say: only a
		// forward_auth in front that copies it (and so drops the
		// client's) makes it an authentication.
		ctx.Logger().Info("the Web API Keys page takes its user from a request header; forward_auth with copy_headers must set it",
			zap.String("user_header", h.UserHeader))
	}
	h.api = &Admin{}
	h.api.mux = h.api.routes(false) // keys, consumers, plans, templates; webhooks stay on the admin endpoint
	h.page = adminpage.Handler{
		API: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.api.serveFor(w, r, h.app) }),
		Refused: func(r *http.Request, user string, status int, reason string) {
			rec := adminAudit(r, "admin page refused", "", status)
			rec.User, rec.Reason = user, reason
			h.app.audit.Add(rec)
		},
	}
	return nil
}

// Validate checks the header name.
func (h *AdminPage) Validate() error {
	if h.UserHeader != "" && !httpguts.ValidHeaderFieldName(h.UserHeader) {
		return fmt.Errorf("webapi_admin: user_header %q is not a header name", h.UserHeader)
	}
	return nil
}

// ServeHTTP serves the page to the authenticated user.
func (h *AdminPage) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	var user string
	if h.UserHeader != "" {
		user = r.Header.Get(h.UserHeader)
	} else if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		// Get, not ReplaceKnown: an unset placeholder must be no user,
		// not the placeholder's own text.
		user, _ = repl.GetString("http.auth.user.id")
	}
	ctx := clientip.With(r.Context(), requestClientIP(r))
	// A prefix that handle_path or uri strip_prefix took off before this
	// handler is still part of the path the client addressed.
	if orig, ok := ctx.Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok {
		if o, cur := orig.URL.EscapedPath(), r.URL.EscapedPath(); o != cur && strings.HasSuffix(o, cur) {
			ctx = context.WithValue(ctx, strippedKey{}, strings.TrimSuffix(o, cur))
		}
	}
	h.page.Serve(w, r.WithContext(ctx), user)
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*AdminPage)(nil)
	_ caddy.Validator             = (*AdminPage)(nil)
	_ caddyhttp.MiddlewareHandler = (*AdminPage)(nil)
)
