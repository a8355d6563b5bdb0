package contractpdf

import (
	_ "embed"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/gobolditalic"
	"golang.org/x/image/font/gofont/goitalic"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/text/unicode/norm"
)

// A face is a typeface the documents embed (as subsets, with fpdf's
// AddUTF8FontFromBytes, which needs TrueType outlines), registered under
// family in the styles it has files for. A style it lacks is drawn in
// its regular file: bold by stroking the outlines as well as filling
// them, italic upright.
type face struct {
	family string
	files  map[string][]byte // by fpdf style: "", "B", "I", "BI"

	once sync.Once
	// draws has a bit for each character of the Basic Multilingual
	// Plane that the face has a glyph for: its character map read once
	// (a few milliseconds), then a lookup.
	draws []uint64
}

// has reports whether f draws r.
func (f *face) has(r rune) bool {
	f.once.Do(func() {
		f.draws = make([]uint64, 0x10000/64)
		font, err := sfnt.Parse(f.files[""])
		if err != nil {
			return
		}
		var buf sfnt.Buffer
		for c := range rune(0x10000) {
			if gi, err := font.GlyphIndex(&buf, c); err == nil && gi != 0 {
				f.draws[c/64] |= 1 << (c % 64)
			}
		}
	})
	return r >= 0 && r < 0x10000 && f.draws[r/64]&(1<<(r%64)) != 0
}

// file is the file of style, and whether it is the style's own.
func (f *face) file(style string) ([]byte, bool) {
	if b, ok := f.files[style]; ok {
		return b, true
	}
	return f.files[""], false
}

// family is the name under which the Go fonts are registered: Latin,
// Greek and Cyrillic, in four styles, the face of everything they draw.
const family = "go"

var (
	//go:embed fonts/NotoSans-Regular.ttf
	latinTTF []byte
	//go:embed fonts/NotoSansArabic-Regular.ttf
	arabicTTF []byte
	//go:embed fonts/NotoSansHebrew-Regular.ttf
	hebrewTTF []byte
	//go:embed fonts/NotoSansDevanagari-Regular.ttf
	devanagariTTF []byte
	//go:embed fonts/DroidSansFallback.ttf
	cjkTTF []byte
)

// textFaces are the faces of the documents' text, in the order they are
// asked for a character: the Go fonts, Noto Sans for the Latin, Greek and
// Cyrillic letters they lack (Vietnamese, Kazakh, polytonic Greek), then
// one face per script. Noto Sans, Noto Sans Arabic, Hebrew and Devanagari
// (fonts/Noto-LICENSE.txt, SIL Open Font License 1.1) and Droid Sans
// Fallback (fonts/DroidSansFallback-LICENSE.txt, Apache License 2.0:
// Chinese, Japanese kana and kanji, Korean Hangul, in one TrueType file
// where the Noto CJK fonts are CFF, which fpdf cannot embed) come in
// their regular weight only.
var textFaces = []*face{
	{family: family, files: map[string][]byte{"": goregular.TTF, "B": gobold.TTF, "I": goitalic.TTF, "BI": gobolditalic.TTF}},
	{family: "notosans", files: map[string][]byte{"": latinTTF}},
	{family: "arabic", files: map[string][]byte{"": arabicTTF}},
	{family: "hebrew", files: map[string][]byte{"": hebrewTTF}},
	{family: "devanagari", files: map[string][]byte{"": devanagariTTF}},
	{family: "cjk", files: map[string][]byte{"": cjkTTF}},
}

// Indexes into textFaces, in its order; the layout treats the Go, Arabic
// and Devanagari faces apart (and their tests fail if these are out of
// step).
const (
	goFace = iota
	latinFace
	arabicFace
	hebrewFace
	devanagariFace
	cjkFace
)

// handFace is the handwriting-style font of typed signatures: Breip, by
// Adam Breipohl, under the SIL Open Font License 1.0 (fonts/Breip-
// LICENSE.txt). It is the one face of a typed name it draws whole.
var handFace = &face{family: "hand", files: map[string][]byte{"": handTTF}}

// handIndex stands for handFace where a glyph holds an index into
// textFaces.
const handIndex = 255

//go:embed fonts/Breip.ttf
var handTTF []byte

// handDraws reports whether the handwriting font draws every character
// of s; a typed name it cannot write whole (Cyrillic, say) is set in the
// italic faces instead.
func handDraws(s string) bool {
	for _, r := range printable(s) {
		if r != ' ' && !handFace.has(r) {
			return false
		}
	}
	return true
}

// faceOf is the index of the first of textFaces that draws r, or -1.
func faceOf(r rune) int {
	for i, f := range textFaces {
		if f.has(r) {
			return i
		}
	}
	return -1
}

// printable prepares text for the PDF: composed, line breaks normalised,
// tabs and other spaces as plain spaces, control and format characters
// but the directional isolates (U+2066 to U+2069, which ClientText puts
// around a right-to-left value) dropped, and characters that no face has
// a glyph for (or that lie outside the Basic Multilingual Plane, which
// fpdf's font embedding does not handle) replaced by "?", so that a
// reader sees that something is missing rather than an empty box or
// nothing at all.
func printable(s string) string {
	// Composed (NFC), a letter typed as a base and combining accents is
	// the one character the fonts draw whole.
	s = norm.NFC.String(strings.ReplaceAll(s, "\r\n", "\n"))
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteRune(r)
		case r == '\t':
			b.WriteString("    ")
		case unicode.Is(unicode.Zs, r):
			b.WriteByte(' ')
		case isIsolate(r):
			b.WriteRune(r) // kept for the layout's bidi; not drawn
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
		case r == utf8.RuneError || !hasGlyph(r):
			b.WriteByte('?')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isIsolate reports whether r is one of Unicode's directional isolates:
// LRI, RLI, FSI or PDI.
func isIsolate(r rune) bool { return r >= 0x2066 && r <= 0x2069 }

// hasGlyph reports whether one of the text faces draws r.
func hasGlyph(r rune) bool { return faceOf(r) >= 0 }
