package notify

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/mail"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// testSMTP is a real SMTP server (github.com/emersion/go-smtp) on a
// loopback port that records what it accepts.
type testSMTP struct {
	addr string
	// roots trusts the server's self-signed certificate.
	roots *x509.CertPool

	mu       sync.Mutex
	user     string // AUTH PLAIN is required when set
	password string
	received []receivedMail
	attempts int // DATA commands seen
	// failData answers that many next DATA commands with failErr.
	failData int
	failErr  *smtp.SMTPError
}

type receivedMail struct {
	from, user string
	to         []string
	tls        bool
	raw        []byte
	msg        *mail.Message
}

type smtpSetup struct {
	mode     TLSMode
	user     string
	password string
}

func startSMTP(t *testing.T, setup smtpSetup) *testSMTP {
	t.Helper()
	ts := &testSMTP{user: setup.user, password: setup.password}
	srv := smtp.NewServer(smtp.BackendFunc(func(c *smtp.Conn) (smtp.Session, error) {
		_, isTLS := c.TLSConnectionState()
		return &testSession{srv: ts, tls: isTLS}, nil
	}))
	srv.Domain = "localhost"
	srv.ReadTimeout = 10 * time.Second
	srv.WriteTimeout = 10 * time.Second
	srv.MaxMessageBytes = 32 << 20
	srv.AllowInsecureAuth = setup.mode == TLSNone

	var l net.Listener
	var err error
	switch setup.mode {
	case TLSNone:
		l, err = net.Listen("tcp", "127.0.0.1:0")
	case TLSStartTLS:
		srv.TLSConfig, ts.roots = selfSigned(t)
		l, err = net.Listen("tcp", "127.0.0.1:0")
	case TLSImplicit:
		var cfg *tls.Config
		cfg, ts.roots = selfSigned(t)
		l, err = tls.Listen("tcp", "127.0.0.1:0", cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	ts.addr = l.Addr().String()
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return ts
}

// failNext makes the next n DATA commands fail with code.
func (ts *testSMTP) failNext(n, code int) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.failData = n
	ts.failErr = &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 0, 0}, Message: "test failure"}
}

func (ts *testSMTP) mails() []receivedMail {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]receivedMail(nil), ts.received...)
}

func (ts *testSMTP) dataAttempts() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.attempts
}

type testSession struct {
	srv    *testSMTP
	tls    bool
	authed string
	from   string
	to     []string
}

func (s *testSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *testSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if username != s.srv.user || password != s.srv.password || s.srv.user == "" {
			return smtp.ErrAuthFailed
		}
		s.authed = username
		return nil
	}), nil
}

func (s *testSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.srv.user != "" && s.authed == "" {
		return smtp.ErrAuthRequired
	}
	s.from = from
	return nil
}

func (s *testSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *testSession) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.srv.mu.Lock()
	defer s.srv.mu.Unlock()
	s.srv.attempts++
	if s.srv.failData > 0 {
		s.srv.failData--
		return s.srv.failErr
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return errors.New("unparseable message")
	}
	s.srv.received = append(s.srv.received, receivedMail{from: s.from, user: s.authed, to: s.to, tls: s.tls, raw: raw, msg: msg})
	return nil
}

func (s *testSession) Reset() { s.from, s.to = "", nil }

func (s *testSession) Logout() error { return nil }

// selfSigned makes a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "keygate test smtp"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}
