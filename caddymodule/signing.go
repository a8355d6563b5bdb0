package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	caddy.RegisterModule(Signing{})
}

// Signing serves the public signing pages under /sign/, which signers
// open from their links without an API key. Decisions record the client
// address Caddy decided on (client_ip, honouring trusted_proxies).
type Signing struct{ apiHandler }

// CaddyModule returns the Caddy module information.
func (Signing) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.webapi_signing",
		New: func() caddy.Module { return new(Signing) },
	}
}

// Provision takes the pages from the webapi app.
func (h *Signing) Provision(ctx caddy.Context) error {
	return h.provision(ctx, func(a *App) http.Handler { return a.signingPages })
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Signing)(nil)
	_ caddyhttp.MiddlewareHandler = (*Signing)(nil)
)
