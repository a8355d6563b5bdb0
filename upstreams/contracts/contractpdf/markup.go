package contractpdf

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"
	"golang.org/x/image/font/gofont/gobolditalic"

	"github.com/keygate/keygate/internal/richtext"
)

// Sizes of the contract text's headings, by level: a level-one heading
// stays below the document title's 18 pt.
var headingSizes = [...]float64{16, 14, 12.5, 11.5, 11.5, 11.5}

// listIndent is how far each list or quotation level moves in, and
// maxIndentLevels how many levels do: deeper ones stay at the last, so
// that hostile nesting cannot push text off the page.
const (
	listIndent      = 6.0
	maxIndentLevels = 8
)

// contractText writes the contract's text: Markdown as headings,
// paragraphs, lists, quotations and code, with bold and italic; any other
// markup (or none) as paragraphs of plain text, as it was typed.
func (d *document) contractText(markup, text string) {
	if markup != richtext.Markdown {
		d.paragraph(text, "", bodySize)
		return
	}
	src := []byte(text)
	w := &markupWriter{d: d, src: src}
	w.blocks(richtext.Parse(src), 0)
	d.f.SetLeftMargin(margin)
	d.f.SetTextColor(0, 0, 0)
}

// markupWriter draws a Markdown syntax tree, block by block; inline text
// is written run by run, each in its face, wrapping as one paragraph.
type markupWriter struct {
	d   *document
	src []byte
	// boldItalic is set once the bold italic face is added: only
	// documents that use it embed it.
	boldItalic bool
}

// blocks writes the block children of n at indentation level.
func (w *markupWriter) blocks(n ast.Node, level int) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		w.block(c, level)
	}
}

func (w *markupWriter) block(n ast.Node, level int) {
	f := w.d.f
	w.indent(level)
	switch n := n.(type) {
	case *ast.Heading:
		size := headingSizes[min(max(n.Level, 1), len(headingSizes))-1]
		f.Ln(size * 0.25)
		w.d.ensureSpace(size * 0.6 * 3)
		w.runs(n, size, "B")
		f.Ln(size*0.5 + size*0.2)
	case *ast.Paragraph, *ast.TextBlock:
		w.runs(n, bodySize, "")
		f.Ln(bodySize * 0.5)
		if _, tight := n.(*ast.TextBlock); !tight {
			f.Ln(2)
		}
	case *ast.List:
		w.list(n, level)
		f.Ln(1)
	case *ast.Blockquote:
		f.SetTextColor(70, 70, 70)
		w.blocks(n, level+1)
		f.SetTextColor(0, 0, 0)
	case *ast.FencedCodeBlock, *ast.CodeBlock:
		var b strings.Builder
		lines := n.Lines()
		for i := 0; i < lines.Len(); i++ {
			seg := lines.At(i)
			b.Write(seg.Value(w.src))
		}
		w.d.paragraph(strings.TrimRight(b.String(), "\n"), "", bodySize-1)
		f.Ln(2)
	case *ast.ThematicBreak:
		f.Ln(2)
		w.d.rule(w.d.width() - indentOf(level))
		f.Ln(3)
	case *east.Table:
		for row := n.FirstChild(); row != nil; row = row.NextSibling() {
			style := ""
			if _, header := row.(*east.TableHeader); header {
				style = "B"
			}
			w.row(row, style)
		}
		f.Ln(2)
	case *ast.HTMLBlock:
		// Raw HTML is not the tracker's text as its users see it
		// rendered either: left out, as on the pages.
	default:
		w.blocks(n, level)
	}
}

// list writes the items of l, each with its bullet or number hanging in
// the margin of level+1.
func (w *markupWriter) list(l *ast.List, level int) {
	f := w.d.f
	number := l.Start
	for item := l.FirstChild(); item != nil; item = item.NextSibling() {
		w.indent(level)
		marker := "•"
		if l.IsOrdered() {
			marker = strconv.Itoa(number) + "."
			number++
		}
		w.d.ensureSpace(lineHeight)
		f.SetFont(family, "", bodySize)
		f.SetX(indentOf(level) + margin)
		f.CellFormat(listIndent, bodySize*0.5, marker, "", 0, "L", false, 0, "")
		// The item's first block starts on the marker's line.
		w.indent(level + 1)
		w.blocks(item, level+1)
	}
}

// row writes one table row as its cells' text, separated by bars.
func (w *markupWriter) row(row ast.Node, style string) {
	f := w.d.f
	f.SetFont(family, style, bodySize)
	first := true
	for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
		if !first {
			f.Write(bodySize*0.5, " | ")
		}
		first = false
		w.runs(cell, bodySize, style)
	}
	f.Ln(bodySize * 0.5)
}

// indent sets the left margin of level and moves to it when at the start
// of a line.
func (w *markupWriter) indent(level int) {
	f := w.d.f
	left, _, _, _ := f.GetMargins()
	atStart := f.GetX() <= left+0.01
	x := margin + indentOf(level)
	f.SetLeftMargin(x)
	if atStart {
		f.SetX(x)
	}
}

func indentOf(level int) float64 {
	return float64(min(level, maxIndentLevels)) * listIndent
}

// runs writes the inline nodes below n, each run of text in the face its
// emphasis gives on top of style.
func (w *markupWriter) runs(n ast.Node, size float64, style string) {
	f := w.d.f
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			w.write(string(c.Segment.Value(w.src)), size, style)
			switch {
			case c.HardLineBreak():
				f.Ln(size * 0.5)
			case c.SoftLineBreak():
				w.write(" ", size, style)
			}
		case *ast.String:
			w.write(string(c.Value), size, style)
		case *ast.CodeSpan:
			w.runs(c, size, style)
		case *ast.Emphasis:
			w.runs(c, size, addStyle(style, c.Level))
		case *ast.Link:
			w.runs(c, size, style)
			if dest := string(c.Destination); dest != "" && dest != w.text(c) {
				w.write(" ("+dest+")", size, style)
			}
		case *ast.AutoLink:
			w.write(string(c.URL(w.src)), size, style)
		case *ast.Image:
			w.runs(c, size, style) // its alternative text
		case *ast.RawHTML:
			// left out, as on the pages
		default:
			w.runs(c, size, style)
		}
	}
}

// text is the plain text below n, to compare a link's words with its
// address.
func (w *markupWriter) text(n ast.Node) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering {
			b.Write(t.Segment.Value(w.src))
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// addStyle adds emphasis of level (1 italic, 2 bold) to style.
func addStyle(style string, level int) string {
	add := "I"
	if level >= 2 {
		add = "B"
	}
	if strings.Contains(style, add) {
		return style
	}
	if style == "" {
		return add
	}
	return "BI"
}

// write writes s in style at size, wrapping at the right margin and back
// to the left margin of the current indentation.
func (w *markupWriter) write(s string, size float64, style string) {
	if s == "" {
		return
	}
	if style == "BI" && !w.boldItalic {
		w.d.f.AddUTF8FontFromBytes(family, "BI", gobolditalic.TTF)
		w.boldItalic = true
	}
	w.d.f.SetFont(family, style, size)
	for s = printable(s); s != ""; {
		n := runLength(s)
		w.d.f.Write(size*0.5, s[:n])
		s = s[n:]
	}
}

// maxRun bounds the text one fpdf Write gets: Write measures its whole
// string again for each line it breaks, so one long paragraph would cost
// the square of its length (a 100 KB paragraph took 26 s).
const maxRun = 64

// runLength is how much of s to write at once: up to and including its
// first space, or maxRun bytes (cut on a character) of a longer word.
func runLength(s string) int {
	if i := strings.IndexByte(s[:min(len(s), maxRun)], ' '); i >= 0 {
		return i + 1
	}
	if len(s) <= maxRun {
		return len(s)
	}
	n := maxRun
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}
