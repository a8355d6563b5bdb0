package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strconv"
	"sync"
	"time"

	gomail "github.com/wneessen/go-mail"
	"github.com/wneessen/go-mail/smtp"
)

// TLSMode says how the SMTP connection is protected.
type TLSMode string

// The TLS modes of the smtp global option.
const (
	// TLSStartTLS upgrades a plain connection with STARTTLS and refuses a
	// server that does not offer it (default port 587).
	TLSStartTLS TLSMode = "starttls"
	// TLSImplicit speaks TLS from the first byte (default port 465).
	TLSImplicit TLSMode = "implicit"
	// TLSNone never encrypts (default port 25). A password is then only
	// sent to a server on the loopback interface.
	TLSNone TLSMode = "none"
)

// SMTPConfig is the smtp global option.
type SMTPConfig struct {
	// Addr is host:port; the port defaults by TLS mode.
	Addr     string
	Username string
	Password string
	// From is the sender, such as "Contracts <contracts@example.com>".
	From string
	// TLS defaults to TLSStartTLS.
	TLS TLSMode
	// TLSConfig, when set, replaces the TLS client settings (for a private
	// certificate authority); ServerName defaults to the host of Addr.
	TLSConfig *tls.Config
	// Timeout bounds connecting and each SMTP exchange [30s].
	Timeout time.Duration
}

// SMTPSender delivers e-mails to an SMTP server. A connection is kept
// open for KeepIdle after a message, so that a burst (the invitations of
// a contract of 26 signers) takes one connection, one TLS handshake and
// one AUTH, not one of each per message.
type SMTPSender struct {
	cfg  SMTPConfig
	host string
	port int

	// mu guards the kept connection only, never an exchange with the
	// server: a Close (a config stopping, under Caddy's config lock)
	// never waits for a send.
	mu sync.Mutex
	// client and conn are the connection kept from the last message, if
	// any; idle closes it once it has been idle for keepIdle, and gen
	// tells that timer whether the connection it was set for is still
	// the idle one.
	client   *gomail.Client
	conn     *smtp.Client
	idle     *time.Timer
	gen      uint64
	closed   bool
	keepIdle time.Duration // KeepIdle; shorter in tests
}

// KeepIdle is how long an SMTP connection stays open after a message,
// for the next one: well within the five minutes RFC 5321 gives a
// server to wait, and short enough that a quiet gateway holds none.
const KeepIdle = 5 * time.Second

// shortExchange bounds the NOOP that checks a kept connection and the
// QUIT that ends one: a relay that stopped answering (a connection a
// firewall dropped) costs that long, not a whole Timeout.
const shortExchange = 5 * time.Second

// NewSMTPSender checks cfg and returns its sender.
func NewSMTPSender(cfg SMTPConfig) (*SMTPSender, error) {
	if cfg.TLS == "" {
		cfg.TLS = TLSStartTLS
	}
	defaultPort := map[TLSMode]int{TLSStartTLS: 587, TLSImplicit: 465, TLSNone: 25}[cfg.TLS]
	if defaultPort == 0 {
		return nil, fmt.Errorf("notify: smtp tls mode %q is not starttls, implicit or none", cfg.TLS)
	}
	host, portStr, err := net.SplitHostPort(cfg.Addr)
	port := defaultPort
	if err != nil {
		host = cfg.Addr
	} else if port, err = strconv.Atoi(portStr); err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("notify: smtp address %q has an invalid port", cfg.Addr)
	}
	if host == "" {
		return nil, errors.New("notify: smtp address has no host")
	}
	if _, err := mail.ParseAddress(cfg.From); err != nil {
		return nil, fmt.Errorf("notify: smtp from %q is not an address: %w", cfg.From, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.TLSConfig != nil {
		cfg.TLSConfig = cfg.TLSConfig.Clone()
		if cfg.TLSConfig.ServerName == "" {
			cfg.TLSConfig.ServerName = host
		}
	}
	return &SMTPSender{cfg: cfg, host: host, port: port, keepIdle: KeepIdle}, nil
}

// Send delivers m, over the connection kept from the last message when
// it still answers, else over a new one. The deadline of ctx, if sooner
// than Timeout, bounds each exchange; such a send neither uses nor keeps
// a connection, whose exchanges go-mail bounds by Timeout. An error
// means m was not accepted; m is never sent twice by one call.
func (s *SMTPSender) Send(ctx context.Context, m Message) error {
	msg, err := compose(s.cfg.From, m)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(s.host, strconv.Itoa(s.port))
	timeout := s.timeout(ctx)
	if timeout == s.cfg.Timeout {
		if client, conn := s.take(); conn != nil {
			// go-mail's NOOP runs under the deadline left from the last
			// exchange; give it a short one of its own.
			_ = conn.UpdateDeadline(min(timeout, shortExchange))
			err := client.SendWithSMTPClient(conn, msg)
			if err == nil {
				s.put(client, conn)
				return nil
			}
			quit(client, conn)
			if accepted(err) {
				return nil
			}
			if !nothingSent(err) {
				return fmt.Errorf("smtp %s: %w", addr, err)
			}
			// The kept connection had gone (its NOOP failed) or refused
			// before DATA (a relay's limit of messages a connection):
			// nothing of m was sent, so a new connection sends it, in
			// the time left.
			timeout = s.timeout(ctx)
		}
	}
	client, err := s.newClient(timeout)
	if err != nil {
		return err
	}
	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", addr, err)
	}
	err = client.SendWithSMTPClient(conn, msg)
	if err != nil || timeout != s.cfg.Timeout {
		// Not a connection to keep: one that failed, or one bounded by
		// a deadline sooner than Timeout. A failing QUIT must not turn
		// an accepted message into an error, which would send it a
		// second time.
		quit(client, conn)
		if !accepted(err) {
			return fmt.Errorf("smtp %s: %w", addr, err)
		}
		return nil
	}
	s.put(client, conn)
	return nil
}

// timeout is Timeout, or the time left before ctx's deadline if sooner.
func (s *SMTPSender) timeout(ctx context.Context) time.Duration {
	timeout := s.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	return timeout
}

// accepted reports whether err, from SendWithSMTPClient, leaves the
// message accepted by the server: no error, or only the RSET after an
// accepted DATA failing (whose connection is not kept). Reporting that
// as an error would have the worker send the message again.
func accepted(err error) bool {
	if err == nil {
		return true
	}
	var se *gomail.SendError
	return errors.As(err, &se) && se.Reason == gomail.ErrSMTPReset
}

// nothingSent reports whether err, from SendWithSMTPClient, failed
// before any of the message's content went out: the connection check,
// MAIL FROM, RCPT TO or the DATA command itself.
func nothingSent(err error) bool {
	var se *gomail.SendError
	if !errors.As(err, &se) {
		return false
	}
	switch se.Reason {
	case gomail.ErrConnCheck, gomail.ErrSMTPMailFrom, gomail.ErrSMTPRcptTo, gomail.ErrSMTPData:
		return true
	}
	return false
}

// take removes the kept connection, if any, from its idle timer and
// returns it for one send.
func (s *SMTPSender) take() (*gomail.Client, *smtp.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	client, conn := s.client, s.conn
	s.forget()
	return client, conn
}

// put keeps client and conn for the next message until keepIdle has
// passed; a closed sender, or one that kept another meanwhile (a send
// alongside), ends it instead.
func (s *SMTPSender) put(client *gomail.Client, conn *smtp.Client) {
	s.mu.Lock()
	if s.closed || s.conn != nil {
		s.mu.Unlock()
		quit(client, conn)
		return
	}
	s.client, s.conn = client, conn
	s.gen++
	gen := s.gen
	s.idle = time.AfterFunc(s.keepIdle, func() { s.closeIdle(gen) })
	s.mu.Unlock()
}

// forget drops the kept connection and stops its idle timer. Callers
// hold mu.
func (s *SMTPSender) forget() {
	if s.idle != nil {
		s.idle.Stop()
		s.idle = nil
	}
	s.client, s.conn = nil, nil
	s.gen++
}

// closeIdle ends the kept connection if it is still the one of gen.
func (s *SMTPSender) closeIdle(gen uint64) {
	s.mu.Lock()
	if s.conn == nil || s.gen != gen {
		s.mu.Unlock()
		return
	}
	client, conn := s.client, s.conn
	s.forget()
	s.mu.Unlock()
	quit(client, conn)
}

// Close ends the kept connection (QUIT) and keeps none from now on,
// without waiting for a send in flight, which ends its own connection.
// Send still works after Close, with a connection per message.
func (s *SMTPSender) Close() {
	s.mu.Lock()
	s.closed = true
	client, conn := s.client, s.conn
	s.forget()
	s.mu.Unlock()
	if conn != nil {
		quit(client, conn)
	}
}

// quit ends conn with QUIT under a short deadline, and closes the socket
// itself when QUIT fails, which go-mail then leaves open.
func quit(client *gomail.Client, conn *smtp.Client) {
	_ = conn.UpdateDeadline(shortExchange)
	if err := client.CloseWithSMTPClient(conn); err != nil {
		_ = conn.Close()
	}
}

// newClient is a go-mail client for one connection with exchanges
// bounded by timeout.
func (s *SMTPSender) newClient(timeout time.Duration) (*gomail.Client, error) {
	opts := []gomail.Option{gomail.WithPort(s.port), gomail.WithTimeout(timeout)}
	switch s.cfg.TLS {
	case TLSStartTLS:
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	case TLSImplicit:
		opts = append(opts, gomail.WithSSL())
	case TLSNone:
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if s.cfg.TLSConfig != nil {
		opts = append(opts, gomail.WithTLSConfig(s.cfg.TLSConfig))
	}
	if s.cfg.Username != "" {
		// On an encrypted connection the strongest mechanism the server
		// offers is used; in the clear only PLAIN, which go-mail allows
		// to a loopback server only.
		auth := gomail.SMTPAuthAutoDiscover
		if s.cfg.TLS == TLSNone {
			auth = gomail.SMTPAuthPlain
		}
		opts = append(opts, gomail.WithSMTPAuth(auth), gomail.WithUsername(s.cfg.Username), gomail.WithPassword(s.cfg.Password))
	}
	client, err := gomail.NewClient(s.host, opts...)
	if err != nil {
		return nil, fmt.Errorf("smtp client: %w", err)
	}
	return client, nil
}
