package contractpdf

import (
	"strconv"
	"strings"

	"github.com/yuin/goldmark/ast"
	east "github.com/yuin/goldmark/extension/ast"

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

// markupWriter draws a Markdown syntax tree, block by block; the inline
// text of a block is gathered run by run, each in its style, and laid out
// as one paragraph.
type markupWriter struct {
	d     *document
	src   []byte
	spans []span // the inline text of the block being written
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
		w.runs(n, "B")
		w.flush(size)
		f.Ln(size*0.5 + size*0.2)
	case *ast.Paragraph, *ast.TextBlock:
		w.runs(n, "")
		w.flush(bodySize)
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
		f.SetX(indentOf(level) + margin)
		w.d.cell(w.d.text(marker, "", bodySize), bodySize, listIndent, bodySize*0.5, "L", 0)
		// The item's first block starts on the marker's line.
		w.indent(level + 1)
		w.blocks(item, level+1)
	}
}

// row writes one table row as its cells' text, separated by bars.
func (w *markupWriter) row(row ast.Node, style string) {
	first := true
	for cell := row.FirstChild(); cell != nil; cell = cell.NextSibling() {
		if !first {
			w.add(" | ", style)
		}
		first = false
		w.runs(cell, style)
	}
	w.flush(bodySize)
	w.d.f.Ln(bodySize * 0.5)
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

// runs gathers the inline nodes below n, each run of text in the style
// its emphasis gives on top of style.
func (w *markupWriter) runs(n ast.Node, style string) {
	for c := n.FirstChild(); c != nil; c = c.NextSibling() {
		switch c := c.(type) {
		case *ast.Text:
			w.add(string(c.Segment.Value(w.src)), style)
			switch {
			case c.HardLineBreak():
				w.add("\n", style)
			case c.SoftLineBreak():
				w.add(" ", style)
			}
		case *ast.String:
			w.add(string(c.Value), style)
		case *ast.CodeSpan:
			w.runs(c, style)
		case *ast.Emphasis:
			w.runs(c, addStyle(style, c.Level))
		case *ast.Link:
			w.runs(c, style)
			if dest := string(c.Destination); dest != "" && dest != w.text(c) {
				w.add(" ("+dest+")", style)
			}
		case *ast.AutoLink:
			w.add(string(c.URL(w.src)), style)
		case *ast.Image:
			w.runs(c, style) // its alternative text
		case *ast.RawHTML:
			// left out, as on the pages
		default:
			w.runs(c, style)
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

// add adds s in style to the block's text.
func (w *markupWriter) add(s, style string) {
	if s != "" {
		w.spans = append(w.spans, span{s, style})
	}
}

// flush writes the block's text at size from the current position,
// wrapping at the right margin and back to the left margin of the current
// indentation.
func (w *markupWriter) flush(size float64) {
	w.d.flow(w.d.glyphs(w.spans, size, false), size, size*0.5)
	w.spans = w.spans[:0]
}
