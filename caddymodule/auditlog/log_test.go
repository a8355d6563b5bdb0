package auditlog

import (
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// BenchmarkAuditWrite is the writer's work per entry, to a log like the
// default Caddyfile's: Caddy's `format json` (each field through zap)
// and `format webapi_json` (the record written by keygate's own code).
func BenchmarkAuditWrite(b *testing.B) {
	recs := testRecords(4, 0)[:1]
	batch := make([]Record, 256)
	for i := range batch {
		batch[i] = recs[0]
	}
	for _, format := range []string{"json", "webapi_json"} {
		b.Run(format, func(b *testing.B) {
			enc := caddyJSON(b, logging.LogEncoderConfig{})
			if format == "webapi_json" {
				enc = webapiJSON(b)
			}
			// As Caddy's: a tee of the audit log and the default log.
			l := auditLogger(enc, io.Discard).WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
				return zapcore.NewTee(c, zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(io.Discard), zapcore.WarnLevel))
			}))
			a := New(l)
			b.ReportAllocs()
			for i := 0; i < b.N; i += len(batch) {
				a.write(batch)
			}
		})
	}
}

// `format webapi_json` takes no argument and no option.
func TestEncoderCaddyfile(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{"webapi_json", true},
		{"webapi_json {\n}", true},
		{"webapi_json extra", false},
		{"webapi_json {\n\ttime_format iso8601\n}", false},
	} {
		var e Encoder
		err := e.UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.in))
		if (err == nil) != c.ok {
			t.Errorf("%q: error %v, want ok %v", c.in, err, c.ok)
		}
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
func TestFlushLetsGo(t *testing.T) {
	a := New(zap.NewNop())
	rec := func(n int) {
		for i := 0; i < n; i++ {
			a.Add(Record{Msg: "key used", Path: "/webapi/contracts/" + strconv.Itoa(i), Status: 200})
		}
	}
	held := func(buf []Record) int {
		n := 0
		for _, r := range buf[:cap(buf)] {
			if r != (Record{}) {
				n++
			}
		}
		return n
	}
	rec(5)
	a.Flush()
	rec(2)
	a.Flush()
	rec(1)
	a.Flush() // into the first buffer again: 1 of its 5 kept
	if got := held(a.spare); got != 1 {
		t.Errorf("the buffer just written holds %d records, want 1", got)
	}
	a.Flush()
	a.Flush()
	if got := held(a.pending) + held(a.spare); got != 0 {
		t.Errorf("an idle log holds %d records", got)
	}
}

// The writer redacts a path once for a run of entries with that path,
// and each entry still gets its redacted path.
func TestRedactsRepeatedPathOnce(t *testing.T) {
	a := New(zap.NewNop())
	calls := 0
	a.RedactPath = func(p string) string { calls++; return "r" + p }
	paths := []string{"/a", "/a", "/b", "/a", "", "/a"}
	batch := make([]Record, len(paths))
	for i, p := range paths {
		batch[i] = Record{Msg: "key used", Path: p}
	}
	a.write(batch)
	for i, p := range paths {
		want := ""
		if p != "" {
			want = "r" + p
		}
		if batch[i].Path != want {
			t.Errorf("entry %d: path %q, want %q", i, batch[i].Path, want)
		}
	}
	if calls != 3 {
		t.Errorf("%d redactions, want 3 (one for each run of a path)", calls)
	}
}

// Entries added after Close are written at once, and Close writes what
// was pending.
func TestAddAfterClose(t *testing.T) {
	var b strings.Builder
	a := New(auditLogger(webapiJSON(t), &b))
	a.Start()
	a.Add(Record{Msg: "before", Status: 200, Duration: -1})
	a.Close()
	if !strings.Contains(b.String(), `"msg":"before"`) {
		t.Fatalf("Close did not write the pending entry: %q", b.String())
	}
	a.Add(Record{Msg: "after", Status: 200, Duration: -1})
	if n := strings.Count(b.String(), "\n"); n != 2 || !strings.Contains(b.String(), `"msg":"after"`) {
		t.Fatalf("after Close: %q", b.String())
	}
}

// appendUnixSeconds writes an entry's time as zap does,
// float64(ns)/1e9 in strconv's shortest form: random times in its range
// and out of it, the ends of its range, powers of two, and the times
// halfway between two shortest forms (odd 256ths of a second).
func TestAppendUnixSeconds(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 17))
	check := func(ns int64) {
		want := strconv.AppendFloat(nil, float64(ns)/float64(time.Second), 'f', -1, 64)
		if got := appendUnixSeconds(nil, ns); string(got) != string(want) {
			t.Fatalf("appendUnixSeconds(%d) = %s, want %s", ns, got, want)
		}
	}
	const lo, hi = int64(1<<30) * 1e9, int64(1<<33) * 1e9
	for i := 0; i < 3000000; i++ {
		check(lo + r.Int64N(hi-lo))
	}
	for i := 0; i < 100000; i++ {
		check(r.Int64N(1 << 62))
		check(1795445314e9 + r.Int64N(1e9)) // about now
	}
	for p := int64(1 << 29); p <= 1<<34; p <<= 1 {
		for d := int64(-3000); d <= 3000; d++ {
			check(p*1e9 + d)
		}
	}
	for i := 0; i < 100000; i++ {
		s := lo/1e9 + r.Int64N(hi/1e9-lo/1e9)
		j := 2*r.Int64N(128) + 1
		for d := int64(-2); d <= 2; d++ {
			check(s*1e9 + j*3906250 + d)
		}
	}
	for _, ns := range []int64{0, 1, -1, 1e9, -1795445314613085123, 1<<63 - 1, -1 << 63} {
		check(ns)
	}
}
