package contractpdf

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/bidi"
)

// keyWidth is the width of the label column of the certificate.
const keyWidth = 42.0

// maxEventsShown bounds the trail listed per signer: the first and last
// half of a longer one (a signer who asked for a password every minute
// for a year) are shown, with a line saying how many are left out, so a
// certificate stays a document a person reads.
const maxEventsShown = 400

// Certificate renders the certificate of completion of a contract as a
// PDF of its own: the contract, the SHA-256 of its text and of its
// finalized PDF as sealed (finalizedSHA256, 64 hex digits), the
// contract's own events (creation, completion) and, for every signer,
// the name, contact and every recorded step in order with its time,
// client address and user agent. The finalized PDF ends with the same
// pages (Finalized).
func Certificate(in Input, finalizedSHA256 string) ([]byte, error) {
	sum := strings.ToLower(finalizedSHA256)
	if b, err := hex.DecodeString(sum); err != nil || len(b) != 32 {
		return nil, fmt.Errorf("contractpdf: %q is not a SHA-256 in hex", finalizedSHA256)
	}
	if len(in.Signers) == 0 {
		return nil, fmt.Errorf("contractpdf: contract has no signers")
	}
	d := newDocument(&in, "Certificate of completion: "+in.Name, fmt.Sprintf("Certificate · %s", in.ContractID))
	d.certificate(&in, sum)
	return d.bytes()
}

// certificate writes the certificate of completion of in from the
// current position on: for the certificate's own PDF, naming the
// finalized PDF by finalizedSHA256; with finalizedSHA256 empty, as the
// last pages of the finalized PDF, which cannot hold its own hash and
// are said to be part of it, under its seal. All else is the same in
// both.
func (d *document) certificate(in *Input, finalizedSHA256 string) {
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
	d.field("Text SHA-256", textSHA256(in.Body))
	if finalizedSHA256 != "" {
		d.field("Finalized PDF SHA-256", finalizedSHA256)
	} else {
		d.field("Finalized PDF", embeddedNote)
	}
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
}

// embeddedNote is what the certificate's pages in the finalized PDF say
// in place of its hash.
const embeddedNote = "this file: these are its last pages, under its one seal"

// textSHA256 is the SHA-256 of the contract's text as copied at its
// creation (its body, as UTF-8), in hex: anyone with the text (the
// tracker's page at the version named, the template) can check it.
func textSHA256(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
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
		d.block(d.text(timestamp(e.At), "B", smallSize+1), smallSize+1, lineHeight-1, 0)
		d.block(d.text(oneLine(e.What), "", bodySize-1), bodySize-1, lineHeight, 0)
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
	d.f.SetTextColor(90, 90, 90)
	if line := d.text(strings.Join(parts, " · "), "", originSize); width(line) <= d.width() {
		d.cell(line, originSize, 0, originSize*0.5, "L", 1)
	} else {
		for _, p := range parts {
			d.cell(d.fit(d.text(p, "", originSize), d.width(), originSize), originSize, 0, originSize*0.5, "L", 1)
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
// A value with Hebrew or Arabic letters is isolated (between U+2068 and
// U+2069, invisible), so that it is ordered right to left within itself
// and never draws the certificate's own words around it into its order:
// it stays between its quotes on the page.
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
	out := oneLine(b.String())
	for _, r := range out {
		if p, _ := bidi.LookupRune(r); p.Class() == bidi.R || p.Class() == bidi.AL {
			return "\u2068" + out + "\u2069"
		}
	}
	return out
}

// field writes one label and value row; long values wrap in their column.
func (d *document) field(key, value string) {
	d.ensureSpace(lineHeight)
	d.f.SetTextColor(90, 90, 90)
	d.cell(d.text(key, "", smallSize+1), smallSize+1, keyWidth, lineHeight, "L", 0)
	d.f.SetTextColor(0, 0, 0)
	d.block(d.text(oneLine(value), "", bodySize-1), bodySize-1, lineHeight, d.width()-keyWidth)
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}
