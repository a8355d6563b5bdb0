package problem

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// TestDecodeJSONHostile feeds the shared decoder what encoding/json would
// accept or silently repair: every one must be a 4xx problem and leave the
// target as it was.
func TestDecodeJSONHostile(t *testing.T) {
	type inner struct {
		Email string `json:"email"`
	}
	type body struct {
		Name    string           `json:"name"`
		Signers []inner          `json:"signers"`
		Any     any              `json:"any"`
		Fields  map[string]inner `json:"fields"`
	}
	deep := strings.Repeat(`[`, MaxJSONDepth) + strings.Repeat(`]`, MaxJSONDepth)
	tooDeep := `{"any":` + strings.Repeat(`[`, MaxJSONDepth) + strings.Repeat(`]`, MaxJSONDepth) + `}`
	tests := []struct {
		name, body string
		status     int
		field      string
	}{
		{"duplicate key", `{"name":"a","name":"b"}`, 400, "name"},
		{"duplicate key, other case", `{"name":"a","NAME":"b"}`, 400, "NAME"},
		{"duplicate key in an array element", `{"signers":[{"email":"a@x.org"},{"email":"b@x.org","email":"c@x.org"}]}`, 400, "signers[1].email"},
		{"duplicate key in a nested object", `{"any":{"a":{"b":1,"b":2}}}`, 400, "any.a.b"},
		{"duplicate key in a map", `{"fields":{"summary":{},"summary":{}}}`, 400, "fields.summary"},
		{"duplicate field in a map's value, other case", `{"fields":{"summary":{"email":"a@x.org","Email":"b@x.org"}}}`, 400, "fields.summary.Email"},
		{"map keys differing in case are two keys", `{"fields":{"summary":{},"Summary":{}}}`, 0, ""},
		{"free-form keys differing in case are two keys", `{"any":{"a":1,"A":2}}`, 0, ""},
		{"same key in sibling objects is fine", `{"signers":[{"email":"a@x.org"},{"email":"b@x.org"}]}`, 0, ""},
		{"nesting at the limit", `{"any":` + deep[1:len(deep)-1] + `}`, 0, ""},
		{"nesting over the limit", tooDeep, 400, ""},
		{"nesting far over the limit", strings.Repeat(`[`, 100000), 400, ""},
		{"invalid UTF-8 in a value", "{\"name\":\"a\xff\xfeb\"}", 400, ""},
		{"invalid UTF-8 in a key", "{\"n\xc3\":\"a\"}", 400, ""},
		{"lone surrogate escape stays valid JSON", `{"name":"\ud800"}`, 0, ""},
		{"only whitespace", " \n\t", 400, ""},
		{"exactly 1 MiB of padding", `{"name":"a"}` + strings.Repeat(" ", maxBodyBytes-len(`{"name":"a"}`)), 0, ""},
		{"one byte over 1 MiB", `{"name":"a"}` + strings.Repeat(" ", maxBodyBytes-len(`{"name":"a"}`)+1), 413, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", strings.NewReader(tc.body))
			r.Header.Set("Content-Type", "application/json")
			var v body
			err := DecodeJSON(httptest.NewRecorder(), r, &v)
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			d, ok := err.(*Details)
			if !ok || d.Status != tc.status || d.Detail == "" {
				t.Fatalf("got %#v, want %d", err, tc.status)
			}
			want := CodeInvalidRequest
			if tc.status == 413 {
				want = CodePayloadTooLarge
			}
			if d.Code != want {
				t.Fatalf("code %s, want %s", d.Code, want)
			}
			if tc.field != "" && (len(d.Errors) != 1 || d.Errors[0].Field != tc.field || d.Errors[0].Code != "duplicate_key") {
				t.Fatalf("errors %+v, want duplicate_key at %s", d.Errors, tc.field)
			}
			if v.Name != "" || v.Signers != nil || v.Any != nil || v.Fields != nil {
				t.Fatalf("a refused body was decoded: %+v", v)
			}
		})
	}
}

// TestSecureHeaders: every problem body, whoever writes it, carries the
// headers that keep it from being sniffed, framed or cached; a 429 goes
// without Cache-Control, since no cache may store one anyway.
func TestSecureHeaders(t *testing.T) {
	tests := []struct {
		name         string
		d            *Details
		cacheControl []string
	}{
		{"404", NotFound("x"), []string{"no-store"}},
		{"400", Invalid([]FieldError{{Field: "name", Code: "required", Message: "required"}}), []string{"no-store"}},
		{"503", Unavailable(), []string{"no-store"}},
		{"429", New(http.StatusTooManyRequests, CodeRateLimited, "slow down"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Write(w, tc.d)
			for h, want := range map[string]string{
				"X-Content-Type-Options": "nosniff",
				"X-Frame-Options":        "DENY",
				"Content-Type":           ContentType,
			} {
				if got := w.Header().Get(h); got != want {
					t.Errorf("%s: %q, want %q", h, got, want)
				}
			}
			if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if got := w.Header()["Cache-Control"]; !slices.Equal(got, tc.cacheControl) {
				t.Errorf("Cache-Control %q, want %q", got, tc.cacheControl)
			}
		})
	}
}
