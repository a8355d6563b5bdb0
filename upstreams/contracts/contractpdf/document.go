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

// document is an A4 PDF with the text faces, a footer naming the contract
// and the page, and metadata dated by the contract rather than by the
// clock, so that rendering the same contract twice gives the same file.
type document struct {
	f *fpdf.Fpdf
	// font is the font last selected (setFont; none while zero, as no
	// text is 0 pt), added the fonts added to the file so far, by fpdf
	// family and style, widths the widths measured so far (measure).
	font   fontKey
	added  map[string]bool
	widths map[widthKey]float64
}

func newDocument(in *Input, title, footer string) *document {
	f := fpdf.New("P", "mm", "A4", "")
	d := &document{f: f}
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
	const footerSize, footerHeight = 7.5, 4
	f.SetFooterFunc(func() {
		// After the footer, fpdf selects the font of before it again.
		font := d.font
		f.SetY(-margin + 6)
		f.SetTextColor(110, 110, 110)
		gs := d.text(fmt.Sprintf("%s · page %d/{nb}", footer, f.PageNo()), "", footerSize)
		x := margin + (d.width()-width(gs))/2
		d.drawLine(line{gs, paragraphRTL(gs)}, x, f.GetY(), footerHeight, footerSize)
		f.SetTextColor(0, 0, 0)
		d.font = font
	})
	f.AddPage()
	return d
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
	d.block(d.text(text, "B", size), size, size*0.5, 0)
	d.f.Ln(size * 0.2)
}

// paragraph writes text wrapped to the page width, across pages as needed.
func (d *document) paragraph(text, style string, size float64) {
	d.block(d.text(text, style, size), size, size*0.5, 0)
}

// typed writes a typed signature: in the handwriting font when it has
// every character, else in the italic faces.
func (d *document) typed(name string) {
	if handDraws(name) {
		const size = typedSize + 4
		d.block(d.glyphs([]span{{name, ""}}, size, true), size, size*0.5, 0)
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
