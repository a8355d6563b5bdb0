// Package share is the External Share Web API (docs/clients.md):
// model, validation, bbolt storage and net/http handlers, plus the public
// share page. It knows nothing of Caddy; caddymodule wires it in.
package share

import (
	"net/http"

	"github.com/keygate/keygate/internal/access"
)

// Prefix is the path the External Share API owns.
const Prefix = "/webapi/share"

// Operations is the API's endpoint table. On share, create also grants
// update (PUT) and get grants activity (docs/clients.md, Keys).
var Operations = access.Table{
	Service: access.ServiceShare,
	Prefix:  Prefix,
	Operations: []access.Operation{
		{Name: "list", Method: http.MethodGet, Pattern: Prefix, Privilege: access.PrivList},
		{Name: "create", Method: http.MethodPost, Pattern: Prefix, Privilege: access.PrivCreate},
		{Name: "get", Method: http.MethodGet, Pattern: Prefix + "/{uuid}", Privilege: access.PrivGet},
		{Name: "update", Method: http.MethodPut, Pattern: Prefix + "/{uuid}", Privilege: access.PrivCreate},
		{Name: "delete", Method: http.MethodDelete, Pattern: Prefix + "/{uuid}", Privilege: access.PrivDelete},
		{Name: "activity", Method: http.MethodGet, Pattern: Prefix + "/{uuid}/activity", Privilege: access.PrivGet},
	},
}
