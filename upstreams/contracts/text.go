package contracts

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/keygate/keygate/internal/problem"
)

// printableASCII reports whether s is 1 to max printable US-ASCII bytes.
func printableASCII(s string, max int) bool {
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

// printableText reports whether s is 1 to max printable Unicode characters
// and not only spaces.
func printableText(s string, max int) bool {
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

func checkASCIIID(f *problem.Fields, field, v string) {
	switch {
	case v == "":
		f.Add(field, "required", field+" is required")
	case !printableASCII(v, 255):
		f.Add(field, "invalid", field+" must be 1 to 255 printable US-ASCII characters")
	}
}
