package caddymodule

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/webhook"
)

// Webhooks (docs/clients.md, Webhooks): the delivery worker of the shared
// state and the admin API's /webapi/webhooks routes.

// startWebhookWorker starts the state's webhook worker once, with the
// attempt timeout of the config that starts first (as send_timeout, read
// once). Its goroutines are its own: a slow endpoint waits on none of the
// API's requests and on no notification.
func (s *state) startWebhookWorker(timeout time.Duration) {
	s.startWebhooks.Do(func() {
		s.webhookWorker = webhook.NewWorker(s.webhooks, webhook.WorkerConfig{
			AttemptTimeout: timeout,
			OnOutcome:      func(outcome string) { metrics.webhookDeliveries.WithLabelValues(outcome).Inc() },
			Logger:         s.logger.Named("webhooks"),
		})
		s.webhooksDone = make(chan struct{})
		s.deliveringWebhooks.Store(true)
		go func() {
			defer close(s.webhooksDone)
			defer s.deliveringWebhooks.Store(false)
			if err := s.webhookWorker.Run(context.Background()); err != nil {
				s.logger.Error("webhook worker", zap.Error(err))
			}
		}()
	})
}

// stopWebhookWorker ends delivery before the database closes; attempts in
// flight finish and are recorded.
func (s *state) stopWebhookWorker() {
	s.startWebhooks.Do(func() {}) // never started: it never will be
	if s.webhookWorker != nil {
		s.webhookWorker.Stop()
		<-s.webhooksDone
	}
}

// auditWebhook records an administration action on a subscription.
func (a *Admin) auditWebhook(r *http.Request, msg, id string, status int) {
	rec := adminAudit(r, msg, "webhooks", status)
	rec.WebhookID = id
	appOf(r).audit.Add(rec)
}

func webhooksOf(r *http.Request) *webhook.Store { return appOf(r).state.webhooks }

func (a *Admin) createWebhook(w http.ResponseWriter, r *http.Request) {
	var in webhook.Input
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	sub, err := webhooksOf(r).Create(r.Context(), &in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditWebhook(r, "webhook created", sub.ID, http.StatusCreated)
	w.Header().Set("Location", "/webapi/webhooks/"+sub.ID)
	writeJSON(w, http.StatusCreated, sub)
}

func (a *Admin) listWebhooks(w http.ResponseWriter, r *http.Request) {
	if err := noQuery(r); err != nil {
		a.fail(w, r, err)
		return
	}
	list, err := webhooksOf(r).List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (a *Admin) getWebhook(w http.ResponseWriter, r *http.Request) {
	sub, err := webhooksOf(r).Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sub)
}

func (a *Admin) updateWebhook(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := webhooksOf(r).Get(r.Context(), id); err != nil {
		a.fail(w, r, err) // an unknown id is a 404 whatever the body
		return
	}
	var in webhook.Input
	if err := problem.DecodeJSON(w, r, &in); err != nil {
		a.fail(w, r, err)
		return
	}
	if patch.Empty(&in) {
		a.getWebhook(w, r) // {} changes nothing: answered as a read
		return
	}
	sub, err := webhooksOf(r).Update(r.Context(), id, &in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditWebhook(r, "webhook updated", id, http.StatusOK)
	writeJSON(w, http.StatusOK, sub)
}

func (a *Admin) rotateWebhookSecret(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sub, err := webhooksOf(r).RotateSecret(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditWebhook(r, "webhook secret rotated", id, http.StatusOK)
	writeJSON(w, http.StatusOK, sub)
}

func (a *Admin) testWebhook(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	msg, err := webhooksOf(r).Test(r.Context(), id)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditWebhook(r, "webhook test queued", id, http.StatusAccepted)
	writeJSON(w, http.StatusAccepted, map[string]string{"messageId": msg})
}

const (
	defaultDeliveriesLimit = 100
	maxDeliveriesLimit     = webhook.LogSize
)

func (a *Admin) webhookDeliveries(w http.ResponseWriter, r *http.Request) {
	var f problem.Fields
	query, err := routeQuery(r, &f, "this list", "limit", "offset")
	if err != nil {
		a.fail(w, r, err)
		return
	}
	limit, offset := defaultDeliveriesLimit, 0
	if v, ok := query["limit"]; ok && len(v) == 1 {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > maxDeliveriesLimit {
			f.Add("limit", "invalid", "limit must be a whole number from 1 to "+strconv.Itoa(maxDeliveriesLimit))
		}
		limit = n
	}
	if v, ok := query["offset"]; ok && len(v) == 1 {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 0 || n >= webhook.LogSize {
			f.Add("offset", "invalid", "offset must be a whole number from 0 to "+strconv.Itoa(webhook.LogSize-1))
		}
		offset = n
	}
	if err := f.Err(); err != nil {
		a.fail(w, r, err)
		return
	}
	log, err := webhooksOf(r).Deliveries(r.Context(), r.PathValue("id"), limit, offset)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, log)
}

func (a *Admin) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := webhooksOf(r).Delete(r.Context(), id); err != nil {
		a.fail(w, r, err)
		return
	}
	a.auditWebhook(r, "webhook deleted", id, http.StatusNoContent)
	w.WriteHeader(http.StatusNoContent)
}

// noQuery refuses any query parameter: the route takes none.
func noQuery(r *http.Request) error {
	var f problem.Fields
	if _, err := routeQuery(r, &f, "this list"); err != nil {
		return err
	}
	return f.Err()
}
