package caddymodule

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// auditTestRecords are entries of every shape, with the strings a log
// encoder must get right: quotes, backslashes, control bytes, non-ASCII,
// invalid UTF-8, a token in a path; then random ones from seed.
func auditTestRecords(seed uint64, random int) []auditRecord {
	at := time.Date(2026, 11, 23, 14, 48, 34, 613085123, time.UTC)
	ip4, ip6 := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("2001:db8::1")
	recs := []auditRecord{
		{at: at, msg: "key used", keyID: "01JDX6J5B8Q4Z0KQ1T3N2M7R9S", keyName: "bench", owner: "user-00", service: "contracts",
			operation: "contracts.get", method: "GET", path: "/webapi/contracts/00000000-0000-4000-8000-000000000000",
			clientIP: ip4, status: 200, duration: 123456 * time.Nanosecond},
		{at: at.Add(time.Millisecond), msg: "key refused", service: "share", operation: "none", method: "POST",
			path: "/webapi/share/kg_abcdefghijklmnopqrstuvwxyz0123456789ABCD/x", clientIP: ip6, status: 401, reason: "invalid_key", duration: 0},
		{at: at, msg: "key refused", keyID: "k", keyName: `a "quoted" \ name`, owner: "Zoë Ångström 中文 \u2028 😀", service: "contracts",
			operation: "contracts.create", method: "POST", path: "/webapi/contracts", clientIP: ip4, status: 429, reason: "rate_limited",
			duration: 3 * time.Millisecond, refusals: 1234, previousToken: true},
		{at: at, msg: "key created", keyID: "k2", keyName: "ctl\x00\x01\x1f\x7f\t\r\n", owner: "bad\xff\xc3utf8\xe2\x82", service: "contracts",
			operation: "create", method: "POST", path: "/webapi/keys", status: 201, duration: -1, user: "admin"},
		{at: at, msg: "webhook created", webhookID: "wh_1", service: "webhooks", operation: "create", method: "POST", path: "/webapi/webhooks",
			clientIP: netip.MustParseAddr("fe80::1%eth\"0"), status: 201, duration: -1},
		{at: at, msg: "template added", templateID: "PAGE-42", service: "contracts", operation: "template", method: "POST",
			path: "/webapi/templates", clientIP: netip.MustParseAddr("::ffff:192.0.2.1"), status: 201, duration: -1},
		{msg: "no time", service: "contracts", status: 500, duration: 90 * time.Minute},
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
		rec := auditRecord{
			at:  time.Unix(0, r.Int64N(4e18)),
			msg: str(), keyID: str(), keyName: str(), webhookID: str(), templateID: str(), user: str(), owner: str(),
			service: str(), operation: str(), method: str(), path: str(), reason: str(),
			status:        r.IntN(600),
			duration:      time.Duration(r.Int64N(1e12)) - 1e11,
			previousToken: r.IntN(2) == 0,
			refusals:      uint64(r.IntN(3)) * r.Uint64(),
		}
		if r.IntN(3) > 0 {
			var a [16]byte
			for j := range a {
				a[j] = byte(r.Uint32())
			}
			rec.clientIP = netip.AddrFrom16(a)
			if r.IntN(2) == 0 {
				rec.clientIP = rec.clientIP.Unmap()
			}
		}
		recs = append(recs, rec)
	}
	return recs
}

// jsonLogger is the audit logger as Caddy makes it for a log with
// `format json` (cfg) writing to w, without the include filter.
func jsonLogger(t testing.TB, cfg logging.LogEncoderConfig, w io.Writer) *zap.Logger {
	enc := &logging.JSONEncoder{LogEncoderConfig: cfg}
	if err := enc.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zapcore.InfoLevel)).Named("webapi").Named("audit")
}

// viaZap encodes recs through zap itself, as the audit log did before it
// wrote the default JSON format itself.
func viaZap(t testing.TB, cfg logging.LogEncoderConfig, recs []auditRecord) string {
	var b bytes.Buffer
	a := newAuditLog(jsonLogger(t, cfg, &b))
	a.direct = nil
	a.write(recs)
	return b.String()
}

// lineWriter keeps what it is given and checks each write ends a line.
type lineWriter struct {
	t      testing.TB
	b      bytes.Buffer
	writes int
}

func (w *lineWriter) Write(p []byte) (int, error) {
	if len(p) == 0 || p[len(p)-1] != '\n' {
		w.t.Errorf("a write of %d bytes does not end a line", len(p))
	}
	w.writes++
	return w.b.Write(p)
}

// The entries the audit log writes itself are byte for byte those zap
// writes, for every kind of entry and every string.
func TestAuditDirectMatchesZap(t *testing.T) {
	recs := auditTestRecords(1, 20000)
	want := viaZap(t, logging.LogEncoderConfig{}, recs)
	w := &lineWriter{t: t}
	a := newAuditLog(jsonLogger(t, logging.LogEncoderConfig{}, w))
	if a.direct == nil {
		t.Fatal("the default JSON format is written through zap")
	}
	a.write(recs)
	got := w.b.String()
	if got != want {
		wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
		for i := range min(len(wl), len(gl)) {
			if wl[i] != gl[i] {
				t.Fatalf("line %d differs:\n zap:    %s\n direct: %s", i+1, wl[i], gl[i])
			}
		}
		t.Fatalf("%d lines from zap, %d written directly", len(wl), len(gl))
	}
	if w.writes < 2 || w.writes > len(got)/directChunk+2 {
		t.Errorf("%d writes for %d bytes, want the batch cut at about %d bytes", w.writes, len(got), directChunk)
	}
	// One entry in full, as the README shows one.
	first := strings.SplitN(got, "\n", 2)[0]
	const line = `{"level":"info","ts":1795445314.6130853,"logger":"webapi.audit","msg":"key used","key_id":"01JDX6J5B8Q4Z0KQ1T3N2M7R9S",` +
		`"key_name":"bench","owner":"user-00","service":"contracts","operation":"contracts.get","method":"GET",` +
		`"path":"/webapi/contracts/00000000-0000-4000-8000-000000000000","client_ip":"203.0.113.7","status":200,"duration":0.000123456}`
	if first != line {
		t.Errorf("first line\n %s\nwant\n %s", first, line)
	}
}

// Only the default JSON format is written directly; the names of its
// defaults count as the default.
func TestAuditDirectOnlyDefaultJSON(t *testing.T) {
	s := func(v string) *string { return &v }
	for _, c := range []struct {
		name   string
		cfg    logging.LogEncoderConfig
		direct bool
	}{
		{"default", logging.LogEncoderConfig{}, true},
		{"defaults named", logging.LogEncoderConfig{TimeFormat: "unix_seconds_float", DurationFormat: "seconds", LevelFormat: "lower",
			MessageKey: s("msg"), LevelKey: s("level"), TimeKey: s("ts"), NameKey: s("logger"), LineEnding: s("\n"), TimeLocal: true}, true},
		{"time iso8601", logging.LogEncoderConfig{TimeFormat: "iso8601"}, false},
		{"time unix_milli_float", logging.LogEncoderConfig{TimeFormat: "unix_milli_float"}, false},
		{"duration ms", logging.LogEncoderConfig{DurationFormat: "ms"}, false},
		{"duration string", logging.LogEncoderConfig{DurationFormat: "string"}, false},
		{"level upper", logging.LogEncoderConfig{LevelFormat: "upper"}, false},
		{"message key", logging.LogEncoderConfig{MessageKey: s("message")}, false},
		{"time key", logging.LogEncoderConfig{TimeKey: s("time")}, false},
		{"line ending", logging.LogEncoderConfig{LineEnding: s("\r\n")}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs := auditTestRecords(2, 200)
			var b bytes.Buffer
			a := newAuditLog(jsonLogger(t, c.cfg, &b))
			if (a.direct != nil) != c.direct {
				t.Fatalf("written directly: %v, want %v", a.direct != nil, c.direct)
			}
			a.write(recs)
			if want := viaZap(t, c.cfg, recs); b.String() != want {
				t.Fatalf("output differs from zap's")
			}
		})
	}
	var b bytes.Buffer
	for name, l := range map[string]*zap.Logger{
		"caller":        jsonLogger(t, logging.LogEncoderConfig{}, &b).WithOptions(zap.AddCaller()),
		"stack":         jsonLogger(t, logging.LogEncoderConfig{}, &b).WithOptions(zap.AddStacktrace(zapcore.DebugLevel)),
		"context field": jsonLogger(t, logging.LogEncoderConfig{}, &b).With(zap.String("instance", "a")),
		"console": zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&b),
			zapcore.InfoLevel)),
		"zap's own JSON encoder": zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&b),
			zapcore.InfoLevel)),
		"sampled": jsonLogger(t, logging.LogEncoderConfig{}, &b).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(c, time.Second, 100, 100)
		})),
		"two destinations": jsonLogger(t, logging.LogEncoderConfig{}, &b).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
			return zapcore.NewTee(c, c)
		})),
		"hooked": jsonLogger(t, logging.LogEncoderConfig{}, &b).WithOptions(zap.Hooks(func(zapcore.Entry) error { return nil })),
		"nop":    zap.NewNop(),
	} {
		if newAuditLog(l).direct != nil {
			t.Errorf("%s: written directly", name)
		}
	}
	// A second destination that does not take the entries is no reason
	// to go through zap.
	l := jsonLogger(t, logging.LogEncoderConfig{}, &b).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, zapcore.NewCore(zapcore.NewConsoleEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(&b), zapcore.WarnLevel))
	}))
	if newAuditLog(l).direct == nil {
		t.Error("a second destination at WARN stops the direct write")
	}
}

// In Caddy, with the log blocks of the default Caddyfile, the audit log
// is written directly, and its file holds what zap would have written;
// with another format, or the entries in a second log too, it goes
// through zap.
func TestAuditDirectInCaddy(t *testing.T) {
	const auditJSON = "log webapi_audit {\n\t\toutput buffered_file %[1]s/audit.log\n\t\tformat json\n\t\tinclude webapi.audit\n\t}\n"
	const defaultLog = "log default {\n\t\toutput file %[1]s/caddy.log\n\t\tformat json\n\t\texclude webapi.audit\n\t}\n"
	for _, c := range []struct {
		name, logs string
		direct     bool
	}{
		{"default Caddyfile", auditJSON + defaultLog, true},
		{"json with level_format lower", strings.Replace(auditJSON, "format json", "format json {\n\t\t\tlevel_format lower\n\t\t}", 1) + defaultLog, true},
		{"iso8601 times", strings.Replace(auditJSON, "format json", "format json {\n\t\t\ttime_format iso8601\n\t\t}", 1) + defaultLog, false},
		{"console", strings.Replace(auditJSON, "format json", "format console", 1) + defaultLog, false},
		{"filter", strings.Replace(auditJSON, "format json", "format filter {\n\t\t\twrap json\n\t\t\tfields {\n\t\t\t\tclient_ip ip_mask 16 32\n\t\t\t}\n\t\t}", 1) + defaultLog, false},
		{"sampled", strings.Replace(auditJSON, "format json", "format json\n\t\tsampling {\n\t\t\tfirst 1000\n\t\t}", 1) + defaultLog, false},
		{"in two logs", auditJSON + strings.NewReplacer("webapi_audit", "audit_copy", "audit.log", "audit-copy.log").Replace(auditJSON) + defaultLog, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: TestAdminPort})
			// Before the directory goes: a config without the webapi app
			// closes its database and logs.
			t.Cleanup(func() { tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", TestAdminPort), "caddyfile") })
			tester.InitServer(fmt.Sprintf(`{
	admin localhost:%[2]d
	http_port %[3]d
	https_port %[4]d
	webapi {
		data_dir %[1]s
	}
	`+c.logs+`}
http://localhost:%[3]d {
	respond "ok"
}`, dir, TestAdminPort, TestSitePort, TestSitePort+363), "caddyfile")
			v, err := caddy.ActiveContext().App("webapi")
			if err != nil {
				t.Fatal(err)
			}
			a := v.(*App).audit
			if (a.direct != nil) != c.direct {
				t.Fatalf("written directly: %v, want %v", a.direct != nil, c.direct)
			}
			if !c.direct {
				return
			}
			recs := auditTestRecords(3, 500)
			for _, rec := range recs {
				a.record(rec)
			}
			want := viaZap(t, logging.LogEncoderConfig{}, recs)
			deadline := time.Now().Add(5 * time.Second)
			for {
				got, _ := os.ReadFile(filepath.Join(dir, "audit.log"))
				if string(got) == want {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("audit.log holds %d bytes, not the %d zap writes", len(got), len(want))
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// BenchmarkAuditWrite is the writer's work per entry, through zap and
// written directly, to a log like the default Caddyfile's.
func BenchmarkAuditWrite(b *testing.B) {
	recs := auditTestRecords(4, 0)[:1]
	batch := make([]auditRecord, 256)
	for i := range batch {
		batch[i] = recs[0]
	}
	for _, direct := range []bool{false, true} {
		b.Run(map[bool]string{false: "zap", true: "direct"}[direct], func(b *testing.B) {
			// As Caddy's: a tee of the audit log and the default log,
			// each behind its include or exclude.
			l := jsonLogger(b, logging.LogEncoderConfig{}, io.Discard).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
				return zapcore.NewTee(c, zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.WarnLevel))
			}))
			a := newAuditLog(l)
			if !direct {
				a.direct = nil
			} else if a.direct == nil {
				b.Fatal("not written directly")
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i += len(batch) {
				a.write(batch)
			}
		})
	}
}

// plainPrefix, eight bytes at a time, stops where a byte at a time
// stops: at each kind of byte JSON escapes or keygate must check, at
// every offset of a word and past it.
func TestPlainPrefix(t *testing.T) {
	plain := strings.Repeat("abcdefghijklmnopqrstuvwxyz-_/0123456789ABC", 2)
	for _, c := range []byte{0x00, 0x01, 0x1f, '"', '\\', 0x7f, 0x80, 0xc3, 0xff, 0x20, '!', '#', '[', ']', '~'} {
		for n := 0; n <= len(plain); n++ {
			for at := 0; at <= n; at++ {
				s := plain[:n]
				if at < n {
					s = s[:at] + string(c) + s[at+1:]
				}
				want := 0
				for want < len(s) && jsonPlain[s[want]] {
					want++
				}
				if got := plainPrefix(s); got != want {
					t.Fatalf("plainPrefix(%q) = %d, want %d", s, got, want)
				}
			}
		}
	}
}

// appendSeconds writes a duration as zap does, float64(d)/1e9 in
// strconv's shortest form, for every length of integer and fraction.
func TestAppendSeconds(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	check := func(ns int64) {
		want := strconv.AppendFloat(nil, float64(ns)/float64(time.Second), 'f', -1, 64)
		if got := appendSeconds(nil, ns); string(got) != string(want) {
			t.Fatalf("appendSeconds(%d) = %s, want %s", ns, got, want)
		}
	}
	for ns := int64(0); ns < 100000; ns++ {
		check(ns)
	}
	for p := int64(1); p < maxExactDuration; p *= 10 {
		for _, ns := range []int64{p - 1, p, p + 1, p * 9 / 7, maxExactDuration - p} {
			check(ns)
		}
	}
	for i := 0; i < 1000000; i++ {
		check(r.Int64N(maxExactDuration >> r.UintN(50)))
	}
}

// A flush writes over the records of an earlier batch rather than clear
// them, but keeps none past the end of its own batch, and none at all
// once the log is idle.
func TestAuditFlushLetsGo(t *testing.T) {
	a := newAuditLog(zap.NewNop())
	rec := func(n int) {
		for i := 0; i < n; i++ {
			a.record(auditRecord{msg: "key used", path: "/webapi/contracts/" + strconv.Itoa(i), status: 200})
		}
	}
	held := func(buf []auditRecord) int {
		n := 0
		for _, r := range buf[:cap(buf)] {
			if r != (auditRecord{}) {
				n++
			}
		}
		return n
	}
	rec(5)
	a.flush()
	rec(2)
	a.flush()
	rec(1)
	a.flush() // into the first buffer again: 1 of its 5 kept
	if got := held(a.spare); got != 1 {
		t.Errorf("the buffer just written holds %d records, want 1", got)
	}
	a.flush()
	a.flush()
	if got := held(a.pending) + held(a.spare); got != 0 {
		t.Errorf("an idle log holds %d records", got)
	}
}

// The writer redacts a path once for a run of entries with that path,
// and each entry still gets its redacted path.
func TestAuditRedactsRepeatedPathOnce(t *testing.T) {
	a := newAuditLog(zap.NewNop())
	calls := 0
	a.redactPath = func(p string) string { calls++; return "r" + p }
	paths := []string{"/a", "/a", "/b", "/a", "", "/a"}
	batch := make([]auditRecord, len(paths))
	for i, p := range paths {
		batch[i] = auditRecord{msg: "key used", path: p}
	}
	a.write(batch)
	for i, p := range paths {
		want := ""
		if p != "" {
			want = "r" + p
		}
		if batch[i].path != want {
			t.Errorf("entry %d: path %q, want %q", i, batch[i].path, want)
		}
	}
	if calls != 3 {
		t.Errorf("%d redactions, want 3 (one for each run of a path)", calls)
	}
}

// Runs of entries of one key and operation, which the writer encodes
// their first fields of once, are written as zap writes them too.
func TestAuditDirectRunsMatchZap(t *testing.T) {
	var recs []auditRecord
	for i, rec := range auditTestRecords(2, 300) {
		for j := 0; j < 1+i%3; j++ {
			r := rec
			r.path += "/" + strconv.Itoa(j)
			r.status += j
			r.duration += time.Duration(j)
			recs = append(recs, r)
		}
	}
	want := viaZap(t, logging.LogEncoderConfig{}, recs)
	w := &lineWriter{t: t}
	a := newAuditLog(jsonLogger(t, logging.LogEncoderConfig{}, w))
	if a.direct == nil {
		t.Fatal("the default JSON format is written through zap")
	}
	a.write(recs)
	if got := w.b.String(); got != want {
		wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
		for i := range min(len(wl), len(gl)) {
			if wl[i] != gl[i] {
				t.Fatalf("line %d differs:\n zap:    %s\n direct: %s", i+1, wl[i], gl[i])
			}
		}
		t.Fatalf("%d lines from zap, %d written directly", len(wl), len(gl))
	}
}
