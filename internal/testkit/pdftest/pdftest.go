// Package pdftest reads back, for tests, the PDFs that contractpdf
// makes: their pages, text and drawn images.
package pdftest

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/ledongthuc/pdf"
)

// Parsed is what a test reads back from a PDF made by contractpdf.
type Parsed struct {
	Pages int
	// Text holds each shown string on its own line, in content order.
	Text string
	// Images are the image XObjects drawn by the pages (Do operator).
	Images []Image
	// Runs are the shown strings with the font and size each is set in,
	// in content order.
	Runs []Run
}

// Run is one shown string: its text, the base font's name without its
// subset tag ("Go-Bold") and the size in points.
type Run struct {
	Text string
	Font string
	Size float64
}

// Image is one drawn image: its size in pixels and its stream filter.
type Image struct {
	W, H   int64
	Filter string
}

// Read opens data with github.com/ledongthuc/pdf and extracts the text
// and the drawn images.
//
// The parser's own text extraction maps fpdf's ToUnicode range
// <0000>-<FFFF> by incrementing only the last byte, which garbles
// characters above U+00FF (Cyrillic came out as control characters). So
// the text operators are interpreted here: the fonts are checked to be
// Identity-H Type0 fonts with that identity ToUnicode map, under which a
// shown string is UTF-16BE.
func Read(t testing.TB, data []byte) Parsed {
	t.Helper()
	r, err := pdf.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("PDF does not parse: %v", err)
	}
	var out Parsed
	out.Pages = r.NumPage()
	var text strings.Builder
	seenImage := map[string]bool{}
	for i := 1; i <= out.Pages; i++ {
		p := r.Page(i)
		for _, name := range p.Fonts() {
			checkIdentityFont(t, p.Font(name).V)
		}
		xobjects := p.Resources().Key("XObject")
		fonts := p.Resources().Key("Font")
		var font string
		var size float64
		show := func(s string) {
			text.WriteString(s)
			text.WriteByte('\n')
			out.Runs = append(out.Runs, Run{Text: s, Font: font, Size: size})
		}
		pdf.Interpret(p.V.Key("Contents"), func(stk *pdf.Stack, op string) {
			args := make([]pdf.Value, stk.Len())
			for j := len(args) - 1; j >= 0; j-- {
				args[j] = stk.Pop()
			}
			switch op {
			case "Tf":
				base := fonts.Key(args[0].Name()).Key("BaseFont").Name()
				if _, name, ok := strings.Cut(base, "+"); ok {
					base = name
				}
				font, size = base, args[1].Float64()
			case "Tj":
				show(utf16be(args[0].RawString()))
			case "TJ":
				var s strings.Builder
				for j := 0; j < args[0].Len(); j++ {
					if v := args[0].Index(j); v.Kind() == pdf.String {
						s.WriteString(utf16be(v.RawString()))
					}
				}
				show(s.String())
			case "Do":
				name := args[0].Name()
				x := xobjects.Key(name)
				if x.Key("Subtype").Name() == "Image" && !seenImage[name] {
					seenImage[name] = true
					out.Images = append(out.Images, Image{W: x.Key("Width").Int64(), H: x.Key("Height").Int64(), Filter: x.Key("Filter").Name()})
				}
			}
		})
	}
	out.Text = text.String()
	return out
}

func checkIdentityFont(t testing.TB, font pdf.Value) {
	t.Helper()
	if font.Key("Subtype").Name() != "Type0" || font.Key("Encoding").Name() != "Identity-H" {
		t.Fatalf("font %v is not an Identity-H Type0 font", font)
	}
	var cmap bytes.Buffer
	rd := font.Key("ToUnicode").Reader()
	defer rd.Close()
	if _, err := cmap.ReadFrom(rd); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cmap.String(), "<0000> <FFFF> <0000>") {
		t.Fatalf("ToUnicode map is not the identity: %s", cmap.String())
	}
}

func utf16be(s string) string {
	u := make([]uint16, 0, len(s)/2)
	for i := 0; i+1 < len(s); i += 2 {
		u = append(u, uint16(s[i])<<8|uint16(s[i+1]))
	}
	return string(utf16.Decode(u))
}
