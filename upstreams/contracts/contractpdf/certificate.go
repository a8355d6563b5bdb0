package contractpdf

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// keyWidth is the width of the label column of the certificate.
const keyWidth = 42.0

// Certificate renders the audit trail of a contract: the contract, the
// SHA-256 of its finalized PDF (finalizedSHA256, 64 hex digits), and for
// every signer the name, contact, signing method, decision, its time and IP
// address, and when the signing page was first opened.
func Certificate(in Input, finalizedSHA256 string) ([]byte, error) {
	sum := strings.ToLower(finalizedSHA256)
	if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
		return nil, fmt.Errorf("contractpdf: %q is not a SHA-256 in hex", finalizedSHA256)
	}
	if len(in.Signers) == 0 {
		return nil, fmt.Errorf("contractpdf: contract has no signers")
	}

	d := newDocument(&in, "Certificate of completion: "+in.Name, fmt.Sprintf("Certificate · %s", in.ContractID))
	d.heading("Certificate of completion", 18)
	d.note("This certificate records how each signer reached and decided on the contract below.")
	d.f.Ln(4)

	d.heading("Contract", 13)
	d.field("Name", in.Name)
	d.field("Contract ID", in.ContractID)
	d.field("Document", in.TemplateTitle)
	d.field("Created", timestamp(in.Created))
	d.field("Completed", timestamp(in.completedAt()))
	d.field("Signers", fmt.Sprint(len(in.Signers)))
	d.field("Finalized PDF SHA-256", sum)
	d.f.Ln(4)

	for i, s := range in.Signers {
		d.ensureSpace(10 * lineHeight)
		d.heading(fmt.Sprintf("Signer %d of %d", i+1, len(in.Signers)), 13)
		d.field("Full name", s.FullName)
		d.field("E-mail", orDash(s.Email))
		d.field("Phone", orDash(s.Phone))
		d.field("Signing method", orDash(methodLabel(s.Method)))
		d.field("Decision", orDash(s.Decision))
		d.field("Decision time", timestamp(s.DecisionTime))
		d.field("Decision IP", orDash(s.DecisionIP))
		d.field("Opened", timestamp(s.Opened))
		d.f.Ln(4)
	}
	return d.bytes()
}

// field writes one label and value row; long values wrap in their column.
func (d *document) field(key, value string) {
	d.ensureSpace(lineHeight)
	d.f.SetFont(family, "", smallSize+1)
	d.f.SetTextColor(90, 90, 90)
	d.f.CellFormat(keyWidth, lineHeight, key, "", 0, "L", false, 0, "")
	d.f.SetTextColor(0, 0, 0)
	d.f.SetFont(family, "", bodySize-1)
	d.f.MultiCell(d.width()-keyWidth, lineHeight, printable(value), "", "L", false)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
