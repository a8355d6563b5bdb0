package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(Share{})
}

// Share serves the External Share API under /webapi/share. It must stand
// behind `webapi_auth share`, which routes by the same operation table and
// hands on the caller's identity.
type Share struct{ apiHandler }

// CaddyModule returns the Caddy module information.
func (Share) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_share",
		New: func() caddy.Module { return new(Share) },
	}
}

// Provision takes the API from the webapi app.
func (h *Share) Provision(ctx caddy.Context) error {
	return h.provision(ctx, func(a *App) http.Handler { return a.shareAPI })
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Share)(nil)
	_ caddyhttp.MiddlewareHandler = (*Share)(nil)
)
