package notify

import (
	"bytes"
	"fmt"
	"net/mail"
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
		msg.AttachReadSeeker(a.Name, bytes.NewReader(a.Data), gomail.WithFileContentType(gomail.ContentType(a.MediaType)))
	}
	return msg, nil
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
