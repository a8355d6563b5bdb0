package auditlog

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

func init() {
	caddy.RegisterModule(Encoder{})
}

// Encoder is the `webapi_json` log format: Caddy's `format json` with
// its defaults, byte for byte, that writes the audit log's entries with
// keygate's own JSON code rather than field by field through zap. Every
// other entry, and an audit entry it cannot write as `format json` would
// (a logger with context fields, a caller or a stack), goes to the JSON
// encoder it wraps. Caddyfile: `format webapi_json`, no options (for
// another layout, `format json { ... }` writes the same entries, slower).
type Encoder struct {
	zapcore.Encoder `json:"-"`

	// fast: audit entries are written by jsonAudit. False in a clone
	// (which may hold context fields) and when the check at Provision
	// found the wrapped encoder writing otherwise.
	fast bool
}

// CaddyModule returns the Caddy module information.
func (Encoder) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.encoders.webapi_json",
		New: func() caddy.Module { return new(Encoder) },
	}
}

// Provision sets up Caddy's JSON encoder with its defaults, and checks
// that jsonAudit writes entries as it does.
func (e *Encoder) Provision(ctx caddy.Context) error {
	je := &logging.JSONEncoder{}
	if err := je.Provision(ctx); err != nil {
		return err
	}
	e.Encoder = je
	e.fast = true
	if err := e.selfCheck(); err != nil {
		// A Caddy or zap whose JSON differs from what jsonAudit writes:
		// correct entries, at zap's speed.
		e.fast = false
		if l := ctx.Logger(); l != nil {
			l.Warn("webapi_json writes audit entries through zap", zap.Error(err))
		}
	}
	return nil
}

// UnmarshalCaddyfile takes `webapi_json`, without arguments or options.
func (e *Encoder) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the format's name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("webapi_json takes no options; for another layout use format json { ... }")
	}
	return nil
}

// Clone is the wrapped encoder's clone (zap clones an encoder to add a
// logger's context fields to it), which writes audit entries through it.
func (e *Encoder) Clone() zapcore.Encoder {
	return &Encoder{Encoder: e.Encoder.Clone()}
}

// EncodeEntry writes ent. An info entry whose one field is an audit
// record, without caller or stack, is written by jsonAudit; any other
// by the wrapped encoder.
func (e *Encoder) EncodeEntry(ent zapcore.Entry, fields []zapcore.Field) (*buffer.Buffer, error) {
	if !e.fast || len(fields) != 1 || fields[0].Type != zapcore.InlineMarshalerType ||
		ent.Level != zapcore.InfoLevel || ent.Caller.Defined || ent.Stack != "" {
		return e.Encoder.EncodeEntry(ent, fields)
	}
	rec, ok := fields[0].Interface.(*Record)
	if !ok || rec == nil {
		return e.Encoder.EncodeEntry(ent, fields)
	}
	j := rec.json
	if j == nil { // not the writer's: a record logged on its own
		j = scratch.Get().(*jsonAudit)
		defer scratch.Put(j)
	}
	j.b = j.b[:0]
	j.entry(ent.LoggerName, ent.Message, ent.Time, rec)
	buf := buffers.Get()
	buf.AppendBytes(j.b)
	if cap(j.b) > maxScratch {
		j.b = nil
	}
	return buf, nil
}

// maxScratch bounds the encoding buffer kept from entry to entry.
const maxScratch = 64 << 10

var (
	buffers = buffer.NewPool()
	scratch = sync.Pool{New: func() any { return new(jsonAudit) }}
)

// selfCheck encodes probe entries of every shape both ways, and says
// where they differ.
func (e *Encoder) selfCheck() error {
	at := time.Date(2026, 11, 23, 14, 48, 34, 613085123, time.UTC)
	probes := []Record{
		{KeyID: "k", KeyName: "a \"quoted\" \\ name\x00\t", Owner: "Zoë \xff 😀", ConsumerID: "c", PlanID: "p",
			Service: "contracts", Operation: "contracts.get", Method: "GET", Path: "/webapi/contracts/x",
			ClientIP: netip.MustParseAddr("fe80::1%eth0"), Status: 200, Duration: 123456789, PreviousToken: true, Refusals: 3},
		{WebhookID: "w", TemplateID: "t", User: "u", Service: "webhooks", Operation: "admin", Method: "POST",
			ClientIP: netip.MustParseAddr("203.0.113.7"), Status: 201, Reason: "r", Duration: -1,
			Imported: 2, ImportFormat: "kong", NewConsumers: 1, NewPlans: 1},
	}
	for i := range probes {
		for _, ent := range []zapcore.Entry{
			{Level: zapcore.InfoLevel, Time: at, LoggerName: "webapi.audit", Message: "key used"},
			{Level: zapcore.InfoLevel, Message: "key \"used\""},
		} {
			fields := []zapcore.Field{zap.Inline(&probes[i])}
			want, err := e.Encoder.EncodeEntry(ent, fields)
			if err != nil {
				return err
			}
			got, err := e.EncodeEntry(ent, fields)
			if err != nil {
				return err
			}
			if got.String() != want.String() {
				return fmt.Errorf("audit entry written as\n%s, Caddy's JSON encoder writes\n%s", got, want)
			}
			got.Free()
			want.Free()
		}
	}
	return nil
}

// Interface guards
var (
	_ zapcore.Encoder       = (*Encoder)(nil)
	_ caddy.Provisioner     = (*Encoder)(nil)
	_ caddyfile.Unmarshaler = (*Encoder)(nil)
)
