package contractpdf

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/keygate/keygate/internal/testkit/pdftest"
)

// TestNamesInEveryScript: a signer's name in any of the scripts names are
// written in prints in the finalized PDF (above the signature, as the
// typed signature, in the signature block and in the certificate of
// completion on its last pages) and in the certificate's own PDF,
// in the face that draws its script, and reads back as written: what
// pdftotext extracts holds the name, and no character was replaced by
// "?".
func TestNamesInEveryScript(t *testing.T) {
	tests := []struct {
		name string
		// face draws the name (fpdf's font name, "utf8" and the family);
		// typed is the face of the typed signature, at typedSize (the
		// handwriting face at typedSize+4).
		face, typed string
		// nfkc: the name reads back with a lam-alef ligature as its own
		// character (see shapeArabic), which NFKC normalisation reads as
		// lam and alef.
		nfkc bool
	}{
		{name: "张伟", face: "utf8cjk", typed: "utf8cjk"},
		{name: "李娜", face: "utf8cjk", typed: "utf8cjk"},
		{name: "김민준", face: "utf8cjk", typed: "utf8cjk"},
		{name: "山田 さくら", face: "utf8cjk", typed: "utf8cjk"},
		{name: "Ελένη Παπαδοπούλου", face: "utf8goB", typed: "utf8goI"},
		{name: "Дмитрий Иванов", face: "utf8goB", typed: "utf8goI"},
		{name: "محمد علي", face: "utf8arabic", typed: "utf8arabic"},
		{name: "علاء الدين", face: "utf8arabic", typed: "utf8arabic", nfkc: true},
		{name: "דוד כהן", face: "utf8hebrew", typed: "utf8hebrew"},
		{name: "राहुल शर्मा", face: "utf8devanagari", typed: "utf8devanagari"},
		{name: "किरण सिंह", face: "utf8devanagari", typed: "utf8devanagari"},
		{name: "José Müller", face: "utf8goB", typed: "utf8hand"},
		// letters the Go fonts lack come from Noto Sans
		{name: "Nguyễn Thị Minh", face: "utf8notosans", typed: "utf8notosans"},
		{name: "Әлия Қасымова", face: "utf8notosans", typed: "utf8notosans"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := sampleInput(t)
			in.Signers = in.Signers[1:2] // typed, with a signature block
			in.Signers[0].FullName, in.Signers[0].TypedName = tt.name, tt.name
			finalized, err := Finalized(in)
			if err != nil {
				t.Fatal(err)
			}
			certificate, err := Certificate(in, strings.Repeat("ab", 32))
			if err != nil {
				t.Fatal(err)
			}
			for _, doc := range []struct {
				what  string
				pdf   []byte
				count int
			}{
				{"finalized PDF", finalized, 4},
				{"certificate", certificate, 1},
			} {
				text := pdftest.Text(t, doc.pdf)
				if tt.nfkc {
					text = norm.NFKC.String(text)
				}
				if n := strings.Count(text, tt.name); n != doc.count {
					t.Errorf("%s: %q read back %d times, want %d:\n%s", doc.what, tt.name, n, doc.count, text)
				}
				if strings.Contains(text, "?") {
					t.Errorf("%s: a character printed as ?:\n%s", doc.what, text)
				}
				// fpdf embeds a subset: a few glyphs of the 3.4 MB
				// CJK face, not the face.
				if len(doc.pdf) > 150_000 {
					t.Errorf("%s: %d bytes", doc.what, len(doc.pdf))
				}
			}

			runs := pdftest.Read(t, finalized).Runs
			has := func(font string, size float64) bool {
				return slices.ContainsFunc(runs, func(r pdftest.Run) bool { return r.Font == font && r.Size == size })
			}
			if !has(tt.face, bodySize) {
				t.Errorf("the name is not set in %s %.1f pt: %+v", tt.face, bodySize, runs)
			}
			typedSize := typedSize
			if tt.typed == "utf8hand" {
				typedSize += 4
			}
			if !has(tt.typed, typedSize) {
				t.Errorf("the typed signature is not set in %s %.1f pt: %+v", tt.typed, typedSize, runs)
			}
			// The handwriting face is embedded only for a name it draws.
			if got, want := bytes.Contains(finalized, []byte("/BaseFont /utf8hand")), tt.typed == "utf8hand"; got != want {
				t.Errorf("handwriting face embedded: %v, want %v", got, want)
			}
		})
	}
}

// TestArabicForms: each presentation form in the table is the form of
// its letter that Unicode says it is (its compatibility decomposition),
// and the Arabic face draws it.
func TestArabicForms(t *testing.T) {
	for letter, forms := range arabicForms {
		for i, form := range forms {
			if form == 0 {
				continue
			}
			if got := norm.NFKC.String(string(form)); got != string(letter) {
				t.Errorf("form %d of U+%04X is U+%04X, which is %q", i, letter, form, got)
			}
			if !textFaces[arabicFace].has(form) {
				t.Errorf("the Arabic face lacks U+%04X", form)
			}
		}
	}
	for alef, lig := range lamAlef {
		for _, form := range []rune{lig, lig + 1} {
			if got, want := norm.NFKC.String(string(form)), string([]rune{lam, alef}); got != want {
				t.Errorf("lam-alef U+%04X is %q, want %q", form, got, want)
			}
		}
	}
}

// glyphsOf is s as glyphs in the faces layout gives them, each one wide,
// without a document.
func glyphsOf(s string) []glyph {
	var gs []glyph
	for _, r := range s {
		f := max(faceOf(r), 0)
		if isIsolate(r) {
			f = goFace
		}
		gs = append(gs, glyph{r: r, face: uint8(f), w: 1})
	}
	return gs
}

func runesOf(gs []glyph) string {
	var b strings.Builder
	for _, g := range gs {
		b.WriteRune(g.r)
	}
	return b.String()
}

// TestShaping: Arabic letters take the form their neighbours give them
// and stand for the letter as written; a Devanagari vowel sign I is drawn
// before its consonants and stands for them and itself in the order
// written.
func TestShaping(t *testing.T) {
	tests := []struct {
		in, drawn string
		actual    []string // each glyph's actual text, "" for none
	}{
		// meem initial, hah medial, meem medial, dal final
		{"محمد", "\uFEE3\uFEA4\uFEE4\uFEAA", []string{"م", "ح", "م", "د"}},
		// a letter that joins only the one before it ends the join
		{"دار", "\uFEA9\uFE8D\uFEAD", []string{"د", "ا", "ر"}},
		// lam-alef is one glyph; hamza stands alone
		{"علاء", "\uFECB\uFEFC\uFE80", []string{"ع", "", "ء"}},
		// a combining mark does not break the join
		{"مُحمد", "\uFEE3\u064F\uFEA4\uFEE4\uFEAA", []string{"م", "", "ح", "م", "د"}},
		// Persian: peh, keheh, farsi yeh
		{"پکی", "\uFB58\uFB91\uFBFD", []string{"پ", "ک", "ی"}},
		{"Zoë", "Zoë", []string{"", "", ""}},
		{"कि", "िक", []string{"कि", ""}},
		{"किरण", "िकरण", []string{"कि", "", "", ""}},
		// a conjunct: the sign goes before all of it
		{"स्थिति", "\u093F\u0938\u094D\u0925\u093F\u0924", []string{"स्थि", "", "", "", "ति", ""}},
		{"राहुल", "राहुल", []string{"", "", "", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			gs := shapeArabic(glyphsOf(tt.in))
			reorderDevanagari(gs)
			if got := runesOf(gs); got != tt.drawn {
				t.Errorf("drawn %+q, want %+q", got, tt.drawn)
			}
			var actual []string
			for _, g := range gs {
				actual = append(actual, g.actual)
			}
			if !slices.Equal(actual, tt.actual) {
				t.Errorf("actual text %q, want %q", actual, tt.actual)
			}
		})
	}
}

// TestVisualOrder: a line is drawn in the order it is read on the page:
// right-to-left runs reversed with their marks after their letters and
// their brackets mirrored, numbers left to right within them, an
// isolated value kept apart from the text around it.
func TestVisualOrder(t *testing.T) {
	tests := []struct{ in, want string }{
		{"abc def", "abc def"},
		{"שלום", "םולש"},
		{"abc שלום def", "abc םולש def"},
		{"abc שלום 123", "abc 123 םולש"},
		{"שלום abc", "abc םולש"},
		{"(שלום)", "(םולש)"},
		{"עקד 2026", "2026 דקע"},
		{"שָׁלוֹם", "םוֹלשָׁ"},
		// Unisolated, the number after the name would join its order;
		// isolated, it stays after the quotes.
		{"Name “שלום” 7c0e", "Name “7 ”םולשc0e"},
		{"Name “\u2068שלום\u2069” 7c0e", "Name “םולש” 7c0e"},
		{"\u2068שלום\u2069 · id 1", "םולש · id 1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			gs := glyphsOf(tt.in)
			vis := slices.DeleteFunc(visual(gs, paragraphRTL(gs)), func(g glyph) bool { return isIsolate(g.r) })
			if got := runesOf(vis); got != tt.want {
				t.Errorf("visual order %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBreakLines: lines end after the last word that fits, between two
// Chinese or Japanese characters, at a line break, or inside a word
// longer than a line; a line begun elsewhere that has no room for the
// first word is left empty.
func TestBreakLines(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		first, rest float64
		partial     bool
		want        []string
	}{
		{"words", "aaa bbb ccc", 7, 7, false, []string{"aaa bbb ", "ccc"}},
		{"spaces hang", "aaa bbb   ccc", 7, 7, false, []string{"aaa bbb   ", "ccc"}},
		{"line break", "aa\nbb", 10, 10, false, []string{"aa", "bb"}},
		{"long word", "abcdefghij", 4, 4, false, []string{"abcd", "efgh", "ij"}},
		{"ideographs", "这是中文句子", 4, 4, false, []string{"这是中文", "句子"}},
		{"ideographs after a word", "abc 这是中文", 6, 6, false, []string{"abc 这是", "中文"}},
		{"begun line without room", "abcdef gh", 3, 8, true, []string{"", "abcdef ", "gh"}},
		{"begun line with room", "ab cdefgh", 3, 8, true, []string{"ab ", "cdefgh"}},
		{"empty", "", 5, 5, false, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, ln := range breakLines(glyphsOf(tt.in), tt.first, tt.rest, tt.partial) {
				got = append(got, runesOf(ln.gs))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("lines %q, want %q", got, tt.want)
			}
		})
	}
}
