// Package text holds the character rules the seeds state for identifiers
// and names ("printable US-ASCII", "printable Unicode"), shared by every API.
package text

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// PrintableASCII reports whether s is 1 to max printable US-ASCII bytes.
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

// Printable reports whether s is 1 to max printable Unicode characters
// (letters, marks, numbers, punctuation, symbols and the ASCII space) and
// not only spaces.
func Printable(s string, max int) bool {
	if s == "" || !utf8.ValidString(s) || utf8.RuneCountInString(s) > max {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return strings.TrimSpace(s) != ""
}
