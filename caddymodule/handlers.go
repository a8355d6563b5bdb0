package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/clientip"
)

// apiHandler is what the four API modules share: a net/http handler of an
// upstreams package, built by the webapi app, served as a terminal Caddy
// handler. It hands the upstream package, which knows nothing of Caddy,
// the client address Caddy decided on and the identity webapi_auth found
// (none on the public pages), as request context values.
type apiHandler struct {
	handler http.Handler
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
	ctx := clientip.With(r.Context(), requestClientIP(r))
	if id, ok := caddyhttp.GetVar(ctx, identityVar).(*access.Identity); ok {
		ctx = access.WithIdentity(ctx, id)
	}
	h.handler.ServeHTTP(w, r.WithContext(ctx))
	return nil
}
