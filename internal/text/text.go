// Package text holds the character rules both APIs state (docs/clients.md) for identifiers,
// names and addresses ("printable US-ASCII", "printable Unicode", e-mail
// addresses), shared by every API so that they agree.
package text

import (
	"fmt"
	"net/mail"
	"strconv"
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

// MaxDescriptionLen is the most characters a description of a key,
// consumer, plan or webhook holds.
const MaxDescriptionLen = 4000

// Prose reports whether s, which may be empty, is at most max characters
// of text in lines: no control character but tab, line feed and CR LF,
// and no bidirectional embedding, override or isolate. Such text is shown
// in terminals and on pages, where an escape sequence, a lone carriage
// return or a bidi control would change what is shown around it.
func Prose(s string, max int) bool {
	if !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for i, r := range s {
		if !proseRune(s, i, r) {
			return false
		}
	}
	return true
}

// proseRune reports whether r, at byte i of s, may stand in Prose.
func proseRune(s string, i int, r rune) bool {
	switch {
	case r == '\t', r == '\n':
		return true
	case r == '\r':
		return strings.HasPrefix(s[i+1:], "\n")
	case unicode.IsControl(r), '\u202a' <= r && r <= '\u202e', '\u2066' <= r && r <= '\u2069':
		return false
	}
	return true
}

// EscapeProse is s with each character Prose refuses, and each byte that
// is not UTF-8, written as its Go escape (\x1b, \r, \u202e): for text
// stored before the rule held, printed where such a character would act
// (a terminal).
func EscapeProse(s string) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)):
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case !proseRune(s, i, r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// CheckDescription records in f that d breaks the rule of descriptions
// (Prose of at most MaxDescriptionLen characters), and reports whether
// it keeps it.
func CheckDescription(f *problem.Fields, d string) bool {
	if Prose(d, MaxDescriptionLen) {
		return true
	}
	f.Add("description", "invalid", fmt.Sprintf("description must be at most %d characters of text, with no control characters but tabs and line breaks", MaxDescriptionLen))
	return false
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
