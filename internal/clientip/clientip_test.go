package clientip

import (
	"net/http/httptest"
	"net/netip"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.9":           "203.0.113.9",
		"203.0.113.9:443":       "203.0.113.9",
		"[2001:db8::1]:443":     "2001:db8::1",
		"2001:db8::1":           "2001:db8::1",
		"::ffff:203.0.113.9":    "203.0.113.9",
		"[fe80::1%eth0]:80":     "fe80::1",
		"":                      "invalid IP",
		"not an address":        "invalid IP",
		"203.0.113.9, 10.0.0.1": "invalid IP",
	} {
		if got := Parse(in).String(); got != want {
			t.Errorf("Parse(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestFrom(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "198.51.100.7:5000"
	r.Header.Set("X-Forwarded-For", "203.0.113.1")
	if got := From(r).String(); got != "198.51.100.7" {
		t.Errorf("without a decided address: %s (X-Forwarded-For must never count)", got)
	}
	r = r.WithContext(With(r.Context(), netip.MustParseAddr("2001:db8::5")))
	if got := From(r).String(); got != "2001:db8::5" {
		t.Errorf("decided address: %s", got)
	}
}
