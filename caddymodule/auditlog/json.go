package auditlog

import (
	"math"
	"math/bits"
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// jsonAudit appends audit entries as zap's JSON encoder writes them with
// Caddy's `format json` defaults (zap's production encoder config):
// level, ts in float Unix seconds, logger, msg, then the fields,
// durations in float seconds, strings escaped as zap escapes them.
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
	name, msg, keyID, keyName, owner, consumerID, planID, webhookID, templateID, user, service, operation, method string
}

// entry appends an info entry of logger name with message msg at time
// at (zero: none), whose fields are rec's.
func (e *jsonAudit) entry(name, msg string, at time.Time, rec *Record) {
	e.b = append(e.b, `{"level":"info"`...)
	if !at.IsZero() {
		e.b = append(e.b, `,"ts":`...)
		e.b = appendUnixSeconds(e.b, at.UnixNano())
	}
	who := auditWho{name, msg, rec.KeyID, rec.KeyName, rec.Owner, rec.ConsumerID, rec.PlanID, rec.WebhookID,
		rec.TemplateID, rec.User, rec.Service, rec.Operation, rec.Method}
	if len(e.who) > 0 && who == e.whoOf {
		e.b = append(e.b, e.who...)
	} else {
		start := len(e.b)
		if name != "" {
			e.str("logger", name)
		}
		e.str("msg", msg)
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
	frac := uint32(ns % 1e9)
	if frac == 0 {
		return b
	}
	var d [10]byte // the point and 9 digits, two at a time
	d[0], d[9] = '.', byte('0'+frac%10)
	frac /= 10
	for i := 8; i > 0; i -= 2 {
		r := frac % 100
		d[i-1], d[i] = digitPairs[2*r], digitPairs[2*r+1]
		frac /= 100
	}
	n := len(d)
	for d[n-1] == '0' {
		n--
	}
	return append(b, d[:n]...)
}

// digitPairs are the two digits of 0 to 99.
const digitPairs = "00010203040506070809101112131415161718192021222324252627282930313233343536373839" +
	"4041424344454647484950515253545556575859606162636465666768697071727374757677787980818283848586878889" +
	"90919293949596979899"

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

// pow10 are the powers of ten appendUnixSeconds may scale by.
var pow10 = [...]uint64{1, 10, 100, 1e3, 1e4, 1e5, 1e6, 1e7}

// appendUnixSeconds appends float64(ns)/1e9, an entry's time as zap
// writes it, as strconv's shortest 'f' form has it: the fewest decimals
// that read back as the same float64, the nearest such number where two
// are. strconv's general algorithm was a fifth of the writer's time; a
// time between 2004 and 2242 (the float64 in [2^30, 2^33): at most 7
// decimals, every product within 128 bits) is worked out here in
// integers, any other by strconv.
func appendUnixSeconds(b []byte, ns int64) []byte {
	x := float64(ns) / float64(time.Second)
	if !(x >= 1<<30 && x < 1<<33) {
		return strconv.AppendFloat(b, x, 'f', -1, 64)
	}
	fb := math.Float64bits(x)
	m := fb&(1<<52-1) | 1<<52           // x = m / 2^f
	f := uint(1075 - int(fb>>52&0x7ff)) // 20..22 here
	s := f + 2                          // x, and the ends of the values that read as x, in units of 2^-s:
	lo, hi := 4*m-2, 4*m+2              // half the gap to each neighbour
	if m == 1<<52 {
		lo = 4*m - 1 // the gap below a power of two is half as wide
	}
	inclusive := m%2 == 0 // a value halfway reads as the even neighbour
	mask := uint64(1)<<s - 1
	// between says which d have d/10^k between the ends, those with
	// d*2^s in [lo*10^k, hi*10^k]: none when dMin > dMax.
	between := func(p uint64) (dMin, dMax uint64) {
		h, l := bits.Mul64(lo, p)
		dMin = h<<(64-s) | l>>s
		if l&mask != 0 || !inclusive {
			dMin++ // rounded up; or the end itself, which does not read as x
		}
		h, l = bits.Mul64(hi, p)
		dMax = h<<(64-s) | l>>s
		if l&mask == 0 && !inclusive {
			dMax--
		}
		return dMin, dMax
	}
	// The gap between float64s here is over 1e-7, so 7 decimals always
	// do; a number with k decimals has k+1 too, so the fewest are found
	// counting down (most times need 7, some 6, few fewer).
	k := len(pow10) - 1
	dMin, dMax := between(pow10[k])
	if dMin > dMax {
		return strconv.AppendFloat(b, x, 'f', -1, 64) // not so: never here
	}
	for k > 0 {
		lo, hi := between(pow10[k-1])
		if lo > hi {
			break
		}
		k, dMin, dMax = k-1, lo, hi
	}
	// The nearest to x*10^k = m*10^k / 2^f, halfway to the even.
	p := pow10[k]
	h, l := bits.Mul64(m, p)
	d := h<<(64-f) | l>>f
	if rem, half := l&(1<<f-1), uint64(1)<<(f-1); rem > half || rem == half && d%2 == 1 {
		d++
	}
	d = min(max(d, dMin), dMax)
	b = strconv.AppendUint(b, d/p, 10)
	if k == 0 {
		return b
	}
	b = append(b, '.')
	frac := d % p
	var digits [7]byte
	for i := k - 1; i >= 0; i-- {
		digits[i] = byte('0' + frac%10)
		frac /= 10
	}
	return append(b, digits[:k]...)
}
