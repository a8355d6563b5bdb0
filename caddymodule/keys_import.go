package caddymodule

import (
	"errors"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/keyimport"
)

// importRequest is the body of POST /webapi/keys/import: the file's
// text, its format, and the options of `caddy webapi keys import`.
type importRequest struct {
	// Format is jsonl (default) or kong.
	Format string `json:"format"`
	// Data is the file: JSON Lines of key fields (with "token"), or a
	// decK dump (YAML).
	Data string `json:"data"`
	// Service is the service of jsonl lines that name none, and the
	// only service a kong import may map to.
	Service string `json:"service"`
	// PrivilegesMap maps Kong ACL groups to a service and privileges.
	PrivilegesMap map[string]keyimport.Grant `json:"privilegesMap"`
	// DryRun checks everything and stores nothing.
	DryRun bool `json:"dryRun"`
}

// importKeys imports keys with their tokens and, from a decK dump, their
// consumers and plans, all or none, and audits it once: `keys imported`
// with the count and the format, never a token.
func (a *Admin) importKeys(w http.ResponseWriter, r *http.Request) {
	var in importRequest
	if err := problem.DecodeJSONBody(w, r, &in, keystore.MaxImportBody); err != nil {
		a.fail(w, r, err)
		return
	}
	if in.Service != "" && !access.Service(in.Service).Valid() {
		a.fail(w, r, problem.Invalid([]problem.FieldError{{Field: "service", Code: "invalid", Message: "service must be contracts or share"}}))
		return
	}
	var set keystore.ImportSet
	var err error
	switch in.Format {
	case "", "jsonl":
		in.Format = "jsonl"
		set.Keys, err = keyimport.ParseJSONL([]byte(in.Data), in.Service)
	case "kong":
		if len(in.PrivilegesMap) == 0 {
			err = problem.Invalid([]problem.FieldError{{Field: "privilegesMap", Code: "required",
				Message: "a kong import needs the map of ACL groups to a service and privileges"}})
			break
		}
		set, err = keyimport.ParseKong([]byte(in.Data), in.PrivilegesMap, in.Service, time.Now())
	default:
		err = problem.Invalid([]problem.FieldError{{Field: "format", Code: "invalid", Message: "format must be jsonl or kong"}})
	}
	var parsed *problem.Details
	if err != nil && !errors.As(err, &parsed) {
		a.fail(w, r, err)
		return
	}
	app := appOf(r)
	// The file's problems and the keys' are reported together.
	report, err := app.state.keys.Import(set, in.DryRun, err)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !in.DryRun {
		app.state.updateKeyGauges()
		rec := adminAudit(r, "keys imported", in.Service, http.StatusOK)
		rec.Imported, rec.ImportFormat = report.Imported, in.Format
		for _, c := range report.Consumers {
			if !c.Existing {
				rec.NewConsumers++
			}
		}
		for _, p := range report.Plans {
			if !p.Existing {
				rec.NewPlans++
			}
		}
		app.audit.Add(rec)
	}
	writeJSON(w, http.StatusOK, report)
}
