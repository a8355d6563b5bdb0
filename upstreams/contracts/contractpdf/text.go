package contractpdf

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"

	"golang.org/x/text/unicode/bidi"
)

// The documents lay their text out themselves rather than with fpdf's
// MultiCell and Write: fpdf sets a string in one font, and no one font
// draws every script a name is written in. Each character goes to the
// first of textFaces that draws it, lines are broken over the widths of
// the characters, and each line is drawn run by run, a font per run.
// Each character is measured once, so a text costs time in proportion
// to its length (fpdf's Write measured its whole string again for each
// line it broke).

// Styles of a glyph, as bits; styleNames gives fpdf's names.
const (
	bold   = 1
	italic = 2
)

var styleNames = [...]string{"", "B", "I", "BI"}

func styleBits(style string) uint8 {
	var s uint8
	if strings.Contains(style, "B") {
		s |= bold
	}
	if strings.Contains(style, "I") {
		s |= italic
	}
	return s
}

// A glyph is one character as laid out: the character drawn, the face
// and style it is drawn in and its width at the size of its text.
type glyph struct {
	r     rune
	face  uint8 // index into textFaces, or handIndex
	style uint8
	w     float64
	// actual is the text that this glyph and the cover-1 after it stand
	// for, when it is not the characters drawn (an Arabic letter drawn
	// in its joined form, a Devanagari vowel sign drawn before its
	// consonant): what a reader copying the text out gets (ActualText).
	actual string
	cover  int
}

// span is text in one style: "", "B", "I" or "BI".
type span struct{ text, style string }

// glyphs prepares spans for layout at size: made printable, each
// character in the first face that draws it (a space or a combining mark
// in the face of the character before it, when that face has it, so that
// a run of one script stays one run), Arabic letters in their joined
// forms, Devanagari vowel signs I before their consonants. With hand, every
// character is in the handwriting face (handDraws has said it draws
// them all).
func (d *document) glyphs(spans []span, size float64, hand bool) []glyph {
	var gs []glyph
	for _, sp := range spans {
		style := styleBits(sp.style)
		for _, r := range printable(sp.text) {
			f := faceOf(r)
			switch {
			case hand:
				f = handIndex
			case r == '\n' || f < 0 || isIsolate(r):
				f = goFace
			case len(gs) > 0 && (r == ' ' || unicode.In(r, unicode.Mn, unicode.Me)):
				if prev := gs[len(gs)-1].face; prev != handIndex && textFaces[prev].has(r) {
					f = int(prev)
				}
			}
			gs = append(gs, glyph{r: r, face: uint8(f), style: style})
		}
	}
	gs = shapeArabic(gs)
	reorderDevanagari(gs)
	d.measure(gs, size)
	return gs
}

// text is s in style at size, as glyphs.
func (d *document) text(s, style string, size float64) []glyph {
	return d.glyphs([]span{{s, style}}, size, false)
}

// faceAt is the face of index i.
func faceAt(i uint8) *face {
	if i == handIndex {
		return handFace
	}
	return textFaces[i]
}

// fontKey is a font as fpdf selects it.
type fontKey struct {
	face, style uint8
	size        float64
}

// setFont selects face and style at size, adding the font to the
// document the first time it is used: a document embeds only the fonts
// it uses. It reports whether bold is to be drawn by stroking (the face
// has no bold file).
func (d *document) setFont(faceIndex, style uint8, size float64) (fakeBold bool) {
	fc := faceAt(faceIndex)
	name := styleNames[style]
	file, own := fc.file(name)
	if !own {
		name = ""
	}
	if key := (fontKey{faceIndex, style, size}); d.font != key {
		if d.added == nil {
			d.added = map[string]bool{}
		}
		if !d.added[fc.family+name] {
			d.f.AddUTF8FontFromBytes(fc.family, name, file)
			d.added[fc.family+name] = true
		}
		d.f.SetFont(fc.family, name, size)
		d.font = key
	}
	return !own && style&bold != 0
}

// measure sets the width of each glyph at size. Widths are kept per
// face, style and character at 1 pt, so that text of alternating styles
// does not select a font for each character it measures.
func (d *document) measure(gs []glyph, size float64) {
	if d.widths == nil {
		d.widths = map[widthKey]float64{}
	}
	for i := range gs {
		g := &gs[i]
		if g.r == '\n' || isIsolate(g.r) {
			continue
		}
		key := widthKey{g.face, g.style, g.r}
		w, ok := d.widths[key]
		if !ok {
			d.setFont(g.face, g.style, size)
			w = d.f.GetStringWidth(string(g.r)) / size
			d.widths[key] = w
		}
		g.w = w * size
	}
}

type widthKey struct {
	face, style uint8
	r           rune
}

func width(gs []glyph) float64 {
	w := 0.0
	for _, g := range gs {
		w += g.w
	}
	return w
}

// fit shortens gs with an ellipsis until it fits w, for cells that cannot
// wrap.
func (d *document) fit(gs []glyph, w float64, size float64) []glyph {
	if width(gs) <= w {
		return gs
	}
	style := uint8(0)
	if len(gs) > 0 {
		style = gs[0].style
	}
	ellipsis := []glyph{{r: '…', face: goFace, style: style}}
	d.measure(ellipsis, size)
	sum, n := ellipsis[0].w, 0
	for n < len(gs) && sum+gs[n].w <= w {
		sum += gs[n].w
		n++
	}
	// The cut must not leave part of a glyph group (ActualText) behind.
	for i := range n {
		if gs[i].cover > 1 && i+gs[i].cover > n {
			n = i
			break
		}
	}
	return append(gs[:n:n], ellipsis...)
}

// A line is a line of text as broken: its glyphs in logical order, and
// whether its paragraph reads right to left.
type line struct {
	gs  []glyph
	rtl bool
}

// breakLines breaks gs into lines: the first at most first wide, the
// others at most rest. A line ends at a line break; else after the
// spaces that end the last word that fits, or between two Chinese or
// Japanese characters; a word longer than a line is cut where the line
// is full. With partial, the first line continues one already begun:
// when not even its first word fits there, the line is left empty, and
// the word starts the next.
func breakLines(gs []glyph, first, rest float64, partial bool) []line {
	var out []line
	rtl := paragraphRTL(gs)
	push := func(a, b int) { out = append(out, line{gs[a:b], rtl}) }
	start, brk, used, avail := 0, -1, 0.0, first
	for i := 0; i < len(gs); i++ {
		g := gs[i]
		switch {
		case g.r == '\n':
			push(start, i)
			start, brk, used, avail = i+1, -1, 0, rest
			rtl = paragraphRTL(gs[start:])
			continue
		case g.r == ' ':
			// Spaces hang in the margin: only a word ends a line.
			used += g.w
			brk = i + 1
			continue
		}
		ideograph := isIdeograph(g.r)
		if ideograph && i > start {
			brk = i
		}
		if used+g.w > avail {
			broken := true
			switch {
			case partial && len(out) == 0 && brk <= start:
				push(start, start) // the word starts the next line
			case brk > start:
				push(start, brk)
				start = brk
			case i > start:
				push(start, i)
				start = i
			default:
				broken = false // one glyph wider than the line stands alone
			}
			if broken {
				// Lay the rest of the word out again on the new line.
				i, brk, used, avail = start-1, -1, 0, rest
				continue
			}
		}
		used += g.w
		if ideograph {
			brk = i + 1
		}
	}
	push(start, len(gs))
	return out
}

// The isolates that bidiLevels tells apart.
const (
	rli = 0x2067
	pdi = 0x2069
)

// isIdeograph reports whether a line may break before and after r, as
// between the characters of Chinese and Japanese, which have no spaces.
func isIdeograph(r rune) bool {
	return r >= 0x2E80 && unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana)
}

// paragraphRTL reports whether the paragraph that starts gs (up to a line
// break) reads right to left: whether its first letter of a strong
// direction outside isolates is Hebrew or Arabic (UAX #9, P2 and P3).
func paragraphRTL(gs []glyph) bool {
	depth := 0
	for _, g := range gs {
		switch {
		case g.r == '\n':
			return false
		case g.r == pdi:
			depth = max(depth-1, 0)
		case isIsolate(g.r):
			depth++
		}
		if depth > 0 {
			continue
		}
		p, _ := bidi.LookupRune(g.r)
		switch p.Class() {
		case bidi.L:
			return false
		case bidi.R, bidi.AL:
			return true
		}
	}
	return false
}

// trimSpaces is gs without the spaces at its end.
func trimSpaces(gs []glyph) []glyph {
	for len(gs) > 0 && gs[len(gs)-1].r == ' ' {
		gs = gs[:len(gs)-1]
	}
	return gs
}

// cellMargin is fpdf's margin inside a cell, which its MultiCell, Cell
// and Write leave before text; these do too, so that text stands where it
// did.
func (d *document) cellMargin() float64 { return d.f.GetCellMargin() }

// pageBreak starts a new page, at the same x, unless a line h high fits
// below the current position, as fpdf's cells do.
func (d *document) pageBreak(h float64) {
	_, pageH := d.f.GetPageSize()
	_, bottom := d.f.GetAutoPageBreak()
	if d.f.GetY()+h > pageH-bottom {
		x := d.f.GetX()
		d.f.AddPage()
		d.f.SetX(x)
	}
}

// block writes gs wrapped in a column w wide (0: to the right margin)
// from the current position, h per line, as fpdf's MultiCell does: each
// line starts at the column's left, and the position ends at the left
// margin below the text.
func (d *document) block(gs []glyph, size, h, w float64) {
	x := d.f.GetX()
	if w == 0 {
		pageW, _ := d.f.GetPageSize()
		_, _, right, _ := d.f.GetMargins()
		w = pageW - right - x
	}
	c := d.cellMargin()
	for _, ln := range breakLines(gs, w-2*c, w-2*c, false) {
		d.pageBreak(h)
		y := d.f.GetY()
		d.drawLine(ln, x+c, y, h, size)
		d.f.SetXY(x, y+h)
	}
	left, _, _, _ := d.f.GetMargins()
	d.f.SetX(left)
}

// flow writes gs from the current position, wrapping at the right
// margin and going on at the left margin, h per line, as fpdf's Write
// does: the position ends after the text, spaces included, so that the
// next text goes on from there.
func (d *document) flow(gs []glyph, size, h float64) {
	if len(gs) == 0 {
		return
	}
	pageW, _ := d.f.GetPageSize()
	left, _, right, _ := d.f.GetMargins()
	x := d.f.GetX()
	c := d.cellMargin()
	lines := breakLines(gs, pageW-right-x-2*c, pageW-right-left-2*c, x > left)
	for i, ln := range lines {
		if i > 0 {
			d.f.SetXY(left, d.f.GetY()+h)
			x = left
		}
		d.pageBreak(h)
		d.drawLine(ln, x+c, d.f.GetY(), h, size)
		if i == len(lines)-1 {
			d.f.SetX(x + width(ln.gs))
		}
	}
}

// cell writes gs on one line in a cell w wide (0: to the right margin)
// and h high at the current position, aligned "L" or "C", and moves as
// fpdf's CellFormat does after it: to its right (ln 0), to the start of
// the next line (1) or below it (2).
func (d *document) cell(gs []glyph, size, w, h float64, align string, ln int) {
	d.pageBreak(h)
	x, y := d.f.GetXY()
	if w == 0 {
		pageW, _ := d.f.GetPageSize()
		_, _, right, _ := d.f.GetMargins()
		w = pageW - right - x
	}
	l := line{gs: gs, rtl: paragraphRTL(gs)}
	dx := d.cellMargin()
	if align == "C" {
		dx = (w - width(trimSpaces(gs))) / 2
	}
	d.drawLine(l, x+dx, y, h, size)
	switch ln {
	case 0:
		d.f.SetXY(x+w, y)
	case 1:
		left, _, _, _ := d.f.GetMargins()
		d.f.SetXY(left, y+h)
	default:
		d.f.SetXY(x, y+h)
	}
}

// drawLine draws ln with its left end at x, in a line h high whose top
// is y: in the order it is read on the page (visual), a font per run.
func (d *document) drawLine(ln line, x, y, h, size float64) {
	gs := slices.DeleteFunc(visual(trimSpaces(ln.gs), ln.rtl), func(g glyph) bool { return isIsolate(g.r) })
	for len(gs) > 0 {
		n, actual := piece(gs)
		d.drawRun(gs[:n], actual, x, y, h, size)
		x += width(gs[:n])
		gs = gs[n:]
	}
}

// piece is the length of the run that starts gs and is drawn with one
// call: a glyph group that stands for other text (with that text), or
// the glyphs of one face and style.
func piece(gs []glyph) (n int, actual string) {
	if g := gs[0]; g.actual != "" {
		return min(max(g.cover, 1), len(gs)), g.actual
	}
	n = 1
	for n < len(gs) && gs[n].face == gs[0].face && gs[n].style == gs[0].style && gs[n].actual == "" {
		n++
	}
	return n, ""
}

// drawRun draws gs in their face and style, baseline where fpdf's cells
// put it. The text that a glyph group stands for is given as its
// ActualText, which text extraction (pdftotext, copying from a viewer)
// reads in place of the glyphs. A bold the face has no file for is drawn
// by stroking the outlines in the text's colour as well as filling them.
func (d *document) drawRun(gs []glyph, actual string, x, y, h, size float64) {
	fakeBold := d.setFont(gs[0].face, gs[0].style, size)
	rs := make([]rune, len(gs))
	for i, g := range gs {
		rs[i] = g.r
	}
	if actual != "" {
		d.f.RawWriteStr("/Span <</ActualText " + pdfTextString(actual) + ">> BDC")
	}
	if fakeBold {
		r, g, b := d.f.GetTextColor()
		d.f.RawWriteStr(fmt.Sprintf("q 2 Tr %.2f w %.3f %.3f %.3f RG", size/30, float64(r)/255, float64(g)/255, float64(b)/255))
	}
	_, unit := d.f.GetFontSize()
	d.f.Text(x, y+0.5*h+0.3*unit, string(rs))
	if fakeBold {
		d.f.RawWriteStr("Q")
	}
	if actual != "" {
		d.f.RawWriteStr("EMC")
	}
}

// pdfTextString is s as a PDF text string: UTF-16BE with its byte order
// mark, in hexadecimal.
func pdfTextString(s string) string {
	var b strings.Builder
	b.WriteString("<FEFF")
	for _, u := range utf16.Encode([]rune(s)) {
		fmt.Fprintf(&b, "%04X", u)
	}
	b.WriteByte('>')
	return b.String()
}

// visual is gs, one line of a paragraph that reads right to left (rtl)
// or left to right, in the order its glyphs stand on the page, left to
// right (UAX #9: levels resolved by golang.org/x/text/unicode/bidi, then
// reversed, L2), with brackets of right-to-left text mirrored. A
// combining mark stays after its base, and a glyph group stays together.
func visual(gs []glyph, rtl bool) []glyph {
	levels := bidiLevels(gs, rtl)
	if levels == nil {
		return gs
	}
	// Units: a glyph with the marks after it, or a glyph group.
	type unit struct {
		a, b  int
		level uint8
	}
	var units []unit
	for i := 0; i < len(gs); {
		j := i + 1
		if gs[i].cover > 1 {
			j = min(i+gs[i].cover, len(gs))
		}
		for j < len(gs) && levels[j] == levels[i] && unicode.In(gs[j].r, unicode.Mn, unicode.Me) {
			j++
		}
		units = append(units, unit{i, j, levels[i]})
		i = j
	}
	top, lowestOdd := uint8(0), uint8(255)
	for _, u := range units {
		top = max(top, u.level)
		if u.level%2 == 1 {
			lowestOdd = min(lowestOdd, u.level)
		}
	}
	for lv := top; lv >= lowestOdd && lv > 0; lv-- {
		for i := 0; i < len(units); {
			if units[i].level < lv {
				i++
				continue
			}
			j := i
			for j < len(units) && units[j].level >= lv {
				j++
			}
			for a, b := i, j-1; a < b; a, b = a+1, b-1 {
				units[a], units[b] = units[b], units[a]
			}
			i = j
		}
	}
	out := make([]glyph, 0, len(gs))
	for _, u := range units {
		for _, g := range gs[u.a:u.b] {
			if u.level%2 == 1 {
				if p, _ := bidi.LookupRune(g.r); p.IsBracket() {
					g.r = []rune(bidi.ReverseString(string(g.r)))[0]
				}
			}
			out = append(out, g)
		}
	}
	return out
}

// bidiLevels resolves the embedding level of each glyph of a line, or
// nil when all are 0: a left-to-right paragraph without Hebrew or Arabic
// characters. x/text's bidi says each run's direction, not its level; the
// level follows from it but for numbers after right-to-left text in a
// left-to-right paragraph, which rule I1 raises to level 2.
func bidiLevels(gs []glyph, rtl bool) []uint8 {
	if !rtl && !hasRightToLeft(gs) {
		return nil
	}
	rs := make([]rune, 0, len(gs)+1)
	// A mark of the paragraph's direction first: x/text finds the
	// direction from the text, which this line may begin otherwise.
	if rtl {
		rs = append(rs, '\u200F')
	} else {
		rs = append(rs, '\u200E')
	}
	for _, g := range gs {
		rs = append(rs, g.r)
	}
	var p bidi.Paragraph
	if _, err := p.SetString(string(rs)); err != nil {
		return nil
	}
	o, err := p.Order()
	if err != nil {
		return nil
	}
	levels := make([]uint8, len(gs))
	for i := range o.NumRuns() {
		run := o.Run(i)
		a, b := run.Pos()
		lv := uint8(0)
		switch {
		case run.Direction() == bidi.RightToLeft:
			lv = 1
		case rtl:
			lv = 2
		}
		for j := max(a, 1); j <= b && j-1 < len(levels); j++ {
			levels[j-1] = lv
		}
	}
	if !rtl {
		// The strong direction before each character, within its
		// isolate: an isolate is one neutral character to the text
		// around it.
		strongR := false
		var outer []bool
		for i, g := range gs {
			switch {
			case g.r == pdi:
				if len(outer) > 0 {
					strongR, outer = outer[len(outer)-1], outer[:len(outer)-1]
				}
				continue
			case isIsolate(g.r):
				outer = append(outer, strongR)
				strongR = g.r == rli
				continue
			}
			p, _ := bidi.LookupRune(g.r)
			switch c := p.Class(); c {
			case bidi.L:
				strongR = false
			case bidi.R, bidi.AL:
				strongR = true
			case bidi.AN, bidi.EN:
				if levels[i] == 0 && (c == bidi.AN || strongR) {
					levels[i] = 2
				}
			}
		}
		// Separators between such numbers (1,000) go with them.
		for i := 1; i+1 < len(gs); i++ {
			if levels[i] == 0 && levels[i-1] == 2 && levels[i+1] == 2 {
				levels[i] = 2
			}
		}
	}
	return levels
}

// hasRightToLeft reports whether gs holds a Hebrew or Arabic character.
func hasRightToLeft(gs []glyph) bool {
	for _, g := range gs {
		if g.r < 0x0590 {
			continue
		}
		p, _ := bidi.LookupRune(g.r)
		if c := p.Class(); c == bidi.R || c == bidi.AL || c == bidi.AN {
			return true
		}
	}
	return false
}
