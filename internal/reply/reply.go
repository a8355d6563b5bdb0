// Package reply writes the successful replies of the APIs and pages, the
// counterpart of package problem for errors.
package reply

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/keygate/keygate/internal/problem"
)

// JSON sends v as the body. Replies carry personal data (signers,
// share recipients), so no cache may keep them. v is encoded before the
// status is sent, so a value that cannot be encoded becomes a 500.
func JSON(w http.ResponseWriter, status int, v any) {
	body, err := Encode(v)
	if err != nil {
		problem.Write(w, problem.Internal())
		return
	}
	Bytes(w, status, body)
}

// Encode is the body JSON sends for v, so that a caller that must keep
// the reply (an idempotent create) stores exactly what it sends.
func Encode(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(body, '\n'), nil
}

// Bytes sends body, made by Encode, as JSON sends it.
func Bytes(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	problem.SecureHeaders(h)
	h.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WantsJSON reports whether the client asked for JSON: an Accept that
// names a JSON type before any HTML type. Pages for people answer HTML
// otherwise.
func WantsJSON(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch {
		case problem.IsJSON(mt):
			return true
		case mt == "text/html" || mt == "application/xhtml+xml":
			return false
		}
	}
	return false
}
