package caddymodule

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// The admin API of consumers and plans (docs/administrators.md,
// Consumers and plans): the same shapes and rules as the keys', each
// change audited with the consumer or plan it changed.

// auditScope records an administration action on a consumer or plan.
func (a *Admin) auditScope(r *http.Request, msg, consumerID, planID string, status int) {
	rec := adminAudit(r, msg, "", status)
	rec.ConsumerID, rec.PlanID = consumerID, planID
	appOf(r).audit.Add(rec)
}

// syncScopes brings plan or consumer id (with sync: keys.SyncPlan or
// SyncConsumer), or all of them when id is empty, up to date with the
// other instances before they are shown; with quotas, it also reads
// what every instance took of consumer id's quota (every consumer's when
// id is empty). Once each: a key's sync would read every quota again.
func (a *Admin) syncScopes(r *http.Request, sync func(id string) error, id string, quotas bool) {
	keys := appOf(r).state.keys
	if err := sync(id); err != nil {
		appOf(r).logger.Warn("reading plans and consumers back from the database", zap.Error(err))
	}
	if !quotas {
		return
	}
	if err := keys.ReadQuotas(id); err != nil {
		appOf(r).logger.Warn("reading quota use from the database", zap.Error(err))
	}
}

func (a *Admin) createPlan(w http.ResponseWriter, r *http.Request) {
	var in keystore.PlanInput
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	p, err := appOf(r).state.keys.CreatePlan(&in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditScope(r, "plan created", "", p.ID, http.StatusCreated)
	w.Header().Set("Location", pagePrefix(r)+"/webapi/plans/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

func (a *Admin) listPlans(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	a.syncScopes(r, appOf(r).state.keys.SyncPlan, "", false)
	writeJSON(w, http.StatusOK, appOf(r).state.keys.ListPlans())
}

func (a *Admin) getPlan(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a.syncScopes(r, appOf(r).state.keys.SyncPlan, id, false)
	p, err := appOf(r).state.keys.GetPlan(id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func (a *Admin) updatePlan(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := appOf(r).state.keys.GetPlan(id); err != nil {
		a.fail(w, r, err)
		return
	}
	var in keystore.PlanInput
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	if patch.Empty(&in) {
		a.getPlan(w, r) // {} changes nothing: answered as a read
		return
	}
	p, err := appOf(r).state.keys.UpdatePlan(id, &in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditScope(r, "plan updated", "", p.ID, http.StatusOK)
	writeJSON(w, http.StatusOK, p)
}

func (a *Admin) deletePlan(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := appOf(r).state.keys.DeletePlan(id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditScope(r, "plan deleted", "", id, http.StatusNoContent)
	w.WriteHeader(http.StatusNoContent)
}

func (a *Admin) createConsumer(w http.ResponseWriter, r *http.Request) {
	var in keystore.ConsumerInput
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := appOf(r).state.keys.CreateConsumer(&in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditScope(r, "consumer created", c.ID, "", http.StatusCreated)
	w.Header().Set("Location", pagePrefix(r)+"/webapi/consumers/"+c.ID)
	writeJSON(w, http.StatusCreated, c)
}

func (a *Admin) listConsumers(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	a.syncScopes(r, appOf(r).state.keys.SyncConsumer, "", true)
	writeJSON(w, http.StatusOK, appOf(r).state.keys.ListConsumers())
}

func (a *Admin) getConsumer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	a.syncScopes(r, appOf(r).state.keys.SyncConsumer, id, true)
	c, err := appOf(r).state.keys.GetConsumer(id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *Admin) updateConsumer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := appOf(r).state.keys.GetConsumer(id); err != nil {
		a.fail(w, r, err)
		return
	}
	var in keystore.ConsumerInput
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	if patch.Empty(&in) {
		a.getConsumer(w, r) // {} changes nothing: answered as a read
		return
	}
	c, err := appOf(r).state.keys.UpdateConsumer(id, &in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditScope(r, "consumer updated", c.ID, "", http.StatusOK)
	writeJSON(w, http.StatusOK, c)
}

func (a *Admin) deleteConsumer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := appOf(r).state.keys.DeleteConsumer(id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditScope(r, "consumer deleted", id, "", http.StatusNoContent)
	w.WriteHeader(http.StatusNoContent)
}

// consumerUsage returns a consumer's requests over time, all its keys'
// together, with the parameters of a key's series.
func (a *Admin) consumerUsage(w http.ResponseWriter, r *http.Request) {
	keys := appOf(r).state.keys
	a.serveUsage(w, r, func(id string) error { _, err := keys.GetConsumer(id); return err }, keys.ConsumerUsageOver)
}
