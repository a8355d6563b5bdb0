package caddymodule

import (
	"errors"

	"github.com/keygate/keygate/internal/docseal"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are created once per process and registered into every config's
// registry, so counts survive reloads and a reload never fails on a
// duplicate registration. No label carries a key id, a token or personal
// data.
var metrics = struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	refusals      *prometheus.CounterVec
	keys          *prometheus.GaugeVec
	usageFlush    prometheus.Histogram
	notifications *prometheus.CounterVec
	// webhookDeliveries counts webhook delivery attempts by outcome.
	webhookDeliveries *prometheus.CounterVec
	dbErrors          prometheus.Counter
	// documentSeals counts the seals of completed contracts' documents.
	documentSeals *prometheus.CounterVec
	// ready is 1 while /readyz would answer 200 (health.go).
	ready prometheus.GaugeFunc
	// usageFlushed is when key usage was last written.
	usageFlushed prometheus.Gauge
	// hostRequests and hostDuration count the calls to the issue
	// tracker (the host platform) by outcome, and time them.
	hostRequests *prometheus.CounterVec
	hostDuration prometheus.Histogram
	// sealExpiry is when the document seal certificate expires.
	sealExpiry prometheus.Gauge
}{
	requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_requests_total",
		Help: "Requests checked by webapi_auth, by service, operation and HTTP status code.",
	}, []string{"service", "operation", "code"}),
	duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "keygate_request_duration_seconds",
		Help:    "Time from the key check to the end of the response, by service and operation.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"service", "operation"}),
	refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_auth_refusals_total",
		Help: "Requests refused by the key check, by service and reason.",
	}, []string{"service", "reason"}),
	keys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "keygate_keys",
		Help: "API keys in the store, by service.",
	}, []string{"service"}),
	usageFlush: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "keygate_usage_flush_seconds",
		Help:    "Time taken to write key usage counts to the database.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	}),
	notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_notifications_total",
		Help: "Notification delivery attempts, by channel and outcome.",
	}, []string{"channel", "outcome"}),
	webhookDeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_webhook_deliveries_total",
		Help: "Webhook delivery attempts, by outcome: sent (2xx), retry (failed, retried later), failed (given up 24 h after the event).",
	}, []string{"outcome"}),
	dbErrors: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "keygate_database_unavailable_total",
		Help: "Database operations that failed because the database could not be reached (PostgreSQL storage).",
	}),
	ready: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "keygate_ready",
		Help: "1 while this instance is ready (/readyz answers 200: storage, key index, background workers), else 0.",
	}, readyValue),
	usageFlushed: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "keygate_usage_flush_last_success_timestamp_seconds",
		Help: "When key usage counts were last written to the database (Unix time); set at start.",
	}),
	hostRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_host_requests_total",
		Help: "Calls to the issue tracker (the host platform), by outcome: ok, not_found, refused (keygate's account refused), unavailable (no answer in time, or a server error).",
	}, []string{"outcome"}),
	hostDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "keygate_host_request_duration_seconds",
		Help:    "Time of one call to the issue tracker (the host platform).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}),
	sealExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "keygate_seal_certificate_expiry_timestamp_seconds",
		Help: "When the certificate that seals completed contracts' documents expires (Unix time).",
	}),
	documentSeals: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "keygate_document_seals_total",
		Help: "Seals of completed contracts' documents, by outcome: sealed, sealed_with_timestamp, sealed_without_timestamp (the timestamp authority failed), timestamp_failed (its reply failed a check), sealed_without_validation_data (timestamped, but the revocation status (B-T) or the document timestamp (B-LT) failed, short of B-LTA), failed.",
	}, []string{"outcome"}),
}

func init() {
	// Every channel and outcome shows from the start, at zero, so alerts
	// on a rate need no special case for "never happened".
	for _, ch := range []string{"email", "sms"} {
		for _, o := range []string{"sent", "retry", "failed"} {
			metrics.notifications.WithLabelValues(ch, o)
		}
	}
	for _, o := range []string{"sent", "retry", "failed"} {
		metrics.webhookDeliveries.WithLabelValues(o)
	}
	for _, o := range []docseal.Outcome{docseal.Sealed, docseal.SealedWithTimestamp, docseal.SealedWithoutTimestamp, docseal.TimestampFailed, docseal.SealedWithoutValidationData, docseal.Failed} {
		metrics.documentSeals.WithLabelValues(string(o))
	}
	for _, o := range []string{"ok", "not_found", "refused", "unavailable"} {
		metrics.hostRequests.WithLabelValues(o)
	}
	for _, svc := range []string{"contracts", "share"} {
		for reason := range refusals {
			metrics.refusals.WithLabelValues(svc, reason)
		}
	}
}

// registerMetrics adds our collectors to reg, tolerating that an earlier
// module of the same config registered them already.
func registerMetrics(reg *prometheus.Registry) error {
	for _, c := range []prometheus.Collector{
		metrics.requests, metrics.duration, metrics.refusals,
		metrics.keys, metrics.usageFlush, metrics.notifications, metrics.webhookDeliveries, metrics.dbErrors,
		metrics.documentSeals, metrics.ready, metrics.usageFlushed, metrics.hostRequests, metrics.hostDuration,
		metrics.sealExpiry,
	} {
		if err := reg.Register(c); err != nil {
			var already prometheus.AlreadyRegisteredError
			if !errors.As(err, &already) {
				return err
			}
		}
	}
	return nil
}
