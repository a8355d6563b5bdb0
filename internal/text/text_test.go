package text

import (
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/problem"
)

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		s                  string
		ascii, runes, name bool
	}{
		{"abc", true, true, true},
		{"", false, false, false},
		{"   ", true, true, false},
		{"Zürich", false, true, true},
		{"a\tb", false, false, false},
		{"a\x7fb", false, false, false},
		{"\xff", false, false, false},
		{strings.Repeat("é", 255), false, true, true},
		{strings.Repeat("é", 256), false, false, false},
		{strings.Repeat("a", 256), false, false, false},
	} {
		if got := PrintableASCII(tc.s, 255); got != tc.ascii {
			t.Errorf("PrintableASCII(%q) = %v", tc.s, got)
		}
		if got := PrintableRunes(tc.s, 255); got != tc.runes {
			t.Errorf("PrintableRunes(%q) = %v", tc.s, got)
		}
		if got := Printable(tc.s, 255); got != tc.name {
			t.Errorf("Printable(%q) = %v", tc.s, got)
		}
	}
}

func TestEmail(t *testing.T) {
	for s, want := range map[string]bool{
		"a@example.com":                      true,
		"zoë@example.com":                    true,
		"Ann <a@example.com>":                false,
		"<a@example.com>":                    false,
		"a@example.com (work)":               false,
		"not an address":                     false,
		"":                                   false,
		strings.Repeat("a", 248) + "@ex.com": false,
		strings.Repeat("a", 247) + "@ex.com": true,
	} {
		if got := Email(s); got != want {
			t.Errorf("Email(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestCheckID(t *testing.T) {
	var f problem.Fields
	CheckID(&f, "a", "")
	CheckID(&f, "b", "Ü")
	CheckID(&f, "c", "PAGE-1")
	got := f.List()
	if len(got) != 2 || got[0].Field != "a" || got[0].Code != "required" || got[1].Field != "b" || got[1].Code != "invalid" {
		t.Fatalf("%+v", got)
	}
}
