package traffic

import (
	"strconv"
)

// PolicyHeader is the RateLimit-Policy value of a holder's policies and
// quota (draft-ietf-httpapi-ratelimit-headers-10), each name after
// prefix; empty without any.
func PolicyHeader(prefix string, policies []RateLimit, q *Quota) string {
	var b []byte
	for _, p := range policies {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendItem(b, prefix, p.Name, ";q=", p.Limit, ";w=", p.WindowSeconds)
	}
	if q != nil {
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = appendItem(b, prefix, QuotaPolicy, ";q=", q.Limit, ";w=", q.Period.nominalSeconds())
	}
	return string(b)
}

// JoinHeader joins two lists of structured-field items.
func JoinHeader(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + ", " + b
}

// AppendRateLimit appends the RateLimit item of one policy.
func AppendRateLimit(b []byte, prefix, name string, r, t int64) []byte {
	return appendItem(b, prefix, name, ";r=", r, ";t=", t)
}

// appendItem appends a structured-field item: the policy's name as a
// string with two integer parameters.
func appendItem(b []byte, prefix, name, k1 string, v1 int64, k2 string, v2 int64) []byte {
	b = append(b, '"')
	b = append(b, prefix...)
	b = append(b, name...)
	b = append(b, '"')
	b = append(b, k1...)
	b = strconv.AppendInt(b, v1, 10)
	b = append(b, k2...)
	return strconv.AppendInt(b, v2, 10)
}
