package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/keygate/keygate/internal/clientip"
)

// apiHandler is what the four API modules share: a net/http handler of an
// upstreams package, built by the webapi app, served as a terminal Caddy
// handler.
type apiHandler struct {
	handler http.Handler
	// public pages get no identity from webapi_auth, so they take the
	// client address from Caddy's client_ip here.
	public bool
}

func (h *apiHandler) provision(ctx caddy.Context, pick func(*App) http.Handler) error {
	app, err := webapiApp(ctx)
	if err != nil {
		return err
	}
	h.handler = pick(app)
	return nil
}

func (h *apiHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	if h.public {
		r = r.WithContext(clientip.With(r.Context(), requestClientIP(r)))
	}
	h.handler.ServeHTTP(w, r)
	return nil
}
