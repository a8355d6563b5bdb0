// Package share is the External Share Web API (docs/clients.md):
// model, validation, bbolt storage and net/http handlers, plus the public
// share page. It knows nothing of Caddy; caddymodule wires it in.
package share

import (
	"net/http"

	"github.com/keygate/keygate/keystore"
)

// Prefix is the path the External Share API owns.
const Prefix = "/webapi/share"

// Operations is the API's endpoint table. On share, create also grants
// update (PUT) and get grants activity (docs/clients.md, Keys).
var Operations = keystore.Table{
	Service: keystore.ServiceShare,
	Prefix:  Prefix,
	Operations: []keystore.Operation{
		{Name: "list", Method: http.MethodGet, Pattern: Prefix, Privilege: keystore.PrivList},
		{Name: "create", Method: http.MethodPost, Pattern: Prefix, Privilege: keystore.PrivCreate},
		{Name: "get", Method: http.MethodGet, Pattern: Prefix + "/{uuid}", Privilege: keystore.PrivGet},
		{Name: "update", Method: http.MethodPut, Pattern: Prefix + "/{uuid}", Privilege: keystore.PrivCreate},
		{Name: "delete", Method: http.MethodDelete, Pattern: Prefix + "/{uuid}", Privilege: keystore.PrivDelete},
		{Name: "activity", Method: http.MethodGet, Pattern: Prefix + "/{uuid}/activity", Privilege: keystore.PrivGet},
	},
}
