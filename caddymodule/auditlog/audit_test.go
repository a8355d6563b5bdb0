package auditlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/logging"
	"github.com/keygate/keygate/internal/token"
	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"
)

// testRecords are entries of every shape, with the strings a log
// encoder must get right: quotes, backslashes, control bytes, non-ASCII,
// invalid UTF-8, a token in a path, a zone in an address, durations
// short, long and negative; then random ones from seed.
func testRecords(seed uint64, random int) []Record {
	at := time.Date(2026, 11, 23, 14, 48, 34, 613085123, time.UTC)
	ip4, ip6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::1")
	recs := []Record{
		{At: at, Msg: "key used", KeyID: "01JDX6J5B8Q4Z0KQ1T3N2M7R9S", KeyName: "bench", Owner: "user-00", Service: "contracts",
			Operation: "contracts.get", Method: "GET", Path: "/webapi/contracts/00000000-0000-4000-8000-000000000000",
			ClientIP: ip4, Status: 200, Duration: 123456 * time.Nanosecond},
		{At: at.Add(time.Millisecond), Msg: "key refused", Service: "share", Operation: "none", Method: "POST",
			Path: "/webapi/share/kg_abcdefghijklmnopqrstuvwxyz0123456789ABCD/x", ClientIP: ip6, Status: 401, Reason: "invalid_key", Duration: 0},
		{At: at, Msg: "key refused", KeyID: "k", KeyName: `a "quoted" \ name`, Owner: "Zoë Ångström 中文 \u2028 😀", Service: "contracts",
			ConsumerID: "acme", PlanID: "gold", Operation: "contracts.create", Method: "POST", Path: "/webapi/contracts", ClientIP: ip4,
			Status: 429, Reason: "rate_limited", Duration: 3 * time.Millisecond, Refusals: 1234, PreviousToken: true},
		{At: at, Msg: "key created", KeyID: "k2", KeyName: "ctl\x00\x01\x1f\x7f\t\r\n", Owner: "bad\xff\xc3utf8\xe2\x82", Service: "contracts",
			Operation: "create", Method: "POST", Path: "/webapi/keys", Status: 201, Duration: -1, User: "admin"},
		{At: at, Msg: "webhook created", WebhookID: "wh_1", Service: "webhooks", Operation: "create", Method: "POST", Path: "/webapi/webhooks",
			ClientIP: netip.MustParseAddr("fe80::1%eth\"0"), Status: 201, Duration: -1},
		{At: at, Msg: "template added", TemplateID: "PAGE-42", Service: "contracts", Operation: "template", Method: "POST",
			Path: "/webapi/templates", ClientIP: netip.MustParseAddr("::ffff:192.0.2.1"), Status: 201, Duration: -1},
		{At: at, Msg: "keys imported", Service: "contracts", Operation: "admin", Method: "POST", Path: "/webapi/keys/import",
			ClientIP: ip4, Status: 200, Duration: -1, Imported: 12, ImportFormat: "kong", NewConsumers: 3, NewPlans: 2},
		{At: at, Msg: "keys imported", Service: "share", Operation: "admin", Method: "POST", Path: "/webapi/keys/import",
			ClientIP: ip4, Status: 200, Duration: -1, Imported: 5, ImportFormat: "jsonl"},
		{At: at, Msg: "consumer changed", ConsumerID: "acme", Operation: "admin", Method: "PUT", Status: 200, Duration: -1},
		{At: at, Msg: "consumer changed", ConsumerID: "other", Operation: "admin", Method: "PUT", Status: 200, Duration: -1},
		{At: at, Msg: "plan changed", PlanID: "gold", Operation: "admin", Method: "PUT", Status: 200, Duration: -1},
		{Msg: "no time", Service: "contracts", Status: 500, Duration: 90 * time.Minute},
		{At: at, Msg: "long", Service: "contracts", Status: 200, Duration: maxExactDuration + 7},
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pieces := []string{"a", "Z", "/", " ", `"`, `\`, "\x00", "\x1f", "\x7f", "\n", "\t", "\r", "é", "中", "\u2028", "😀",
		"\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "kg_", "%", "<", ">", "&"}
	str := func() string {
		var b strings.Builder
		for n := r.IntN(12); n > 0; n-- {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	for i := 0; i < random; i++ {
		rec := Record{
			At:  time.Unix(0, r.Int64N(4e18)),
			Msg: str(), KeyID: str(), KeyName: str(), ConsumerID: str(), PlanID: str(), WebhookID: str(), TemplateID: str(),
			User: str(), Owner: str(), Service: str(), Operation: str(), Method: str(), Path: str(), Reason: str(),
			Status:        r.IntN(600),
			Duration:      time.Duration(r.Int64N(1e12)) - 1e11,
			PreviousToken: r.IntN(2) == 0,
			Refusals:      uint64(r.IntN(3)) * r.Uint64(),
		}
		if r.IntN(4) == 0 {
			rec.Imported, rec.ImportFormat = r.IntN(1000), []string{"kong", "jsonl", str()}[r.IntN(3)]
			rec.NewConsumers, rec.NewPlans = r.IntN(10), r.IntN(10)
		}
		if r.IntN(3) > 0 {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			rec.ClientIP = netip.AddrFrom16(a)
			if r.IntN(2) == 0 {
				rec.ClientIP = rec.ClientIP.Unmap()
			}
			if r.IntN(10) == 0 {
				rec.ClientIP = rec.ClientIP.WithZone(str())
			}
		}
		recs = append(recs, rec)
	}
	return recs
}

// withRuns repeats records with small changes after their first fields,
// as a key's requests to one operation come: the webapi_json encoder
// copies those first fields from the entry before.
func withRuns(recs []Record) []Record {
	var out []Record
	for i, rec := range recs {
		for j := 0; j < 1+i%3; j++ {
			r := rec
			r.Path += "/" + strconv.Itoa(j)
			r.Status += j
			r.Duration += time.Duration(j)
			out = append(out, r)
		}
	}
	return out
}

// caddyJSON is Caddy's `format json` encoder with cfg.
func caddyJSON(t testing.TB, cfg logging.LogEncoderConfig) zapcore.Encoder {
	enc := &logging.JSONEncoder{LogEncoderConfig: cfg}
	if err := enc.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	return enc
}

// webapiJSON is the `webapi_json` encoder, provisioned.
func webapiJSON(t testing.TB) *Encoder {
	enc := new(Encoder)
	if err := enc.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	if !enc.fast {
		t.Fatal("webapi_json's check at Provision failed: audit entries go through zap")
	}
	return enc
}

// auditLogger is the audit logger as Caddy makes it, for a log with
// encoder enc writing to w (without the include filter).
func auditLogger(enc zapcore.Encoder, w io.Writer) *zap.Logger {
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zapcore.InfoLevel)).Named("webapi").Named("audit")
}

// written is what the audit log writes of recs to l's output.
func written(l *zap.Logger, recs []Record) {
	a := New(l)
	a.write(recs)
	_ = l.Sync()
}

// zapFields collects an entry's fields as zap fields, one for each.
type zapFields struct{ fields []zap.Field }

func (z *zapFields) str(k, v string) { z.fields = append(z.fields, zap.String(k, v)) }
func (z *zapFields) ip(k string, ip netip.Addr) {
	z.fields = append(z.fields, zap.String(k, clientIPString(ip)))
}
func (z *zapFields) int(k string, v int)           { z.fields = append(z.fields, zap.Int(k, v)) }
func (z *zapFields) dur(k string, v time.Duration) { z.fields = append(z.fields, zap.Duration(k, v)) }
func (z *zapFields) flag(k string, v bool)         { z.fields = append(z.fields, zap.Bool(k, v)) }
func (z *zapFields) uint(k string, v uint64)       { z.fields = append(z.fields, zap.Uint64(k, v)) }

// asZapFields logs recs to l with a zap field of its own for each of an
// entry's fields: the reference every way of writing the log must equal.
func asZapFields(l *zap.Logger, recs []Record) {
	var at time.Time
	l = l.WithOptions(zap.WithClock(recordClock{&at}))
	for i := range recs {
		rec := recs[i]
		at = rec.At
		ce := l.Check(zapcore.InfoLevel, rec.Msg)
		if ce == nil {
			continue
		}
		rec.Path = token.Redact(rec.Path) // as the writer redacts it
		var z zapFields
		rec.encode(&z)
		ce.Write(z.fields...)
	}
	_ = l.Sync()
}

// sameLines fails t with the first line where got and want differ.
func sameLines(t *testing.T, got, want, what string) {
	t.Helper()
	if got == want {
		return
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range min(len(wl), len(gl)) {
		if wl[i] != gl[i] {
			t.Fatalf("line %d differs:\n want:  %q\n %s: %q", i+1, wl[i], what, gl[i])
		}
	}
	t.Fatalf("%d lines wanted, %d from %s", len(wl), len(gl), what)
}

// countingEncoder counts the entries its wrapped encoder writes.
type countingEncoder struct {
	zapcore.Encoder
	n *int
}

func (c countingEncoder) Clone() zapcore.Encoder { return countingEncoder{c.Encoder.Clone(), c.n} }
func (c countingEncoder) EncodeEntry(ent zapcore.Entry, f []zapcore.Field) (*buffer.Buffer, error) {
	*c.n++
	return c.Encoder.EncodeEntry(ent, f)
}

// The webapi_json encoder writes the audit log's entries itself, byte for
// byte as Caddy's `format json` writes them field by field through zap:
// every kind of entry and every string, alone and in runs.
func TestWebapiJSONMatchesJSON(t *testing.T) {
	for _, c := range []struct {
		name string
		recs []Record
	}{
		{"shapes", testRecords(1, 0)},
		{"random", testRecords(1, 20000)},
		{"runs", withRuns(testRecords(2, 300))},
		{"one record", testRecords(3, 0)[:1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want, got bytes.Buffer
			asZapFields(auditLogger(caddyJSON(t, logging.LogEncoderConfig{}), &want), c.recs)
			enc := webapiJSON(t)
			delegated := 0
			enc.Encoder = countingEncoder{enc.Encoder, &delegated}
			written(auditLogger(enc, &got), c.recs)
			sameLines(t, got.String(), want.String(), "webapi_json")
			if delegated != 0 {
				t.Errorf("%d of %d audit entries went through zap's JSON encoder", delegated, len(c.recs))
			}
		})
	}
	// One entry in full, as docs/operators.md shows one.
	var got bytes.Buffer
	written(auditLogger(webapiJSON(t), &got), testRecords(1, 0)[:1])
	const line = `{"level":"info","ts":1795445314.6130853,"logger":"webapi.audit","msg":"key used","key_id":"01JDX6J5B8Q4Z0KQ1T3N2M7R9S",` +
		`"key_name":"bench","owner":"user-00","service":"contracts","operation":"contracts.get","method":"GET",` +
		`"path":"/webapi/contracts/00000000-0000-4000-8000-000000000000","client_ip":"203.0.113.7","status":200,"duration":0.000123456}` + "\n"
	if got.String() != line {
		t.Errorf("entry\n %s\nwant\n %s", got.String(), line)
	}
}

// With any other format, and any logger, the audit log's entries are
// those of a zap field for each of their fields: complete and correct
// through zap's ObjectEncoder, and with webapi_json where the logger
// makes it write an entry through zap (context fields, a caller, a
// stack).
func TestAuditEveryFormat(t *testing.T) {
	s := func(v string) *string { return &v }
	prod := zap.NewProductionEncoderConfig()
	for _, c := range []struct {
		name string
		enc  func(t *testing.T) zapcore.Encoder
		opts []zap.Option
		with []zap.Field
	}{
		{name: "json", enc: func(t *testing.T) zapcore.Encoder { return caddyJSON(t, logging.LogEncoderConfig{}) }},
		{name: "json iso8601, ms, upper", enc: func(t *testing.T) zapcore.Encoder {
			return caddyJSON(t, logging.LogEncoderConfig{TimeFormat: "iso8601", DurationFormat: "ms", LevelFormat: "upper"})
		}},
		{name: "json keys and line ending", enc: func(t *testing.T) zapcore.Encoder {
			return caddyJSON(t, logging.LogEncoderConfig{MessageKey: s("message"), TimeKey: s("time"), NameKey: s("name"), LineEnding: s("\r\n")})
		}},
		{name: "json duration string", enc: func(t *testing.T) zapcore.Encoder {
			return caddyJSON(t, logging.LogEncoderConfig{DurationFormat: "string"})
		}},
		{name: "console", enc: func(t *testing.T) zapcore.Encoder {
			enc := &logging.ConsoleEncoder{}
			if err := enc.Provision(caddy.Context{}); err != nil {
				t.Fatal(err)
			}
			return enc
		}},
		{name: "zap's own JSON", enc: func(t *testing.T) zapcore.Encoder { return zapcore.NewJSONEncoder(prod) }},
		{name: "filter wrapping json", enc: func(t *testing.T) zapcore.Encoder { return filterEncoder(t, "json") }},
		{name: "filter wrapping webapi_json", enc: func(t *testing.T) zapcore.Encoder { return filterEncoder(t, "webapi_json") }},
		{name: "webapi_json, context field", enc: func(t *testing.T) zapcore.Encoder { return webapiJSON(t) },
			with: []zap.Field{zap.String("instance", "a\"b")}},
		{name: "webapi_json, caller", enc: func(t *testing.T) zapcore.Encoder { return webapiJSON(t) },
			opts: []zap.Option{zap.AddCaller()}},
		{name: "webapi_json, stack", enc: func(t *testing.T) zapcore.Encoder { return webapiJSON(t) },
			opts: []zap.Option{zap.AddStacktrace(zapcore.InfoLevel)}},
		{name: "webapi_json, sampled", enc: func(t *testing.T) zapcore.Encoder { return webapiJSON(t) },
			opts: []zap.Option{zap.WrapCore(func(c zapcore.Core) zapcore.Core {
				return zapcore.NewSamplerWithOptions(c, time.Hour, 10, 100)
			})}},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs := testRecords(4, 500)
			var got, want bytes.Buffer
			logger := func(w io.Writer) *zap.Logger {
				return auditLogger(c.enc(t), w).WithOptions(c.opts...).With(c.with...)
			}
			written(logger(&got), recs)
			asZapFields(logger(&want), recs)
			if c.name == "webapi_json, stack" || c.name == "webapi_json, caller" {
				// The stack and caller are the writer's, not the reference's.
				re := func(s string) string { return strings.Join(stripCallerStack(strings.Split(s, "\n")), "\n") }
				sameLines(t, re(got.String()), re(want.String()), c.name)
				return
			}
			sameLines(t, got.String(), want.String(), c.name)
		})
	}
	// Two logs take the entries, webapi_json and json: each as zap writes it.
	var fast, slow, want bytes.Buffer
	l := zap.New(zapcore.NewTee(zapcore.NewCore(webapiJSON(t), zapcore.AddSync(&fast), zapcore.InfoLevel),
		zapcore.NewCore(caddyJSON(t, logging.LogEncoderConfig{}), zapcore.AddSync(&slow), zapcore.InfoLevel))).Named("webapi.audit")
	recs := testRecords(5, 300)
	written(l, recs)
	asZapFields(auditLogger(caddyJSON(t, logging.LogEncoderConfig{}), &want), recs)
	sameLines(t, fast.String(), want.String(), "webapi_json beside json")
	sameLines(t, slow.String(), want.String(), "json beside webapi_json")
}

// stripCallerStack drops the caller and stacktrace keys of JSON lines.
func stripCallerStack(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			out[i] = l
			continue
		}
		delete(m, "caller")
		delete(m, "stacktrace")
		b, _ := json.Marshal(m)
		out[i] = string(b)
	}
	return out
}

// filterEncoder is Caddy's `format filter { wrap <wrap> client_ip
// ip_mask 16 32 path replace x }`.
func filterEncoder(t *testing.T, wrap string) zapcore.Encoder {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: t.Context()})
	t.Cleanup(cancel)
	var enc logging.FilterEncoder
	cfg := `{"wrap":{"format":"` + wrap + `"},"fields":{"client_ip":{"filter":"ip_mask","ipv4_cidr":16,"ipv6_cidr":32},` +
		`"path":{"filter":"replace","value":"x"}}}`
	if err := json.Unmarshal([]byte(cfg), &enc); err != nil {
		t.Fatal(err)
	}
	if err := enc.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	return enc
}

// With `format json`, each entry holds every field of its record, with
// its value: decoded, the line is the record.
func TestFormatJSONEntriesComplete(t *testing.T) {
	recs := testRecords(6, 0)
	var b bytes.Buffer
	written(auditLogger(caddyJSON(t, logging.LogEncoderConfig{}), &b), recs)
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("%d lines for %d records", len(lines), len(recs))
	}
	for i, rec := range recs {
		var got map[string]any
		d := json.NewDecoder(strings.NewReader(lines[i]))
		d.UseNumber()
		if err := d.Decode(&got); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, lines[i])
		}
		want := map[string]any{"level": "info", "logger": "webapi.audit", "msg": rec.Msg, "service": rec.Service,
			"operation": rec.Operation, "method": rec.Method, "path": redacted(rec.Path), "client_ip": clientIPString(rec.ClientIP),
			"status": strconv.Itoa(rec.Status)}
		if !rec.At.IsZero() {
			want["ts"] = strconv.FormatFloat(float64(rec.At.UnixNano())/1e9, 'f', -1, 64)
		}
		if rec.KeyID != "" {
			want["key_id"], want["key_name"], want["owner"] = rec.KeyID, rec.KeyName, rec.Owner
		}
		for k, v := range map[string]string{"consumer_id": rec.ConsumerID, "plan_id": rec.PlanID, "webhook_id": rec.WebhookID,
			"template_id": rec.TemplateID, "user": rec.User, "reason": rec.Reason} {
			if v != "" {
				want[k] = v
			}
		}
		if rec.Duration >= 0 {
			want["duration"] = strconv.FormatFloat(rec.Duration.Seconds(), 'f', -1, 64)
		}
		if rec.PreviousToken {
			want["previous_token"] = true
		}
		if rec.Refusals > 0 {
			want["refusals"] = strconv.FormatUint(rec.Refusals, 10)
		}
		if rec.ImportFormat != "" {
			want["imported"], want["format"] = strconv.Itoa(rec.Imported), rec.ImportFormat
			if rec.ImportFormat == "kong" {
				want["consumers"], want["plans"] = strconv.Itoa(rec.NewConsumers), strconv.Itoa(rec.NewPlans)
			}
		}
		for k, v := range got {
			if n, ok := v.(json.Number); ok {
				got[k] = n.String()
			}
		}
		for k := range want {
			if s, ok := want[k].(string); ok {
				want[k] = eachBadByte(s)
			}
		}
		if len(got) != len(want) {
			t.Errorf("line %d: keys %v, want %v", i+1, keys(got), keys(want))
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("line %d: %s = %#v, want %#v", i+1, k, got[k], w)
			}
		}
	}
}

// eachBadByte is s with each byte of invalid UTF-8 replaced by U+FFFD, as
// zap writes it.
func eachBadByte(s string) string {
	var b strings.Builder
	for _, r := range s { // utf8.RuneError for each byte of invalid UTF-8
		b.WriteRune(r)
	}
	return b.String()
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// redacted is a path as a log without Keys.RedactPath shows it.
func redacted(p string) string { return token.Redact(p) }

// An object whose fields are written with an object's ObjectEncoder.
type object struct{ n int }

func (o object) MarshalLogObject(e zapcore.ObjectEncoder) error {
	e.AddInt("n", o.n)
	e.AddString("s", "x\"y")
	return e.AddArray("a", zapcore.ArrayMarshalerFunc(func(a zapcore.ArrayEncoder) error {
		a.AppendString("\xff")
		a.AppendInt(o.n)
		return nil
	}))
}

// Entries other than the audit writer's are Caddy's `format json`'s, byte
// for byte: every kind of field, context fields, levels, callers, stacks,
// a record at another level or beside another field.
func TestWebapiJSONOrdinaryEntries(t *testing.T) {
	at := time.Date(2026, 11, 23, 14, 48, 34, 613085123, time.UTC)
	rec := &testRecords(7, 0)[2]
	for _, c := range []struct {
		name   string
		level  zapcore.Level
		at     time.Time
		msg    string
		fields []zap.Field
		opts   []zap.Option
		with   []zap.Field
		named  string
	}{
		{name: "no fields", level: zapcore.InfoLevel, at: at, msg: "started"},
		{name: "zero time", level: zapcore.InfoLevel, msg: "started"},
		{name: "strings", level: zapcore.WarnLevel, at: at, msg: "a \"b\"\n\xff",
			fields: []zap.Field{zap.String("k", "v\\\x00<&>"), zap.ByteString("bs", []byte("\xc3")), zap.Binary("bin", []byte{0, 1, 2}),
				zap.Strings("list", []string{"a", "\t"})}},
		{name: "numbers", level: zapcore.ErrorLevel, at: at, msg: "n",
			fields: []zap.Field{zap.Int("i", -3), zap.Uint64("u", 1<<63), zap.Float64("f", 1.5e-7), zap.Float32("f32", 3.25),
				zap.Bool("b", true), zap.Duration("d", 1500*time.Millisecond), zap.Time("t", at), zap.Complex128("c", 1+2i)}},
		{name: "error and reflected", level: zapcore.ErrorLevel, at: at, msg: "failed",
			fields: []zap.Field{zap.Error(errors.New("disk \"full\"")), zap.Any("m", map[string]int{"a": 1}), zap.Reflect("r", []int{1, 2})}},
		{name: "objects and namespaces", level: zapcore.InfoLevel, at: at, msg: "o",
			fields: []zap.Field{zap.Object("o", object{3}), zap.Inline(object{4}), zap.Namespace("ns"), zap.String("in", "ns")}},
		{name: "debug", level: zapcore.DebugLevel, at: at, msg: "d", fields: []zap.Field{zap.String("a", "b")}},
		{name: "context fields", level: zapcore.InfoLevel, at: at, msg: "c", with: []zap.Field{zap.String("instance", "x"), zap.Int("n", 1)},
			fields: []zap.Field{zap.String("a", "b")}},
		{name: "caller and stack", level: zapcore.ErrorLevel, at: at, msg: "s",
			opts: []zap.Option{zap.AddCaller(), zap.AddStacktrace(zapcore.ErrorLevel)}},
		{name: "long name", level: zapcore.InfoLevel, at: at, msg: "x", named: "http.log.access.\"log0\""},
		{name: "a record at warn", level: zapcore.WarnLevel, at: at, msg: "key used", fields: []zap.Field{zap.Inline(rec)}},
		{name: "a record beside another field", level: zapcore.InfoLevel, at: at, msg: "key used",
			fields: []zap.Field{zap.Inline(rec), zap.String("more", "x")}},
		{name: "a record as an object", level: zapcore.InfoLevel, at: at, msg: "key used", fields: []zap.Field{zap.Object("audit", rec)}},
		{name: "a record on its own", level: zapcore.InfoLevel, at: at, msg: "key used", fields: []zap.Field{zap.Inline(rec)}},
		{name: "a record with context", level: zapcore.InfoLevel, at: at, msg: "key used", fields: []zap.Field{zap.Inline(rec)},
			with: []zap.Field{zap.String("instance", "x")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := func(enc zapcore.Encoder) string {
				var b bytes.Buffer
				l := zap.New(zapcore.NewCore(enc, zapcore.AddSync(&b), zapcore.DebugLevel), c.opts...).Named(c.named).With(c.with...)
				if ce := l.Check(c.level, c.msg); ce != nil {
					ce.Time = c.at
					ce.Write(c.fields...)
				}
				return b.String()
			}
			want := log(caddyJSON(t, logging.LogEncoderConfig{}))
			got := log(webapiJSON(t))
			if c.name == "caller and stack" {
				// Two calls: their lines and stacks differ where they are made.
				g, w := stripCallerStack([]string{got}), stripCallerStack([]string{want})
				if g[0] != w[0] || !strings.Contains(got, `"caller":`) || !strings.Contains(got, `"stacktrace":`) {
					t.Fatalf("webapi_json:\n %s\njson:\n %s", got, want)
				}
				return
			}
			if got != want {
				t.Fatalf("webapi_json:\n %s\njson:\n %s", got, want)
			}
		})
	}
}
