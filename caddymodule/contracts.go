package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(Contracts{})
}

// Contracts serves the Contract Signing API under /webapi/contracts. It
// must stand behind `webapi_auth contracts`, which routes by the same
// operation table and hands on the caller's identity.
type Contracts struct{ apiHandler }

// CaddyModule returns the Caddy module information.
func (Contracts) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_contracts",
		New: func() caddy.Module { return new(Contracts) },
	}
}

// Provision takes the API from the webapi app.
func (h *Contracts) Provision(ctx caddy.Context) error {
	return h.provision(ctx, func(a *App) http.Handler { return a.contractsAPI })
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Contracts)(nil)
	_ caddyhttp.MiddlewareHandler = (*Contracts)(nil)
)
