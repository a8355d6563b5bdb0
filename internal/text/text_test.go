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

func TestProse(t *testing.T) {
	tests := []struct {
		name string
		s    string
		want bool
	}{
		{"empty", "", true},
		{"lines and tabs", "first line\n\tsecond line\r\nthird", true},
		{"letters of any script, emoji joined", "Zoë, 東京, 👨‍👩‍👧, non\u00a0breaking", true},
		{"at the limit", strings.Repeat("é", 30), true},
		{"over the limit", strings.Repeat("é", 31), false},
		{"escape sequence", "before\x1b[31mRED\x1b[0m", false},
		{"bell", "title\x07", false},
		{"lone carriage return", "shown\roverwritten", false},
		{"carriage return at the end", "line\r", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7fb", false},
		{"C1 control", "a\u0085b", false},
		{"right-to-left override", "invoice\u202eexe.pdf", false},
		{"isolate", "a\u2067b\u2069", false},
		{"invalid UTF-8", "a\xffb", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Prose(tt.s, 30); got != tt.want {
				t.Errorf("Prose(%q, 30) = %v, want %v", tt.s, got, tt.want)
			}
		})
	}
}

func TestEscapeProse(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain\n\ttext\r\nand Zoë", "plain\n\ttext\r\nand Zoë"},
		{"before\x1b[31mRED\x1b]0;title\x07", `before\x1b[31mRED\x1b]0;title\a`},
		{"shown\roverwritten", `shown\roverwritten`},
		{"invoice\u202eexe.pdf", `invoice\u202eexe.pdf`},
		{"bad\xffbyte", `bad\xffbyte`},
	}
	for _, tt := range tests {
		if got := EscapeProse(tt.in); got != tt.want {
			t.Errorf("EscapeProse(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if got := EscapeProse(tt.in); !Prose(got, len(got)) {
			t.Errorf("EscapeProse(%q) = %q, which Prose refuses", tt.in, got)
		}
	}
}
