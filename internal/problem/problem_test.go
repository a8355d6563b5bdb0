package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/keygate/keygate/internal/storage"
)

func TestDecodeJSON(t *testing.T) {
	type body struct {
		Name  string `json:"name"`
		Count int    `json:"count"`
	}
	tests := []struct {
		name, contentType, body string
		status                  int
		code                    string
		field                   string
	}{
		{"valid", "application/json", `{"name":"a","count":1}`, 0, "", ""},
		{"json with charset", "application/json; charset=utf-8", `{"name":"a"}`, 0, "", ""},
		{"problem+json suffix", "application/merge-patch+json", `{}`, 0, "", ""},
		{"no content type", "", `{}`, 415, CodeUnsupportedMedia, ""},
		{"form", "application/x-www-form-urlencoded", `name=a`, 415, CodeUnsupportedMedia, ""},
		{"empty", "application/json", ``, 400, CodeInvalidRequest, ""},
		{"malformed", "application/json", `{"name":`, 400, CodeInvalidRequest, ""},
		{"not an object", "application/json", `{"name" "a"}`, 400, CodeInvalidRequest, ""},
		{"two values", "application/json", `{} {}`, 400, CodeInvalidRequest, ""},
		{"unknown field", "application/json", `{"color":"red"}`, 400, CodeInvalidRequest, "color"},
		{"wrong type", "application/json", `{"count":"x"}`, 400, CodeInvalidRequest, "count"},
		{"an array", "application/json", `[]`, 400, CodeInvalidRequest, "(body)"},
		{"null", "application/json", ` null `, 400, CodeInvalidRequest, "(body)"},
		{"over 1 MiB", "application/json", `{"name":"` + strings.Repeat("a", 1<<20) + `"}`, 413, CodePayloadTooLarge, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			var v body
			err := DecodeJSON(httptest.NewRecorder(), r, &v)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			d, ok := err.(*Details)
			if !ok || d.Status != tc.status || d.Code != tc.code || d.Detail == "" {
				t.Fatalf("got %#v, want %d %s", err, tc.status, tc.code)
			}
			if tc.field != "" && (len(d.Errors) != 1 || d.Errors[0].Field != tc.field) {
				t.Fatalf("errors %+v, want field %s", d.Errors, tc.field)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	var f Fields
	if f.Err() != nil {
		t.Fatal("empty Fields is an error")
	}
	f.Add("signers[3].email", "required", "email is required when accessKind is email")
	f.Add("name", "invalid", "")
	w := httptest.NewRecorder()
	WriteError(w, f.Err())
	if w.Code != 400 || w.Header().Get("Content-Type") != ContentType || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %v", w.Code, w.Header())
	}
	var d Details
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	if d.Type != "about:blank" || d.Title != "Bad Request" || d.Status != 400 || d.Code != CodeInvalidRequest ||
		d.Detail != "2 fields are invalid" || len(d.Errors) != 2 || d.Errors[1].Message != "name is invalid" {
		t.Fatalf("%+v", d)
	}

	w = httptest.NewRecorder()
	WriteError(w, http.ErrServerClosed) // not a problem: a 500 that says nothing of it
	if w.Code != 500 || strings.Contains(w.Body.String(), "closed") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

// TestFromError: the one mapping of errors to problems. A full disk or
// quota is a 507, another failure of the operating system a 503, both
// with Retry-After; anything else a 500; none tells what the error says.
func TestFromError(t *testing.T) {
	wrap := func(errno syscall.Errno) error {
		return fmt.Errorf("committing: %w", &os.PathError{Op: "write", Path: "/srv/keygate/data/webapi.db", Err: errno})
	}
	tests := []struct {
		err        error
		status     int
		code       string
		retryAfter bool
	}{
		{wrap(syscall.ENOSPC), http.StatusInsufficientStorage, CodeInsufficientStorage, true},
		{wrap(syscall.EDQUOT), http.StatusInsufficientStorage, CodeInsufficientStorage, true},
		{wrap(syscall.EIO), http.StatusServiceUnavailable, CodeUnavailable, true},
		{wrap(syscall.EROFS), http.StatusServiceUnavailable, CodeUnavailable, true},
		{errors.Join(errors.New("postgres storage: connecting to /srv/keygate: refused"), storage.ErrUnavailable), http.StatusServiceUnavailable, CodeUnavailable, true},
		{errors.New("/srv/keygate/data/webapi.db: something"), http.StatusInternalServerError, CodeInternal, false},
		{fmt.Errorf("wrapped: %w", NotFound("no such thing")), http.StatusNotFound, CodeNotFound, false},
	}
	for _, tt := range tests {
		d := FromError(tt.err)
		if d.Status != tt.status || d.Code != tt.code {
			t.Errorf("FromError(%v) = %d %s, want %d %s", tt.err, d.Status, d.Code, tt.status, tt.code)
		}
		rec := httptest.NewRecorder()
		WriteError(rec, tt.err)
		if rec.Code != tt.status || rec.Header().Get("Content-Type") != ContentType {
			t.Errorf("WriteError(%v): %d %s", tt.err, rec.Code, rec.Header().Get("Content-Type"))
		}
		if got := rec.Header().Get("Retry-After") != ""; got != tt.retryAfter {
			t.Errorf("WriteError(%v): Retry-After %q", tt.err, rec.Header().Get("Retry-After"))
		}
		if body := rec.Body.String(); strings.Contains(body, "/srv") || strings.Contains(body, "no space") || strings.Contains(body, "input/output") {
			t.Errorf("WriteError(%v) tells of the inside: %s", tt.err, body)
		}
	}
}
