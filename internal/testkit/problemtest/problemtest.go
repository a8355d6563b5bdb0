// Package problemtest reads the problem details (RFC 9457) an error
// carries, for the tests of the packages that return them.
package problemtest

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/problem"
)

// Of returns the problem err is (or wraps), failing t when it is none.
func Of(t testing.TB, err error) *problem.Details {
	t.Helper()
	var d *problem.Details
	if !errors.As(err, &d) {
		t.Fatalf("error %v (%T) is not a problem", err, err)
	}
	return d
}

// FieldCodes lists d's field errors as "field:code", in d's order,
// failing t for one without a message: a client reads the message.
func FieldCodes(t testing.TB, d *problem.Details) []string {
	t.Helper()
	out := make([]string, len(d.Errors))
	for i, fe := range d.Errors {
		if fe.Message == "" {
			t.Errorf("field error %s has no message", fe.Field)
		}
		out[i] = fe.Field + ":" + fe.Code
	}
	return out
}

// InvalidRequest is FieldCodes of err, which must be a 400
// invalid_request problem.
func InvalidRequest(t testing.TB, err error) []string {
	t.Helper()
	d := Of(t, err)
	if d.Status != http.StatusBadRequest || d.Code != problem.CodeInvalidRequest {
		t.Fatalf("problem %d %s, want 400 invalid_request", d.Status, d.Code)
	}
	return FieldCodes(t, d)
}

// SecureHeaders fails t unless h, the headers of a reply of status, has
// what every reply of keygate carries: nosniff, DENY and a
// Content-Security-Policy with frame-ancestors 'none', and
// Cache-Control: no-store, which a 429 problem body goes without (no
// cache may store one; a page keeps it for the browser's back-forward
// cache).
func SecureHeaders(t testing.TB, status int, h http.Header) {
	t.Helper()
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" ||
		!strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("a %d without its security headers: %v", status, h)
	}
	cc, ok := h["Cache-Control"]
	switch {
	case status == http.StatusTooManyRequests && h.Get("Content-Type") == problem.ContentType:
		if ok {
			t.Errorf("a 429 problem with Cache-Control %q", cc)
		}
	case h.Get("Cache-Control") != "no-store":
		t.Errorf("a %d (%s) with Cache-Control %q, want no-store", status, h.Get("Content-Type"), cc)
	}
}
