package contractpdf

import (
	"bytes"
	"fmt"
	"time"

	"github.com/go-pdf/fpdf"

	"github.com/keygate/keygate/internal/text"
)

// Page geometry in millimetres (A4).
const (
	margin     = 20.0
	lineHeight = 5.5
	bodySize   = 11.0
	smallSize  = 8.5
)

// document is an A4 PDF with the Go fonts, a footer naming the contract and
// the page, and metadata dated by the contract rather than by the clock, so
// that rendering the same contract twice gives the same file.
type document struct {
	f *fpdf.Fpdf
	// hand is set once the handwriting font is added (typed).
	hand bool
}

func newDocument(in *Input, title, footer string) *document {
	f := fpdf.New("P", "mm", "A4", "")
	f.SetCompression(true)
	f.SetCatalogSort(true)
	date := in.completedAt()
	f.SetCreationDate(date)
	f.SetModificationDate(date)
	f.SetProducer("keygate", false)
	f.SetCreator("keygate", false)
	f.SetTitle(printable(title), true)
	f.SetMargins(margin, margin, margin)
	f.SetAutoPageBreak(true, margin)
	f.AliasNbPages("{nb}")
	addFonts(f)
	footer = printable(footer)
	f.SetFooterFunc(func() {
		f.SetY(-margin + 6)
		f.SetFont(family, "", 7.5)
		f.SetTextColor(110, 110, 110)
		f.CellFormat(0, 4, fmt.Sprintf("%s · page %d/{nb}", footer, f.PageNo()), "", 0, "C", false, 0, "")
		f.SetTextColor(0, 0, 0)
	})
	f.AddPage()
	return &document{f: f}
}

// width is the usable width of a page.
func (d *document) width() float64 {
	w, _ := d.f.GetPageSize()
	return w - 2*margin
}

// ensureSpace starts a new page unless h millimetres fit on this one, so a
// signature is never split from its name.
func (d *document) ensureSpace(h float64) {
	_, pageH := d.f.GetPageSize()
	if d.f.GetY()+h > pageH-margin {
		d.f.AddPage()
	}
}

func (d *document) heading(text string, size float64) {
	d.ensureSpace(size * 0.6 * 3)
	d.f.SetFont(family, "B", size)
	d.f.MultiCell(0, size*0.5, printable(text), "", "L", false)
	d.f.Ln(size * 0.2)
}

// paragraph writes text wrapped to the page width, across pages as needed.
func (d *document) paragraph(text, style string, size float64) {
	d.f.SetFont(family, style, size)
	d.f.MultiCell(0, size*0.5, printable(text), "", "L", false)
}

// typed writes a typed signature: in the handwriting font when it has
// every character, else in the italic face.
func (d *document) typed(name string) {
	if handDraws(name) {
		if !d.hand { // embedded only in documents that use it
			d.f.AddUTF8FontFromBytes(handFamily, "", handTTF)
			d.hand = true
		}
		d.f.SetFont(handFamily, "", typedSize+4)
		d.f.MultiCell(0, (typedSize+4)*0.5, printable(name), "", "L", false)
		return
	}
	d.paragraph(name, "I", typedSize)
}

// note writes a line of small grey text.
func (d *document) note(text string) {
	d.f.SetTextColor(90, 90, 90)
	d.paragraph(text, "", smallSize)
	d.f.SetTextColor(0, 0, 0)
}

// rule draws a thin horizontal line of width w at the current position.
func (d *document) rule(w float64) {
	x, y := d.f.GetXY()
	d.f.SetLineWidth(0.2)
	d.f.Line(x, y, x+w, y)
}

// fit shortens text with an ellipsis until it fits w in the current font,
// for cells that cannot wrap.
func (d *document) fit(text string, w float64) string {
	if d.f.GetStringWidth(text) <= w {
		return text
	}
	r := []rune(text)
	for len(r) > 0 && d.f.GetStringWidth(string(r)+"…") > w {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}

func (d *document) bytes() ([]byte, error) {
	var buf bytes.Buffer
	if err := d.f.Output(&buf); err != nil {
		return nil, fmt.Errorf("contractpdf: %w", err)
	}
	out := buf.Bytes()
	// A seal is PDF 1.5 (the catalog of a file that says less gets
	// /Version /1.5 from it): the header says 1.5 from the start, so
	// that header and catalog agree. fpdf writes 1.3 or 1.4, whose
	// features 1.5 keeps; the digit is replaced in place, so no offset
	// moves.
	if bytes.HasPrefix(out, []byte("%PDF-1.")) && out[7] < minVersion {
		out[7] = minVersion
	}
	return out, nil
}

// minVersion is the minor PDF version the documents declare: 1.5, which
// a seal needs.
const minVersion = '5'

// timestamp is the API's time format (RFC 3339, UTC, milliseconds), so a
// time in a PDF can be matched against the API's records.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return text.HumanTime(t)
}
