// Package mailtest is a real SMTP server (github.com/emersion/go-smtp) for
// tests: it listens on a loopback port without TLS or authentication,
// decodes what it accepts (headers, text, attachments) and can refuse the
// next messages to exercise retries. Tests import it, and the soak's mail
// sink (cmd/keygate-bench) reads one-time passwords with Parse.
package mailtest

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Mail is an accepted e-mail, decoded.
type Mail struct {
	// Rcpt are the envelope recipients.
	Rcpt []string
	// To is the address of the To header.
	To        string
	Subject   string
	MessageID string
	// Text is the text/plain body.
	Text string
	// Attachments maps file names to contents.
	Attachments map[string][]byte
}

// Server records the e-mails it accepts.
type Server struct {
	// Addr is host:port of the server.
	Addr string
	srv  *smtp.Server

	mu       sync.Mutex
	received []Mail
	failNext int
	attempts int
	delay    time.Duration
}

// Start runs a server on a free loopback port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOn(t, "127.0.0.1:0")
}

// StartOn runs a server on addr until the test ends: for a test that
// points a gateway at an address where nothing listens yet.
func StartOn(t testing.TB, addr string) *Server {
	t.Helper()
	s := &Server{}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &session{srv: s}, nil
	}))
	s.srv.Domain = "localhost"
	s.srv.ReadTimeout = 10 * time.Second
	s.srv.WriteTimeout = 10 * time.Second
	s.srv.MaxMessageBytes = 32 << 20
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	go s.srv.Serve(l)
	t.Cleanup(func() { s.srv.Close() })
	return s
}

// FailNext refuses the next n messages with a temporary error (451).
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext = n
}

// SetDelay makes the server wait d after it has read each message before
// it answers (and keeps it), as a slow server does, so that a test can
// catch a delivery in flight. A client that goes away meanwhile does not
// stop the message from being kept: the server accepted it, the client
// never heard. Zero, the default, answers at once.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Attempts is the number of messages offered so far, refused or not.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// All returns the accepted mails in order.
func (s *Server) All() []Mail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Mail(nil), s.received...)
}

// To returns the accepted mails to addr whose subject starts with prefix.
func (s *Server) To(addr, prefix string) []Mail {
	var out []Mail
	for _, m := range s.All() {
		if m.To == addr && strings.HasPrefix(m.Subject, prefix) {
			out = append(out, m)
		}
	}
	return out
}

type session struct {
	srv  *Server
	rcpt []string
}

func (s *session) Mail(string, *smtp.MailOptions) error { return nil }

func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.rcpt = append(s.rcpt, to)
	return nil
}

func (s *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.srv.mu.Lock()
	s.srv.attempts++
	delay := s.srv.delay
	s.srv.mu.Unlock()
	time.Sleep(delay)
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	if s.srv.failNext > 0 {
		s.srv.failNext--
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 0, 0}, Message: "try again later"}
	}
	m, err := Parse(raw)
	if err != nil {
		return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: err.Error()}
	}
	m.Rcpt = s.rcpt
	s.srv.received = append(s.srv.received, m)
	return nil
}

func (s *session) Reset()        { s.rcpt = nil }
func (s *session) Logout() error { return nil }

// Parse decodes an RFC 5322 message: To, Subject, Message-ID, the
// text/plain parts and the attachments, whatever the MIME nesting and
// transfer encodings.
func Parse(raw []byte) (Mail, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Mail{}, err
	}
	var dec mime.WordDecoder
	subject, err := dec.DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		return Mail{}, err
	}
	to, err := mail.ParseAddress(msg.Header.Get("To"))
	if err != nil {
		return Mail{}, err
	}
	m := Mail{To: to.Address, Subject: subject, MessageID: msg.Header.Get("Message-Id"), Attachments: map[string][]byte{}}
	return m, walk(msg.Header, msg.Body, &m)
}

type header interface{ Get(string) string }

func walk(h header, body io.Reader, m *Mail) error {
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return err
	}
	if strings.HasPrefix(mt, "multipart/") {
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if err := walk(p.Header, p, m); err != nil {
				return err
			}
		}
	}
	switch strings.ToLower(h.Get("Content-Transfer-Encoding")) {
	case "quoted-printable":
		body = quotedprintable.NewReader(body)
	case "base64":
		body = base64.NewDecoder(base64.StdEncoding, &lineJoiner{r: body})
	}
	data, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if _, dp, err := mime.ParseMediaType(h.Get("Content-Disposition")); err == nil && dp["filename"] != "" {
		m.Attachments[dp["filename"]] = data
		return nil
	}
	if mt == "text/plain" {
		m.Text += string(data)
	}
	return nil
}

// lineJoiner drops line breaks from base64 text.
type lineJoiner struct{ r io.Reader }

func (l *lineJoiner) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	j := 0
	for _, c := range p[:n] {
		if c != '\r' && c != '\n' {
			p[j] = c
			j++
		}
	}
	return j, err
}
