package contractpdf

import (
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
)

// keyWidth is the width of the label column of the certificate.
const keyWidth = 42.0

// maxEventsShown bounds the trail listed per signer: the first and last
// half of a longer one (a signer who asked for a password every minute
// for a year) are shown, with a line saying how many are left out, so a
// certificate stays a document a person reads.
const maxEventsShown = 400

// Certificate renders the certificate of completion of a contract: the
// contract, the SHA-256 of its finalized PDF as sealed (finalizedSHA256,
// 64 hex digits), the contract's own events (creation, completion) and,
// for every signer, the name, contact and every recorded step in order
// with its time, client address and user agent.
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
	d.note("This certificate records how each signer was reached, identified and decided on the contract below, " +
		"step by step as the gateway recorded each one. Times are UTC; addresses are the client's as the gateway saw it.")
	d.f.Ln(4)

	d.heading("Contract", 13)
	d.field("Name", ClientText(in.Name))
	d.field("Contract ID", in.ContractID)
	d.field("Document", ClientText(in.TemplateTitle))
	if in.TemplateSource != "" {
		// The tracker's page and its version as copied at creation:
		// later edits there never reach the contract.
		d.field("Copied from", ClientText(in.TemplateSource))
	}
	d.field("Created", timestamp(in.Created))
	d.field("Completed", timestamp(in.completedAt()))
	d.field("Signers", fmt.Sprint(len(in.Signers)))
	d.field("Finalized PDF SHA-256", sum)
	d.f.Ln(2)
	d.events(in.Events)
	d.f.Ln(4)

	for i, s := range in.Signers {
		d.ensureSpace(8 * lineHeight)
		d.heading(fmt.Sprintf("Signer %d of %d", i+1, len(in.Signers)), 13)
		d.field("Full name", ClientText(s.FullName))
		d.field("E-mail", orDash(ClientText(s.Email)))
		d.field("Phone", orDash(ClientText(s.Phone)))
		d.f.Ln(2)
		d.events(s.Events)
		d.f.Ln(4)
	}
	return d.bytes()
}

// events lists es, each as its time and words, then a grey line with the
// request's address and user agent.
func (d *document) events(es []Event) {
	d.heading("Events", 10.5)
	if len(es) == 0 {
		d.note("No events recorded.")
		return
	}
	shown := es
	left := 0
	if len(es) > maxEventsShown {
		shown = append(es[:maxEventsShown/2:maxEventsShown/2], es[len(es)-maxEventsShown/2:]...)
		left = len(es) - maxEventsShown
	}
	for i, e := range shown {
		if left > 0 && i == maxEventsShown/2 {
			d.note(fmt.Sprintf("… %d more events are left out here …", left))
		}
		d.ensureSpace(3 * lineHeight)
		d.f.SetFont(family, "B", smallSize+1)
		d.f.MultiCell(0, lineHeight-1, timestamp(e.At), "", "L", false)
		d.f.SetFont(family, "", bodySize-1)
		d.f.MultiCell(0, lineHeight, oneLine(e.What), "", "L", false)
		d.origin(e.IP, ClientText(e.UserAgent))
		d.f.Ln(1.5)
	}
}

// originSize is the size of an event's address and user agent line.
const originSize = 6.5

// origin writes where a step's request came from, in small grey type, on
// one line, or the address and the user agent on a line each when both
// do not fit; a user agent longer than the page is cut with an ellipsis.
// It never wraps: a user agent is the client's own text, and a wrapped
// part would stand at the start of a line, where the certificate's own
// lines stand.
func (d *document) origin(ip, userAgent string) {
	var parts []string
	if ip != "" {
		parts = append(parts, "IP address "+ip)
	}
	if userAgent != "" {
		parts = append(parts, "user agent “"+userAgent+"”")
	}
	if len(parts) == 0 {
		return
	}
	d.f.SetFont(family, "", originSize)
	d.f.SetTextColor(90, 90, 90)
	if line := strings.Join(parts, " · "); d.f.GetStringWidth(line) <= d.width() {
		d.f.CellFormat(0, originSize*0.5, line, "", 1, "L", false, 0, "")
	} else {
		for _, p := range parts {
			d.f.CellFormat(0, originSize*0.5, d.fit(p, d.width()), "", 1, "L", false, 0, "")
		}
	}
	d.f.SetTextColor(0, 0, 0)
}

// oneLine is s made printable with each run of white space, line breaks
// included, as one space.
func oneLine(s string) string { return strings.Join(strings.Fields(printable(s)), " ") }

// syntax holds the characters the certificate's own text is built of
// (quotes around a value, "·" between clauses, "…" at a cut), those that
// look like them, and the backslash, so that an escape is always ours;
// ClientText shows each as an escape.
const syntax = `\"“”„‟″‶״˝«»‹›「」『』〝〞〟＂❝❞` + "·\u0387•‧∙⋅・･⸱ꞏ●◦⦁…⋯"

// singleQuotes are the quote-like characters a name may hold one of
// (O’Brien); a second in a row would pass for a double quote.
const singleQuotes = "'‘’‚‛′`´ʹʻʼ׳＇❛❜"

// ClientText is s, a value the client chose (a user agent, a name, an
// e-mail address, a key's name), as the certificate prints it: on one
// line, with every character of the certificate's own syntax, its
// look-alikes and the backslash as a visible escape (” as \u201D), so
// that no value closes the quotes around it or starts a clause that
// would read as the gateway's words. Ordinary text is unchanged.
func ClientText(s string) string {
	var b strings.Builder
	single := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			b.WriteByte(' ')
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			continue // invisible: dropped before a pair of quotes is judged
		case strings.ContainsRune(syntax, r) || single && strings.ContainsRune(singleQuotes, r):
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
		single = strings.ContainsRune(singleQuotes, r)
	}
	return oneLine(b.String())
}

// field writes one label and value row; long values wrap in their column.
func (d *document) field(key, value string) {
	d.ensureSpace(lineHeight)
	d.f.SetFont(family, "", smallSize+1)
	d.f.SetTextColor(90, 90, 90)
	d.f.CellFormat(keyWidth, lineHeight, key, "", 0, "L", false, 0, "")
	d.f.SetTextColor(0, 0, 0)
	d.f.SetFont(family, "", bodySize-1)
	d.f.MultiCell(d.width()-keyWidth, lineHeight, oneLine(value), "", "L", false)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
