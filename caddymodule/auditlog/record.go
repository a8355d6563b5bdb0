// Package auditlog writes keygate's audit log: one entry per key use,
// refusal and administration action, handed from requests to one writer
// goroutine in batches (Log), and the `webapi_json` log encoder module
// that writes those entries fast, byte for byte as Caddy's `format json`
// does (Encoder). With any other log format the entries go through zap's
// public encoder API like any other field. See docs/operators.md, "The
// audit log".
package auditlog

import (
	"net/netip"
	"time"

	"go.uber.org/zap/zapcore"
)

// Record is one audit entry as a request leaves it: plain values, no
// encoding and no allocation of its own. The writer turns it into a zap
// entry of its logger with the request's own time, whose one field is
// the record itself (zap.Inline).
type Record struct {
	At      time.Time
	Msg     string
	KeyID   string
	KeyName string
	// ConsumerID and PlanID are the key's consumer and plan, or the
	// consumer or plan an administration action changed.
	ConsumerID string
	PlanID     string
	WebhookID  string // administration of a webhook subscription
	TemplateID string // administration of a contract template
	User       string // the Web API Keys page's authenticated user
	Owner      string
	Service    string
	Operation  string
	Method     string
	Path       string
	Reason     string // refusals only
	ClientIP   netip.Addr
	Status     int
	Duration   time.Duration // negative: not a request (administration)
	// PreviousToken marks a use of the token a roll replaced.
	PreviousToken bool
	// Refusals is how many rate-limit or quota refusals the entry stands
	// for (0: not such a refusal).
	Refusals uint64
	// Imported and ImportFormat describe a key import: how many keys,
	// from which format (jsonl, kong); NewConsumers and NewPlans how many
	// consumers and plans it created (kong).
	Imported               int
	ImportFormat           string
	NewConsumers, NewPlans int

	// json is the writer's encoding state, which the webapi_json encoder
	// carries from entry to entry of a batch (nil: a record logged
	// elsewhere, encoded on its own).
	json *jsonAudit
}

// MarshalLogObject gives the record's fields to any zap encoder, in the
// order of the log line: with zap.Inline, an entry whose fields they are
// as if each were logged as a zap field of its own (zap.String,
// zap.Int, zap.Duration, ...).
func (rec *Record) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	rec.encode(objectFields{enc})
	return nil
}

// fieldEncoder takes an entry's fields, in the order of the log line.
type fieldEncoder interface {
	str(key, val string)
	ip(key string, ip netip.Addr)
	int(key string, val int)
	dur(key string, val time.Duration)
	flag(key string, val bool)
	uint(key string, val uint64)
}

// encode gives rec's fields to e: the one description of an audit
// entry's fields, their order and when each is present, for both ways of
// writing it (objectFields, jsonAudit).
func (rec *Record) encode(e fieldEncoder) {
	rec.encodeWho(e)
	rec.encodeWhat(e)
}

// encodeWho gives the fields that say who acted on what: encode's first
// part, the same for a run of one key's requests to one operation.
func (rec *Record) encodeWho(e fieldEncoder) {
	if rec.KeyID != "" { // a refusal before the key is known has none
		e.str("key_id", rec.KeyID)
		e.str("key_name", rec.KeyName)
		e.str("owner", rec.Owner)
	}
	if rec.ConsumerID != "" {
		e.str("consumer_id", rec.ConsumerID)
	}
	if rec.PlanID != "" {
		e.str("plan_id", rec.PlanID)
	}
	if rec.WebhookID != "" {
		e.str("webhook_id", rec.WebhookID)
	}
	if rec.TemplateID != "" {
		e.str("template_id", rec.TemplateID)
	}
	if rec.User != "" {
		e.str("user", rec.User)
	}
	e.str("service", rec.Service)
	e.str("operation", rec.Operation)
	e.str("method", rec.Method)
}

// encodeWhat gives the fields of the request itself: encode's second part.
func (rec *Record) encodeWhat(e fieldEncoder) {
	e.str("path", rec.Path) // redacted by the writer (Log.write)
	e.ip("client_ip", rec.ClientIP)
	e.int("status", rec.Status)
	if rec.Reason != "" {
		e.str("reason", rec.Reason)
	}
	if rec.Duration >= 0 {
		e.dur("duration", rec.Duration)
	}
	if rec.PreviousToken {
		e.flag("previous_token", true)
	}
	if rec.Refusals > 0 {
		e.uint("refusals", rec.Refusals)
	}
	if rec.ImportFormat != "" {
		e.int("imported", rec.Imported)
		e.str("format", rec.ImportFormat)
		if rec.ImportFormat == "kong" {
			e.int("consumers", rec.NewConsumers)
			e.int("plans", rec.NewPlans)
		}
	}
}

// objectFields gives an entry's fields to a zap ObjectEncoder, each as
// the zap field of its kind would (zap.Int is an int64 to zap).
type objectFields struct{ enc zapcore.ObjectEncoder }

func (o objectFields) str(k, v string)               { o.enc.AddString(k, v) }
func (o objectFields) ip(k string, ip netip.Addr)    { o.enc.AddString(k, clientIPString(ip)) }
func (o objectFields) int(k string, v int)           { o.enc.AddInt64(k, int64(v)) }
func (o objectFields) dur(k string, v time.Duration) { o.enc.AddDuration(k, v) }
func (o objectFields) flag(k string, v bool)         { o.enc.AddBool(k, v) }
func (o objectFields) uint(k string, v uint64)       { o.enc.AddUint64(k, v) }

func clientIPString(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	return ip.String()
}
