package main

import (
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/keygate/keygate/internal/testkit/mailtest"
)

// mailSink is the soak's SMTP server on loopback (the gateway's `smtp`
// block points at it, `tls none`). It keeps only what the soak reads back,
// the newest one-time password per recipient, and counts the rest.
type mailSink struct {
	addr string
	srv  *smtp.Server

	mu       sync.Mutex
	otps     map[string]string // recipient → newest password
	received int
	bytes    int64
}

func startMailSink() (*mailSink, error) {
	m := &mailSink{otps: map[string]string{}}
	m.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &sinkSession{sink: m}, nil
	}))
	m.srv.Domain = "localhost"
	m.srv.ReadTimeout = 30 * time.Second
	m.srv.WriteTimeout = 30 * time.Second
	m.srv.MaxMessageBytes = 32 << 20
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	m.addr = l.Addr().String()
	go m.srv.Serve(l)
	return m, nil
}

func (m *mailSink) close() { m.srv.Close() }

// counts returns the number of accepted messages and their bytes.
func (m *mailSink) counts() (int, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.received, m.bytes
}

// takeOTP waits up to limit for a password mailed to rcpt and removes it.
func (m *mailSink) takeOTP(rcpt string, limit time.Duration) (string, bool) {
	deadline := time.Now().Add(limit)
	for {
		m.mu.Lock()
		code, ok := m.otps[rcpt]
		if ok {
			delete(m.otps, rcpt)
		}
		m.mu.Unlock()
		if ok || time.Now().After(deadline) {
			return code, ok
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type sinkSession struct {
	sink *mailSink
	rcpt []string
}

func (s *sinkSession) Mail(string, *smtp.MailOptions) error { return nil }

func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.rcpt = append(s.rcpt, strings.ToLower(to))
	return nil
}

// otpPattern finds the password in the text of the signing lifecycle's
// one-time password mail ("your one-time password to sign ... is 123456").
var otpPattern = regexp.MustCompile(`one-time password to sign [\s\S]*? is\s+(\d{6})\b`)

func (s *sinkSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	// The sink keeps no message, only the password it carries; a
	// message that does not parse carries none.
	var text string
	if m, err := mailtest.Parse(raw); err == nil {
		text = m.Text
	}
	s.sink.mu.Lock()
	defer s.sink.mu.Unlock()
	s.sink.received++
	s.sink.bytes += int64(len(raw))
	if m := otpPattern.FindStringSubmatch(text); m != nil {
		for _, rcpt := range s.rcpt {
			s.sink.otps[rcpt] = m[1]
		}
	}
	return nil
}

func (s *sinkSession) Reset()        { s.rcpt = nil }
func (s *sinkSession) Logout() error { return nil }
