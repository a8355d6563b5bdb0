// Package text holds the character rules both APIs state (docs/clients.md) for identifiers,
// names and addresses ("printable US-ASCII", "printable Unicode", e-mail
// addresses), shared by every API so that they agree.
package text

import (
	"net/mail"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/problem"
)

// MaxEmailLen is the longest address SMTP carries (RFC 5321 path limit).
const MaxEmailLen = 254

// PrintableASCII reports whether s is 1 to max printable US-ASCII bytes.
// Index keys rely on it: such a value never holds a \x00 separator.
func PrintableASCII(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// PrintableRunes reports whether s is 1 to max printable Unicode
// characters (letters, marks, numbers, punctuation, symbols and the ASCII
// space).
func PrintableRunes(s string, max int) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// Printable is PrintableRunes and not only spaces: the rule for names.
func Printable(s string, max int) bool {
	return PrintableRunes(s, max) && strings.TrimSpace(s) != ""
}

// Email accepts a bare address that net/mail parses back to itself,
// refusing display names, angle brackets and comments: the stored value
// is what is mailed to.
func Email(s string) bool {
	if len(s) > MaxEmailLen {
		return false
	}
	a, err := mail.ParseAddress(s)
	return err == nil && a.Name == "" && a.Address == s
}

// CheckID records in f that field v breaks the identifier rule of both
// APIs: required, 1 to 255 printable US-ASCII characters.
func CheckID(f *problem.Fields, field, v string) {
	switch {
	case v == "":
		f.Add(field, "required", field+" is required")
	case !PrintableASCII(v, 255):
		f.Add(field, "invalid", field+" must be 1 to 255 printable US-ASCII characters")
	}
}

// HumanLayout is how people are shown a time: in the e-mails, on the
// signing pages and in the PDFs of a contract alike, with the seconds an
// audit trail needs ("25 November 2026, 15:34:05 UTC").
const HumanLayout = "2 January 2006, 15:04:05 UTC"

// HumanTime writes t in HumanLayout, in UTC.
func HumanTime(t time.Time) string { return t.UTC().Format(HumanLayout) }
