package notify

import (
	"bytes"
	"fmt"
	"net/mail"
	"path"
	"strings"

	gomail "github.com/wneessen/go-mail"
)

// compose builds the MIME message for an e-mail. Date and Message-ID come
// from the outbox's ID and queue time, so a redelivered message is the same
// message to the receiving side.
func compose(from string, m Message) (*gomail.Msg, error) {
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	if err := msg.From(from); err != nil {
		return nil, fmt.Errorf("sender address %q: %w", from, err)
	}
	if err := msg.To(m.To); err != nil {
		return nil, fmt.Errorf("recipient address: %w", err)
	}
	msg.Subject(m.Subject)
	if m.ID != 0 && !m.Queued.IsZero() {
		msg.SetDateWithValue(m.Queued)
		msg.SetMessageIDWithValue(fmt.Sprintf("keygate.%d.%d@%s", m.Queued.UnixNano(), m.ID, domainOf(from)))
	} else {
		msg.SetDate()
		msg.SetMessageID()
	}
	msg.SetBodyString(gomail.TypeTextPlain, m.Text)
	if m.HTML != "" {
		msg.AddAlternativeString(gomail.TypeTextHTML, m.HTML)
	}
	for _, a := range m.Attachments {
		msg.AttachReadSeeker(mailFileName(a.Name), bytes.NewReader(a.Data), gomail.WithFileContentType(gomail.ContentType(a.MediaType)))
	}
	return msg, nil
}

// maxMailFileName bounds an attachment's name in runes. go-mail writes
// the RFC 2047 encoded name on one header line, twice (Content-Type and
// Content-Disposition); at up to 12 characters a rune (four bytes, each
// "=XX"), 48 runes keep that line well under RFC 5322's 998, which a
// contract name of 255 non-Latin characters would otherwise exceed, and
// the mail would be refused.
const maxMailFileName = 48

// mailFileName shortens name to maxMailFileName runes, keeping its
// extension and marking the cut.
func mailFileName(name string) string {
	r := []rune(name)
	if len(r) <= maxMailFileName {
		return name
	}
	ext := []rune(path.Ext(name))
	if len(ext) > 8 {
		ext = nil
	}
	return string(r[:maxMailFileName-1-len(ext)]) + "…" + string(ext)
}

// domainOf is the domain of the sender address, the usual right-hand side
// of a Message-ID.
func domainOf(from string) string {
	if a, err := mail.ParseAddress(from); err == nil {
		if i := strings.LastIndexByte(a.Address, '@'); i >= 0 && i+1 < len(a.Address) {
			return a.Address[i+1:]
		}
	}
	return "keygate.invalid"
}
