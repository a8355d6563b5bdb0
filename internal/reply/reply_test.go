package reply

import (
	"math"
	"net/http/httptest"
	"testing"
)

func TestJSON(t *testing.T) {
	w := httptest.NewRecorder()
	JSON(w, 201, map[string]int{"a": 1})
	if w.Code != 201 || w.Body.String() != "{\"a\":1}\n" || w.Header().Get("Cache-Control") != "no-store" || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q %v", w.Code, w.Body, w.Header())
	}
	w = httptest.NewRecorder()
	JSON(w, 200, math.NaN()) // cannot be encoded
	if w.Code != 500 {
		t.Fatalf("unencodable value answered %d", w.Code)
	}
}

func TestWantsJSON(t *testing.T) {
	for accept, want := range map[string]bool{
		"":                                    false,
		"application/json":                    true,
		"application/problem+json":            true,
		"text/html,application/json;q=0.9":    false,
		"application/json, text/html":         true,
		"*/*":                                 false,
		"text/html,application/xhtml+xml,*/*": false,
		"garbage;;, application/json":         true,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", accept)
		if got := WantsJSON(r); got != want {
			t.Errorf("Accept %q: %v, want %v", accept, got, want)
		}
	}
}
