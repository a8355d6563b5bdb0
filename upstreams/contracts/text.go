package contracts

import (
	"strings"

	"golang.org/x/text/cases"
)

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
