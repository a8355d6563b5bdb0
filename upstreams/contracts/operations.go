// Package contracts is the Contract Signing Web API (docs/clients.md): model, validation, bbolt storage and net/http handlers.
// It knows nothing of Caddy; caddymodule wires it behind webapi_auth.
package contracts

import (
	"net/http"

	"github.com/keygate/keygate/internal/access"
)

// Prefix is the path the Contract Signing API owns.
const Prefix = "/webapi/contracts"

// Operations is the API's endpoint table. webapi_auth checks keys against
// it and Handler routes by it, so the two never disagree.
var Operations = access.Table{
	Service: access.ServiceContracts,
	Prefix:  Prefix,
	Operations: []access.Operation{
		{Name: "search", Method: http.MethodGet, Pattern: Prefix, Privilege: access.PrivSearch},
		{Name: "create", Method: http.MethodPost, Pattern: Prefix, Privilege: access.PrivCreate},
		{Name: "get", Method: http.MethodGet, Pattern: Prefix + "/{id}", Privilege: access.PrivGet},
		{Name: "archive", Method: http.MethodPatch, Pattern: Prefix + "/{id}", Privilege: access.PrivArchive},
		{Name: "delete", Method: http.MethodDelete, Pattern: Prefix + "/{id}", Privilege: access.PrivDelete},
		{Name: "attachment", Method: http.MethodGet, Pattern: Prefix + "/{id}/attachments/{attachmentId}", Privilege: access.PrivGet},
	},
}
