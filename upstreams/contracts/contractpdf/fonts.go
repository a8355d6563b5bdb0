package contractpdf

import (
	_ "embed"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/go-pdf/fpdf"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goitalic"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/sfnt"
)

// family is the name under which the Go fonts are registered. They are
// embedded (as subsets) because the PDF standard fonts know no Cyrillic
// and only part of Latin.
const family = "go"

func addFonts(f *fpdf.Fpdf) {
	f.AddUTF8FontFromBytes(family, "", goregular.TTF)
	f.AddUTF8FontFromBytes(family, "I", goitalic.TTF)
	f.AddUTF8FontFromBytes(family, "B", gobold.TTF)
}

// handFamily is the handwriting-style font of typed signatures: Breip, by
// Adam Breipohl, under the SIL Open Font License 1.0 (fonts/Breip-
// LICENSE.txt), embedded as a subset like the Go fonts.
const handFamily = "hand"

//go:embed fonts/Breip.ttf
var handTTF []byte

var (
	handOnce     sync.Once
	handCoverage *sfnt.Font
)

// handDraws reports whether the handwriting font draws every character
// of s; a typed name it cannot write whole (Cyrillic, say) is set in the
// Go italic face instead.
func handDraws(s string) bool {
	handOnce.Do(func() { handCoverage, _ = sfnt.Parse(handTTF) })
	if handCoverage == nil {
		return false
	}
	var buf sfnt.Buffer
	for _, r := range printable(s) {
		if r == ' ' {
			continue
		}
		if gi, err := handCoverage.GlyphIndex(&buf, r); err != nil || gi == 0 {
			return false
		}
	}
	return true
}

var (
	coverageOnce sync.Once
	coverage     *sfnt.Font
)

// printable prepares text for the PDF: line breaks normalised, tabs and
// other spaces as plain spaces, control and format characters dropped, and
// characters that the fonts have no glyph for (or that lie outside the Basic
// Multilingual Plane, which the font embedding does not handle) replaced by
// "?", so that a reader sees that something is missing rather than an
// empty box or nothing at all.
func printable(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteRune(r)
		case r == '\t':
			b.WriteString("    ")
		case unicode.Is(unicode.Zs, r):
			b.WriteByte(' ')
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
		case r == utf8.RuneError || r > 0xFFFF || !hasGlyph(r):
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// hasGlyph reports whether the regular Go font draws r; the italic and bold
// faces cover the same characters.
func hasGlyph(r rune) bool {
	coverageOnce.Do(func() {
		coverage, _ = sfnt.Parse(goregular.TTF)
	})
	if coverage == nil {
		return true
	}
	var buf sfnt.Buffer
	gi, err := coverage.GlyphIndex(&buf, r)
	return err == nil && gi != 0
}
