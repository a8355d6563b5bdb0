package notify

import (
	"bytes"
	"mime"
	"mime/multipart"
	"net/mail"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Names and subjects carry whatever a contract's creator typed. Whatever
// it is, the message has exactly its own headers, every header line is
// ASCII and short, and non-ASCII text is RFC 2047 encoded and decodes back.
func TestHostileHeaders(t *testing.T) {
	long := strings.Repeat("Zoë Ångström 契約 ", 40)
	emoji := strings.Repeat("😀", 255) // a contract name at its limit, 4 bytes a rune
	tests := []struct {
		name, from, to, subject string
	}{
		{"plain", "Contracts <contracts@example.com>", "ann@example.com", "Please sign “NDA”"},
		{"non-ASCII subject", "Contracts <contracts@example.com>", "ann@example.com", "Zoë Ångström signed “Mietvertrag für Büro”"},
		{"non-ASCII sender name", "Verträge Zoë <contracts@example.com>", "ann@example.com", "x"},
		{"non-ASCII recipient name", "Contracts <contracts@example.com>", "Zoë Ångström <zoe@example.com>", "x"},
		{"header text in a subject", "Contracts <contracts@example.com>", "ann@example.com", "Hi: Bcc: x@evil.example To: y@evil.example"},
		{"over-long subject", "Contracts <contracts@example.com>", "ann@example.com", long},
		{"longest name in four-byte runes", "Contracts <contracts@example.com>", "ann@example.com", emoji},
		// Sent as typed, so a reader decodes it as text; it adds no header.
		{"encoded-word lookalike", "Contracts <contracts@example.com>", "ann@example.com", "=?UTF-8?q?Bcc:_x@evil.example?="},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The attachment is named after the contract, as the signed PDF is.
			attachment := Attachment{Name: tc.subject + "-signed.pdf", MediaType: "application/pdf", Data: []byte("%PDF-1.7")}
			msg, err := compose(tc.from, Message{Channel: Email, To: tc.to, Subject: tc.subject, Text: "body",
				Attachments: []Attachment{attachment}, ID: 7, Queued: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)})
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if _, err := msg.WriteTo(&b); err != nil {
				t.Fatal(err)
			}
			raw := b.Bytes()
			// Every header line, the parts' headers included: the body parts
			// are base64 or quoted-printable, so only headers could carry
			// raw bytes.
			for _, line := range strings.Split(string(raw), "\r\n") {
				if len(line) > 998 {
					t.Errorf("header line of %d bytes", len(line))
				}
				for i := 0; i < len(line); i++ {
					if line[i] >= 0x80 || (line[i] < 0x20 && line[i] != '\t') {
						t.Fatalf("raw byte %#x in header line %q", line[i], line)
					}
				}
			}
			m, err := mail.ReadMessage(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for k := range m.Header {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			want := []string{"Content-Type", "Date", "From", "Message-Id", "Mime-Version", "Subject", "To"}
			if !slices.Equal(keys, want) {
				t.Fatalf("headers %v, want %v", keys, want)
			}
			// The attachment keeps a name, at most maxMailFileName runes,
			// ending in its extension.
			_, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
			if err != nil {
				t.Fatal(err)
			}
			mr := multipart.NewReader(m.Body, params["boundary"])
			var names []string
			for {
				part, err := mr.NextPart()
				if err != nil {
					break
				}
				if fn := part.FileName(); fn != "" {
					names = append(names, fn)
				}
			}
			var dec mime.WordDecoder
			if len(names) != 1 {
				t.Fatalf("attachment names %q", names)
			}
			if fn, err := dec.DecodeHeader(names[0]); err != nil || !strings.HasSuffix(fn, ".pdf") || utf8.RuneCountInString(fn) > maxMailFileName ||
				utf8.RuneCountInString(attachment.Name) <= maxMailFileName && fn != attachment.Name && !strings.HasPrefix(tc.subject, "=?") {
				t.Errorf("attachment name %q (%v) for %q", fn, err, attachment.Name)
			}

			subject, err := dec.DecodeHeader(m.Header.Get("Subject"))
			if lookalike := strings.HasPrefix(tc.subject, "=?"); err != nil || subject != tc.subject && !lookalike {
				t.Errorf("Subject decodes to %q (%v), want %q", subject, err, tc.subject)
			}
			to, err := mail.ParseAddressList(m.Header.Get("To"))
			wantTo, _ := mail.ParseAddress(tc.to)
			if err != nil || len(to) != 1 || to[0].Address != wantTo.Address || to[0].Name != wantTo.Name {
				t.Errorf("To %q (%v), want %v", m.Header.Get("To"), err, wantTo)
			}
			from, err := mail.ParseAddress(m.Header.Get("From"))
			wantFrom, _ := mail.ParseAddress(tc.from)
			if err != nil || from.Name != wantFrom.Name || from.Address != wantFrom.Address {
				t.Errorf("From %q (%v), want %v", m.Header.Get("From"), err, wantFrom)
			}
		})
	}
}

// A line break cannot reach a header: the outbox refuses such a message at
// Enqueue, and a sender with such a From cannot be made.
func TestHostileLineBreaksRefused(t *testing.T) {
	for _, m := range []Message{
		{Channel: Email, To: "ann@example.com\r\nBcc: x@evil.example", Subject: "s", Text: "t"},
		{Channel: Email, To: "ann@example.com\nBcc: x@evil.example", Subject: "s", Text: "t"},
		{Channel: Email, To: "\"Ann\r\nBcc: x@evil.example\" <ann@example.com>", Subject: "s", Text: "t"},
		{Channel: Email, To: "ann@example.com", Subject: "s\r\nBcc: x@evil.example", Text: "t"},
		{Channel: Email, To: "ann@example.com", Subject: "s\nBcc: x@evil.example", Text: "t"},
		{Channel: Email, To: "ann@example.com", Subject: "s", Text: "t",
			Attachments: []Attachment{{Name: "a.pdf\r\nBcc: x@evil.example", MediaType: "application/pdf", Data: []byte("%PDF")}}},
	} {
		if err := m.validate(); err == nil {
			t.Errorf("message accepted: To %q Subject %q", m.To, m.Subject)
		}
	}
	for _, from := range []string{"Contracts\r\nBcc: x@evil.example <c@example.com>", "c@example.com\r\nBcc: x@evil.example"} {
		if _, err := NewEMLSender(t.TempDir(), from); err == nil {
			t.Errorf("EML sender made with From %q", from)
		}
		if _, err := NewSMTPSender(SMTPConfig{Addr: "127.0.0.1:25", From: from, TLS: TLSNone}); err == nil {
			t.Errorf("SMTP sender made with From %q", from)
		}
	}
}
