package contractpdf

import (
	"fmt"
)

// typedSize is the type size of a rendered (typed) signature, large enough
// to read as a signature rather than as body text.
const typedSize = 26.0

// Finalized renders the signed contract: the template title and body, then
// each signer's signature (image or typed name) with name and date, then,
// for signers with AppendSignatureMacro, a signature block (name, date,
// "Signed electronically"), and last, from a new page, the certificate of
// completion, which a seal of the file then covers with the rest. Every
// signer must have signed.
func Finalized(in Input) ([]byte, error) {
	if err := in.checkSigned(); err != nil {
		return nil, err
	}
	images := make([]sigImage, len(in.Signers))
	for i, s := range in.Signers {
		if s.Method == MethodRender {
			continue
		}
		img, err := prepareImage(s.Signature)
		if err != nil {
			return nil, fmt.Errorf("contractpdf: signer %d (%s): %w", i, s.FullName, err)
		}
		images[i] = img
	}

	d := newDocument(&in, in.TemplateTitle, fmt.Sprintf("%s · %s", ClientText(in.Name), in.ContractID))
	d.heading(in.TemplateTitle, 18)
	d.note(fmt.Sprintf("Contract “%s” · %s · created %s", ClientText(in.Name), in.ContractID, timestamp(in.Created)))
	if in.TemplateSource != "" {
		d.note("Text of " + ClientText(in.TemplateSource))
	}
	d.f.Ln(4)
	d.contractText(in.Markup, in.Body)

	d.f.Ln(8)
	d.heading("Signatures", 14)
	for i, s := range in.Signers {
		// Name, signature and caption stay together on one page.
		d.ensureSpace(lineHeight + sigMaxH + 3*lineHeight)
		d.paragraph(s.FullName, "B", bodySize)
		d.f.Ln(1)
		if s.Method == MethodRender {
			d.typed(s.TypedName)
		} else if err := d.place(fmt.Sprintf("signature-%d", i), images[i]); err != nil {
			return nil, err
		}
		d.f.Ln(1)
		d.rule(sigMaxW)
		d.f.Ln(1)
		d.note(fmt.Sprintf("Signed %s · %s", timestamp(s.DecisionTime), MethodWords(s.Method)))
		d.f.Ln(5)
	}
	d.note(sealedNote)
	d.f.Ln(3)

	for _, s := range in.Signers {
		if s.AppendSignatureMacro {
			d.signatureBlock(s)
		}
	}
	d.f.AddPage()
	d.certificate(&in, "")
	return d.bytes()
}

// signatureBlock is the signature macro of the host platform as printed:
// a framed box with the signer's name, the date and "Signed electronically".
func (d *document) signatureBlock(s Signer) {
	const w, h = 80.0, 3*lineHeight + 4
	d.ensureSpace(h + 4)
	x, y := d.f.GetXY()
	d.f.SetLineWidth(0.3)
	d.f.Rect(x, y, w, h, "D")
	d.f.SetXY(x+3, y+2)
	d.cell(d.fit(d.text(s.FullName, "B", bodySize), w-6, bodySize), bodySize, w-6, lineHeight, "L", 2)
	d.cell(d.text(timestamp(s.DecisionTime), "", smallSize+1), smallSize+1, w-6, lineHeight, "L", 2)
	d.cell(d.text("Signed electronically", "I", smallSize+1), smallSize+1, w-6, lineHeight, "L", 2)
	d.f.SetXY(x, y+h+4)
}

// sealedNote tells a reader of the finalized PDF what makes it evidence.
const sealedNote = "This document is sealed with the digital signature of the gateway that collected the signatures: " +
	"any change to the file breaks the seal (check it with pdfsig or Adobe Reader, or on the gateway's /verify page). " +
	"Its last pages are its certificate of completion, which records how each signer was reached, identified and signed; " +
	"the certificate is also a separate PDF sealed the same way (the contract's -certificate.pdf), which names this file's SHA-256. " +
	"Every signer downloads both from their signing link."

// MethodWords says a signing method in words, for the documents and the
// certificate's trail.
func MethodWords(method string) string {
	switch method {
	case MethodUpload:
		return "uploaded signature image"
	case MethodDraw:
		return "signature drawn on the signing page"
	case MethodRender:
		return "typed name"
	}
	return method
}
