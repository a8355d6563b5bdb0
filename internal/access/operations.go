package access

import (
	"net/http"
	"strings"
)

// Operation is one row of a service's operation table: the key check and
// the API handler read the same rows, so a route can never be served
// without being checked.
type Operation struct {
	// Name is the operation as audit entries and metrics label it,
	// for example "get" or "activity".
	Name string
	// Method is the HTTP method; GET rows also match HEAD.
	Method string
	// Pattern is a path whose {name} segments match any one non-empty segment.
	Pattern string
	// Privilege is what the key must hold.
	Privilege Privilege
}

// Table is a service's operations under its path prefix.
type Table struct {
	Service Service
	// Prefix is the path the service owns, for example "/webapi/contracts".
	Prefix     string
	Operations []Operation
}

// Match finds the operation for method and path. When the path matches
// some rows but none for method, op is nil and allow lists the methods that
// would match (for 405); when no row matches the path, both are empty (404).
func (t *Table) Match(method, path string) (op *Operation, allow []string) {
	if method == http.MethodHead {
		method = http.MethodGet
	}
	// A pattern matches only a path of as many segments: counting them
	// (a vectorized byte count) spares most rows the walk segment by
	// segment, which was a third of the key check's time.
	n := segments(path)
	for i := range t.Operations {
		o := &t.Operations[i]
		if segments(o.Pattern) != n || !MatchPattern(o.Pattern, path) {
			continue
		}
		if o.Method == method {
			return o, nil
		}
		allow = append(allow, o.Method)
		if o.Method == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	return nil, allow
}

// MatchPattern reports whether path matches pattern segment by segment,
// without allocating. A trailing slash is a different path.
func MatchPattern(pattern, path string) bool {
	for {
		ps, prest, pmore := cutSegment(pattern)
		s, rest, more := cutSegment(path)
		if len(ps) > 1 && ps[0] == '{' && ps[len(ps)-1] == '}' {
			if s == "" {
				return false
			}
		} else if ps != s {
			return false
		}
		if pmore != more {
			return false
		}
		if !pmore {
			return true
		}
		pattern, path = prest, rest
	}
}

// segments is how many segments MatchPattern walks in p.
func segments(p string) int {
	n := strings.Count(p, "/")
	if p == "" || p[0] != '/' {
		n++
	}
	return n
}

// cutSegment splits "/a/b" into "a" and "/b"; more is false at the last segment.
func cutSegment(p string) (seg, rest string, more bool) {
	if len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:], true
	}
	return p, "", false
}
