package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(ShareViewer{})
}

// ShareViewer serves the public share pages under /s/, which outside
// parties open without an API key.
type ShareViewer struct{ apiHandler }

// CaddyModule returns the Caddy module information.
func (ShareViewer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_share_viewer",
		New: func() caddy.Module { return new(ShareViewer) },
	}
}

// Provision takes the pages from the webapi app.
func (h *ShareViewer) Provision(ctx caddy.Context) error {
	return h.provision(ctx, func(a *App) http.Handler { return a.shareViewer })
}

// Interface guards
var (
	_ caddy.Provisioner           = (*ShareViewer)(nil)
	_ caddyhttp.MiddlewareHandler = (*ShareViewer)(nil)
)
