package contracts

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"

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
	return printableRunes(s, max) && strings.TrimSpace(s) != ""
}

// printableRunes reports whether s is 1 to max printable Unicode characters
// (letters, marks, numbers, punctuation, symbols and the ASCII space).
func printableRunes(s string, max int) bool {
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

func checkASCIIID(f *problem.Fields, field, v string) {
	switch {
	case v == "":
		f.Add(field, "required", field+" is required")
	case !printableASCII(v, 255):
		f.Add(field, "invalid", field+" must be 1 to 255 printable US-ASCII characters")
	}
}

// fold returns s with Unicode full case folding applied, the form in which
// substring search compares text, so that "STRASSE" finds "Straße".
func fold(s string) string {
	return cases.Fold().String(s)
}

// searchText is the folded text a substring search looks in: the name, then
// each signer's full name and e-mail, separated by \x00, which no printable
// query holds, so a match never spans two values.
func searchText(c *Contract) string {
	var b strings.Builder
	b.WriteString(c.Name)
	for i := range c.Signers {
		b.WriteByte(sep)
		b.WriteString(c.Signers[i].FullName)
		if c.Signers[i].Email != "" {
			b.WriteByte(sep)
			b.WriteString(c.Signers[i].Email)
		}
	}
	return fold(b.String())
}
