package caddymodule

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/caddyserver/caddy/v2/modules/logging"
	"github.com/keygate/keygate/internal/token"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// auditRecord is one audit entry as a request leaves it: plain values,
// no encoding and no allocation of its own. The writer turns it into a
// zap entry of the `webapi.audit` logger with the request's own time.
type auditRecord struct {
	at      time.Time
	msg     string
	keyID   string
	keyName string
	// consumerID and planID are the key's consumer and plan, or the
	// consumer or plan an administration action changed.
	consumerID string
	planID     string
	webhookID  string // administration of a webhook subscription
	templateID string // administration of a contract template
	user       string // the Web API Keys page's authenticated user
	owner      string
	service    string
	operation  string
	method     string
	path       string
	reason     string // refusals only
	clientIP   netip.Addr
	status     int
	duration   time.Duration // negative: not a request (administration)
	// previousToken marks a use of the token a roll replaced.
	previousToken bool
	// refusals is how many rate-limit or quota refusals the entry stands
	// for (0: not such a refusal).
	refusals uint64
	// imported and importFormat describe a key import: how many keys, from
	// which format (jsonl, kong); newConsumers and newPlans how many
	// consumers and plans it created (kong).
	imported               int
	importFormat           string
	newConsumers, newPlans int
}

const (
	// auditFlushInterval bounds how long an entry waits to be written.
	auditFlushInterval = 20 * time.Millisecond
	// auditMaxPending bounds the entries waiting. Only a log whose disk
	// stalls for seconds fills it; then entries are dropped (and counted
	// in the logs) rather than requests stalled on the disk.
	auditMaxPending = 1 << 17
)

// auditLog hands audit entries from requests to one writer goroutine in
// batches: a request appends a record under a mutex and goes on; the
// writer wakes every auditFlushInterval, swaps the batch out and writes
// it. Writing an entry therefore never blocks a request on disk, and a
// busy gateway costs no goroutine wake-up per entry.
type auditLog struct {
	logger *zap.Logger
	// redactPath, when set, replaces the tokens in a request's path
	// (Keys.RedactPath), on the writer goroutine; else keygate's tokens
	// are redacted by their form.
	redactPath func(string) string
	// direct is the one destination of the logger's audit entries when
	// the writer may encode them itself (see directAudit); nil: each
	// entry goes through zap.
	direct *directAudit

	mu      sync.Mutex
	pending []auditRecord
	spare   []auditRecord
	// pendingHeld and spareHeld are how many records at the start of
	// each buffer may still hold the strings of a written batch (see
	// flush).
	pendingHeld, spareHeld int
	stopped                bool

	dropped atomic.Uint64
	stop    chan struct{}
	done    chan struct{}
}

func newAuditLog(logger *zap.Logger) *auditLog {
	return &auditLog{logger: logger, direct: findDirectAudit(logger)}
}

// record queues rec. After stop (a request still finishing while its
// config goes away) it writes rec at once.
func (a *auditLog) record(rec auditRecord) {
	a.mu.Lock()
	if a.stopped {
		a.mu.Unlock()
		a.write([]auditRecord{rec})
		return
	}
	if len(a.pending) >= auditMaxPending {
		a.mu.Unlock()
		a.dropped.Add(1)
		return
	}
	a.pending = append(a.pending, rec)
	a.mu.Unlock()
}

// start runs the writer until stop.
func (a *auditLog) start() {
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(a.done)
		t := time.NewTicker(auditFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-t.C:
				a.flush()
			}
		}
	}()
}

// close stops the writer and writes what is pending.
func (a *auditLog) close() {
	if a.stop != nil {
		close(a.stop)
		<-a.done
		a.stop = nil
	}
	a.mu.Lock()
	a.stopped = true
	a.mu.Unlock()
	a.flush()
	// Down to the file: at a process's exit Caddy may not close the log's
	// writer, and a buffered one would keep the last entries.
	_ = a.logger.Sync()
	syncBufferedFiles()
}

// flush writes the pending batch.
func (a *auditLog) flush() {
	a.mu.Lock()
	batch, held := a.pending, a.pendingHeld
	a.pending, a.pendingHeld = a.spare[:0], a.spareHeld
	a.spare, a.spareHeld = nil, 0
	a.mu.Unlock()
	if n := a.dropped.Swap(0); n > 0 {
		a.logger.Warn("audit entries dropped: the audit log could not keep up", zap.Uint64("dropped", n))
	}
	a.write(batch)
	// Let go of the strings the records hold, but not by clearing every
	// batch (a busy log's records are written over by the next batch in
	// the buffer anyway): only those past the end of this batch, and all
	// once the log is idle, within two flushes of the last entry.
	if len(batch) == 0 {
		clear(batch[:held])
		held = 0
	} else if held > len(batch) {
		clear(batch[len(batch):held])
		held = len(batch)
	} else {
		held = len(batch)
	}
	a.mu.Lock()
	if a.spare == nil {
		a.spare, a.spareHeld = batch[:0], held
	}
	a.mu.Unlock()
}

func (a *auditLog) write(batch []auditRecord) {
	if a.redactPath != nil {
		// A path like the one before it is redacted as that one was: a
		// client's requests often follow each other on one resource, and
		// redacting hashes each segment that could be a token.
		var raw, redacted string
		for i := range batch {
			p := batch[i].path
			if p == "" {
				continue
			}
			if p != raw {
				raw, redacted = p, a.redactPath(p)
			}
			if redacted != raw { // else the record keeps its own, unwritten
				batch[i].path = redacted
			}
		}
	}
	if a.direct != nil {
		a.direct.write(batch)
		return
	}
	var z zapFields
	for i := range batch {
		rec := &batch[i]
		ce := a.logger.Check(zapcore.InfoLevel, rec.msg)
		if ce == nil {
			continue
		}
		ce.Time = rec.at
		z.fields = z.fields[:0]
		rec.encode(&z)
		ce.Write(z.fields...)
	}
}

// auditEncoder takes an entry's fields, in the order of the log line.
type auditEncoder interface {
	str(key, val string)
	ip(key string, ip netip.Addr)
	int(key string, val int)
	dur(key string, val time.Duration)
	flag(key string, val bool)
	uint(key string, val uint64)
}

// encode gives rec's fields to e: the one description of an audit
// entry's fields, their order and when each is present, for both ways of
// writing it.
func (rec *auditRecord) encode(e auditEncoder) {
	rec.encodeWho(e)
	rec.encodeWhat(e)
}

// encodeWho gives the fields that say who acted on what: encode's first
// part, the same for a run of one key's requests to one operation.
func (rec *auditRecord) encodeWho(e auditEncoder) {
	if rec.keyID != "" { // a refusal before the key is known has none
		e.str("key_id", rec.keyID)
		e.str("key_name", rec.keyName)
		e.str("owner", rec.owner)
	}
	if rec.consumerID != "" {
		e.str("consumer_id", rec.consumerID)
	}
	if rec.planID != "" {
		e.str("plan_id", rec.planID)
	}
	if rec.webhookID != "" {
		e.str("webhook_id", rec.webhookID)
	}
	if rec.templateID != "" {
		e.str("template_id", rec.templateID)
	}
	if rec.user != "" {
		e.str("user", rec.user)
	}
	e.str("service", rec.service)
	e.str("operation", rec.operation)
	e.str("method", rec.method)
}

// encodeWhat gives the fields of the request itself: encode's second part.
func (rec *auditRecord) encodeWhat(e auditEncoder) {
	e.str("path", token.Redact(rec.path)) // a token pasted into a path stays out of the log
	e.ip("client_ip", rec.clientIP)
	e.int("status", rec.status)
	if rec.reason != "" {
		e.str("reason", rec.reason)
	}
	if rec.duration >= 0 {
		e.dur("duration", rec.duration)
	}
	if rec.previousToken {
		e.flag("previous_token", true)
	}
	if rec.refusals > 0 {
		e.uint("refusals", rec.refusals)
	}
	if rec.importFormat != "" {
		e.int("imported", rec.imported)
		e.str("format", rec.importFormat)
		if rec.importFormat == "kong" {
			e.int("consumers", rec.newConsumers)
			e.int("plans", rec.newPlans)
		}
	}
}

// zapFields collects an entry's fields as zap fields.
type zapFields struct{ fields []zap.Field }

func (z *zapFields) str(k, v string) { z.fields = append(z.fields, zap.String(k, v)) }
func (z *zapFields) ip(k string, ip netip.Addr) {
	z.fields = append(z.fields, zap.String(k, clientIPString(ip)))
}
func (z *zapFields) int(k string, v int)           { z.fields = append(z.fields, zap.Int(k, v)) }
func (z *zapFields) dur(k string, v time.Duration) { z.fields = append(z.fields, zap.Duration(k, v)) }
func (z *zapFields) flag(k string, v bool)         { z.fields = append(z.fields, zap.Bool(k, v)) }
func (z *zapFields) uint(k string, v uint64)       { z.fields = append(z.fields, zap.Uint64(k, v)) }

func clientIPString(ip netip.Addr) string {
	if !ip.IsValid() {
		return ""
	}
	return ip.String()
}

// directAudit writes audit entries without zap's per-entry work (a
// Check through every core of the logger, a field per value, an encoder
// clone, a write per entry): the writer encodes a batch itself, byte for
// byte as zap's JSON encoder would in Caddy's default JSON format, and
// hands it to the log's writer in a few large writes. It is used only
// where the result is the same: when the logger sends its info entries
// to exactly one core, a Caddy log whose encoder is `format json` with
// nothing changed (keys, time and duration formats, level format, line
// ending) and whose logger adds no caller or stack; any other set-up (a
// console or filter encoder, another time format, sampling, a second log
// that takes the entries, a zap whose insides are not what findDirectAudit
// knows) writes through zap as before.
type directAudit struct {
	out zapcore.WriteSyncer
	// name is the logger name of the entries, as zap writes it.
	name string
	// errOut receives write errors, as zap reports them.
	errOut zapcore.WriteSyncer

	mu  sync.Mutex // a request after stop writes beside the writer
	buf []byte
	who []byte // jsonAudit.who's buffer
}

// directChunk is about how much directAudit hands to the writer at
// once, ending at a line: a rolling file writer refuses one write larger
// than its roll size and rolls between writes, so a batch is cut.
const directChunk = 64 << 10

func (d *directAudit) write(batch []auditRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := &jsonAudit{b: d.buf[:0], who: d.who[:0]}
	first := 0
	for i := range batch {
		e.entry(d.name, &batch[i])
		if len(e.b) >= directChunk || i == len(batch)-1 {
			if _, err := d.out.Write(e.b); err != nil && d.errOut != nil {
				// As zap's CheckedEntry.Write reports a failed write.
				fmt.Fprintf(d.errOut, "%v write error: %v\n", batch[first].at, err)
				_ = d.errOut.Sync()
			}
			e.b, first = e.b[:0], i+1
		}
	}
	if cap(e.b) <= 4*directChunk {
		d.buf = e.b[:0]
	}
	d.who = e.who[:0]
}

// jsonAudit appends audit entries as zap's JSON encoder writes them with
// zap's production encoder config (Caddy's `format json`): level, ts in
// float Unix seconds, logger, msg, then the fields, durations in float
// seconds, strings escaped as zap escapes them.
type jsonAudit struct {
	b []byte
	// who is the encoded logger, msg and encodeWho fields of the last
	// entry, and whoOf what they were encoded from: the next entry with
	// the same copies them rather than escape each string again.
	who   []byte
	whoOf auditWho
}

// auditWho are the strings of an entry's logger, msg and encodeWho fields.
type auditWho struct {
	name, msg, keyID, keyName, owner, webhookID, templateID, user, service, operation, method string
}

func (e *jsonAudit) entry(name string, rec *auditRecord) {
	e.b = append(e.b, `{"level":"info"`...)
	if !rec.at.IsZero() {
		e.b = append(e.b, `,"ts":`...)
		e.b = strconv.AppendFloat(e.b, float64(rec.at.UnixNano())/float64(time.Second), 'f', -1, 64)
	}
	who := auditWho{name, rec.msg, rec.keyID, rec.keyName, rec.owner, rec.webhookID, rec.templateID, rec.user,
		rec.service, rec.operation, rec.method}
	if len(e.who) > 0 && who == e.whoOf {
		e.b = append(e.b, e.who...)
	} else {
		start := len(e.b)
		if name != "" {
			e.str("logger", name)
		}
		e.str("msg", rec.msg)
		rec.encodeWho(e)
		e.who, e.whoOf = append(e.who[:0], e.b[start:]...), who
	}
	rec.encodeWhat(e)
	e.b = append(e.b, "}\n"...)
}

// key appends a field's key. The keys are encode's own, none of them
// with a byte JSON escapes.
func (e *jsonAudit) key(k string) {
	e.b = append(e.b, ',', '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

func (e *jsonAudit) str(k, v string) {
	e.key(k)
	e.b = append(e.b, '"')
	e.b = appendJSONEscaped(e.b, v)
	e.b = append(e.b, '"')
}

func (e *jsonAudit) ip(k string, ip netip.Addr) {
	if ip.Zone() != "" { // rare, and the one part that may need escaping
		e.str(k, clientIPString(ip))
		return
	}
	e.key(k)
	e.b = append(e.b, '"')
	if ip.IsValid() {
		e.b = ip.AppendTo(e.b) // digits, a-f, dots and colons
	}
	e.b = append(e.b, '"')
}

func (e *jsonAudit) int(k string, v int) {
	e.key(k)
	e.b = strconv.AppendInt(e.b, int64(v), 10)
}

func (e *jsonAudit) dur(k string, v time.Duration) {
	e.key(k)
	if v < 0 || v >= maxExactDuration {
		e.b = strconv.AppendFloat(e.b, float64(v)/float64(time.Second), 'f', -1, 64)
		return
	}
	e.b = appendSeconds(e.b, int64(v))
}

// maxExactDuration bounds the durations whose seconds appendSeconds
// writes: of at most 15 digits, as a float64 keeps every decimal (a
// float64 holds 15 digits exactly), so the shortest form of the quotient
// zap writes is those digits themselves.
const maxExactDuration = 1e15

// appendSeconds appends ns nanoseconds (0 <= ns < maxExactDuration) in
// seconds as strconv's shortest 'f' form of float64(ns)/1e9 has them:
// integer digits, then the nanoseconds without their trailing zeros.
func appendSeconds(b []byte, ns int64) []byte {
	b = strconv.AppendInt(b, ns/1e9, 10)
	frac := ns % 1e9
	if frac == 0 {
		return b
	}
	digits := 9
	for frac%10 == 0 {
		frac /= 10
		digits--
	}
	b = append(b, '.')
	var d [9]byte
	for i := digits - 1; i >= 0; i-- {
		d[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, d[:digits]...)
}

func (e *jsonAudit) flag(k string, v bool) {
	e.key(k)
	e.b = strconv.AppendBool(e.b, v)
}

func (e *jsonAudit) uint(k string, v uint64) {
	e.key(k)
	e.b = strconv.AppendUint(e.b, v, 10)
}

// appendJSONEscaped appends s escaped as zap's JSON encoder escapes a
// string (zapcore's safeAppendStringLike): \ and " with a backslash,
// \n \r \t as such, other bytes below 0x20 as \u00xx, each byte of
// invalid UTF-8 as \ufffd, everything else as it is (no HTML escaping).
func appendJSONEscaped(b []byte, s string) []byte {
	i := plainPrefix(s)
	if i == len(s) { // the usual case: printable ASCII, no quote or backslash
		return append(b, s...)
	}
	last := 0
	for i < len(s) {
		c := s[i]
		if c >= utf8.RuneSelf {
			if r, size := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			b = append(b, s[last:i]...)
			b = append(b, `\ufffd`...)
			i++
			last = i
			continue
		}
		if c >= 0x20 && c != '\\' && c != '"' {
			i++
			continue
		}
		b = append(b, s[last:i]...)
		switch c {
		case '\\', '"':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		last = i
	}
	return append(b, s[last:]...)
}

// plainPrefix is the length of the start of s that JSON has as it is,
// eight bytes at a time while they are all plain: the strings of an
// entry (ids, names, paths) mostly are, and a byte at a time was most of
// the writer's work on them.
func plainPrefix(s string) int {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	i := 0
	for ; i+8 <= len(s); i += 8 {
		w := s[i : i+8] // one bounds check, one load
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		q, bs := x^(ones*'"'), x^(ones*'\\')
		// The high bit of a byte is set by x for non-ASCII, and by each
		// subtraction only where a byte is below 0x20, or is the quote or
		// the backslash (zero after the xor): exact as a test of the word.
		if (x|(x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0 {
			break
		}
	}
	for i < len(s) && jsonPlain[s[i]] {
		i++
	}
	return i
}

// jsonPlain marks the bytes JSON has as they are: printable ASCII but
// for the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// findDirectAudit returns where the writer may write logger's audit
// entries itself, or nil to write through zap. It asks the logger for an
// info entry (no entry is written) to learn its name and whether it adds
// a caller or stack, then looks through the logger's core for the one
// that takes the entry. Caddy's and zap's types are looked at by name
// and their unexported fields through reflect: anything not exactly as
// expected (another version of either, another core) means zap.
func findDirectAudit(logger *zap.Logger) *directAudit {
	ce := logger.Check(zapcore.InfoLevel, "")
	if ce == nil || ce.Caller.Defined || ce.Stack != "" {
		return nil
	}
	var sinks []zapcore.Core
	if !auditSinks(logger.Core(), ce.Entry, &sinks) || len(sinks) != 1 {
		return nil
	}
	out, ok := defaultJSONCore(sinks[0])
	if !ok {
		return nil
	}
	return &directAudit{out: out, name: ce.LoggerName, errOut: ce.ErrorOutput}
}

var (
	coreType        = reflect.TypeFor[zapcore.Core]()
	encoderType     = reflect.TypeFor[zapcore.Encoder]()
	writeSyncerType = reflect.TypeFor[zapcore.WriteSyncer]()
)

// auditSinks adds to sinks the innermost cores of c that take ent; false
// when c holds a core it does not know.
func auditSinks(c zapcore.Core, ent zapcore.Entry, sinks *[]zapcore.Core) bool {
	if c.Check(ent, nil) == nil {
		return true // takes none
	}
	v := reflect.ValueOf(c)
	switch v.Type().String() {
	case "zapcore.multiCore": // zapcore.NewTee
		if v.Kind() != reflect.Slice || v.Type().Elem() != coreType {
			return false
		}
		for i := 0; i < v.Len(); i++ {
			inner, ok := v.Index(i).Interface().(zapcore.Core)
			if !ok || !auditSinks(inner, ent, sinks) {
				return false
			}
		}
		return true
	case "*caddy.filteringCore": // a log's include and exclude; it took ent
		f := v.Elem().FieldByName("Core")
		if !f.IsValid() || f.Type() != coreType || !f.CanInterface() {
			return false
		}
		inner, ok := f.Interface().(zapcore.Core)
		return ok && inner != nil && auditSinks(inner, ent, sinks)
	case "*zapcore.ioCore":
		*sinks = append(*sinks, c)
		return true
	}
	return false
}

// defaultJSONCore returns the writer of c, a zapcore.ioCore, when its
// encoder is Caddy's JSON encoder in the default format.
func defaultJSONCore(c zapcore.Core) (zapcore.WriteSyncer, bool) {
	v := reflect.ValueOf(c)
	if v.Kind() != reflect.Pointer || v.Type().String() != "*zapcore.ioCore" || v.IsNil() {
		return nil, false
	}
	s := v.Elem()
	encField, outField := s.FieldByName("enc"), s.FieldByName("out")
	if !encField.IsValid() || !outField.IsValid() || encField.Type() != encoderType || outField.Type() != writeSyncerType {
		return nil, false
	}
	enc := *(*zapcore.Encoder)(unsafe.Pointer(encField.UnsafeAddr()))
	out := *(*zapcore.WriteSyncer)(unsafe.Pointer(outField.UnsafeAddr()))
	je, ok := enc.(*logging.JSONEncoder)
	if !ok || je == nil || je.Encoder == nil || out == nil || !defaultEncoderConfig(je.LogEncoderConfig) {
		return nil, false
	}
	return out, true
}

// defaultEncoderConfig says whether cfg is Caddy's JSON format as
// jsonAudit writes it: every setting absent or its default's own name.
// A setting this build does not know (a newer Caddy's) is not.
func defaultEncoderConfig(cfg logging.LogEncoderConfig) bool {
	unset := func(p **string, def string) {
		if *p != nil && **p == def {
			*p = nil
		}
	}
	unset(&cfg.MessageKey, "msg")
	unset(&cfg.LevelKey, "level")
	unset(&cfg.TimeKey, "ts")
	unset(&cfg.NameKey, "logger")
	unset(&cfg.LineEnding, "\n")
	// No entry has a caller or a stack: their keys are not written.
	cfg.CallerKey, cfg.StacktraceKey = nil, nil
	if cfg.TimeFormat == "unix_seconds_float" {
		cfg.TimeFormat = ""
	}
	if cfg.TimeFormat == "" {
		cfg.TimeLocal = false // a Unix time has no zone
	}
	switch cfg.DurationFormat {
	case "s", "second", "seconds":
		cfg.DurationFormat = ""
	}
	if cfg.LevelFormat == "lower" {
		cfg.LevelFormat = ""
	}
	return reflect.ValueOf(cfg).IsZero()
}
