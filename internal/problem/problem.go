// Package problem writes the one error body every part of keygate answers
// with: RFC 9457 application/problem+json with a stable machine-readable
// code and, for invalid input, every invalid field at once.
package problem

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"syscall"

	"github.com/keygate/keygate/internal/storage"
)

// The stable codes of docs/clients.md. Clients switch on these; never rename one.
const (
	CodeMissingKey          = "missing_key"
	CodeInvalidKey          = "invalid_key"
	CodeKeyNotValid         = "key_not_valid"
	CodeKeyDisabled         = "key_disabled"
	CodeIPNotAllowed        = "ip_not_allowed"
	CodeMissingPrivilege    = "missing_privilege"
	CodeForbidden           = "forbidden"
	CodeNotFound            = "not_found"
	CodeMethodNotAllowed    = "method_not_allowed"
	CodeInvalidRequest      = "invalid_request"
	CodeUnsupportedMedia    = "unsupported_media_type"
	CodePayloadTooLarge     = "payload_too_large"
	CodeConflict            = "conflict"
	CodeGone                = "gone"
	CodeRateLimited         = "rate_limited"
	CodeQuotaExceeded       = "quota_exceeded" // 429: the key's quota for the period is spent
	CodeInternal            = "internal"
	CodeInsufficientStorage = "insufficient_storage" // 507: the disk or quota is full; Retry-After
	CodeUnavailable         = "unavailable"          // 503: another storage failure; Retry-After
	CodeHostUnavailable     = "host_unavailable"     // 503: the issue tracker did not answer; Retry-After
	ContentType             = "application/problem+json"
	maxBodyBytes            = 1 << 20
	defaultInvalidFieldText = "is invalid"
)

const (
	// CodeIdempotencyKeyReused is the 422 of an Idempotency-Key sent
	// again with another request body (clients.md).
	CodeIdempotencyKeyReused = "idempotency_key_reused"
	// MaxBodyBytes bounds every JSON request body (413 beyond).
	MaxBodyBytes = maxBodyBytes
)

// FieldError names one invalid field or query parameter.
type FieldError struct {
	Field   string `json:"field"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Details is the problem body of docs/clients.md.
type Details struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Code   string       `json:"code"`
	Detail string       `json:"detail,omitempty"`
	Errors []FieldError `json:"errors,omitempty"`
	// ViolatedPolicies names the rate-limit policies (or "quota") that
	// refused a 429.
	ViolatedPolicies []string `json:"violatedPolicies,omitempty"`
	// RetryAfter, in seconds, is sent as the Retry-After header when
	// positive.
	RetryAfter int `json:"-"`
}

// Error lets a *Details travel as an error value through store and
// validation code up to the handler that writes it.
func (d *Details) Error() string { return d.Code + ": " + d.Detail }

// New makes a problem with the standard title for status.
func New(status int, code, detail string) *Details {
	return &Details{Type: "about:blank", Title: http.StatusText(status), Status: status, Code: code, Detail: detail}
}

// Invalid is the 400 for a request whose fields break the rules, listing all
// of them.
func Invalid(errs []FieldError) *Details {
	d := New(http.StatusBadRequest, CodeInvalidRequest, "")
	d.Errors = errs
	if len(errs) == 1 {
		d.Detail = "1 field is invalid"
	} else {
		d.Detail = strconv.Itoa(len(errs)) + " fields are invalid"
	}
	return d
}

// NotFound is the 404 every API answers for an unknown or unseen resource.
func NotFound(detail string) *Details { return New(http.StatusNotFound, CodeNotFound, detail) }

// HostRetryAfter is the Retry-After, in seconds, of an answer that waited
// for an issue tracker that did not answer.
const HostRetryAfter = 30

// HostUnavailable is the 503 for a request that needed the issue tracker
// when it did not answer, in time or at all.
func HostUnavailable(detail string) *Details {
	d := New(http.StatusServiceUnavailable, CodeHostUnavailable, detail)
	d.RetryAfter = HostRetryAfter
	return d
}

// Internal is the 500 that says nothing of the inside.
func Internal() *Details {
	return New(http.StatusInternalServerError, CodeInternal, "the server could not complete the request")
}

// storageRetryAfter is the Retry-After of a storage failure: long enough
// for an operator to free space, short enough for a client's retry to
// find the gateway recovered.
const storageRetryAfter = 30

// InsufficientStorage is the 507 for a write refused because the disk (or
// the quota) is full. Reads go on; the same write may succeed later.
func InsufficientStorage() *Details {
	d := New(http.StatusInsufficientStorage, CodeInsufficientStorage, "the server has no room to store this now; try again later")
	d.RetryAfter = storageRetryAfter
	return d
}

// Unavailable is the 503 for a write the storage failed for another
// reason (an I/O error, a read-only file system).
func Unavailable() *Details {
	d := New(http.StatusServiceUnavailable, CodeUnavailable, "the server cannot store this now; try again later")
	d.RetryAfter = storageRetryAfter
	return d
}

// FromError is the one mapping of an error to its problem: a problem is
// itself; a full disk or quota (ENOSPC, EDQUOT anywhere in the chain) is
// the 507; a database that cannot be reached (storage.ErrUnavailable)
// and any other failure of the operating system (an errno: EIO, EROFS,
// ...) are the 503; anything else is the 500. None of them says
// more than its code: the cause (paths, errno text) is for the log.
func FromError(err error) *Details {
	var d *Details
	if errors.As(err, &d) {
		return d
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return InsufficientStorage()
	}
	if errors.Is(err, storage.ErrUnavailable) {
		d := Unavailable()
		d.Detail = "the database cannot be reached now; try again later"
		return d
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return Unavailable()
	}
	return Internal()
}

// SecureHeaders sets the headers every body of keygate carries, page or
// JSON: no MIME sniffing, no framing (the header and the CSP directive,
// for old and new browsers), and no caching, since bodies hold personal
// data or tokens. Pages set a fuller Content-Security-Policy afterwards.
// A problem body sets them with SecureProblemHeaders.
func SecureHeaders(h http.Header) { secureHeaders(h, true) }

// SecureProblemHeaders sets SecureHeaders for a problem body of status,
// without Cache-Control on a 429: no cache may store a 429 whatever its
// headers say (RFC 6585, section 4), and an API client's flood of
// refusals is where a reply's headers cost most. With Caddy's Server,
// the rate limits' three and Content-Type, Cache-Control would be the
// key check's ninth header on a 429, the one that makes Go's header map
// and net/http's copy of it on WriteHeader each allocate a table instead
// of holding eight entries inline. A page keeps no-store on a 429: a
// browser's back-forward cache and history are no caches in that RFC's
// sense, and the page shows what its reader typed.
func SecureProblemHeaders(h http.Header, status int) {
	secureHeaders(h, status != http.StatusTooManyRequests)
}

func secureHeaders(h http.Header, noStore bool) {
	// One allocation for the values (h.Set makes one each); each value a
	// slice of its own capacity, so a later Add copies instead of writing
	// over the next.
	v := secureValues
	vs := v[:]
	h["X-Content-Type-Options"] = vs[0:1:1]
	h["X-Frame-Options"] = vs[1:2:2]
	h["Content-Security-Policy"] = vs[2:3:3]
	if noStore {
		h["Cache-Control"] = vs[3:4:4]
	} else {
		delete(h, "Cache-Control") // should a caller have set it first
	}
}

var secureValues = [4]string{"nosniff", "DENY", "default-src 'none'; frame-ancestors 'none'", "no-store"}

// Write sends d. Extra headers (Allow, WWW-Authenticate) are the caller's to set first.
func Write(w http.ResponseWriter, d *Details) {
	h := w.Header()
	SecureProblemHeaders(h, d.Status)
	h.Set("Content-Type", ContentType)
	if d.RetryAfter > 0 && h.Get("Retry-After") == "" {
		h.Set("Retry-After", strconv.Itoa(d.RetryAfter))
	}
	w.WriteHeader(d.Status)
	_ = json.NewEncoder(w).Encode(d)
}

// WriteError writes err as its problem (FromError).
func WriteError(w http.ResponseWriter, err error) {
	Write(w, FromError(err))
}

// Fields collects field errors in the order they are found, so a handler
// can check every rule and report all violations at once.
type Fields struct{ list []FieldError }

// Add records that field breaks a rule.
func (f *Fields) Add(field, code, message string) {
	if message == "" {
		message = field + " " + defaultInvalidFieldText
	}
	f.list = append(f.list, FieldError{Field: field, Code: code, Message: message})
}

// List returns the recorded errors.
func (f *Fields) List() []FieldError { return f.list }

// Err returns nil when nothing was recorded, else the 400 problem.
func (f *Fields) Err() error {
	if len(f.list) == 0 {
		return nil
	}
	return Invalid(f.list)
}

// IsNotFound reports whether err is a 404 problem.
func IsNotFound(err error) bool {
	var d *Details
	return errors.As(err, &d) && d.Status == http.StatusNotFound
}
