package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"strconv"
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

// SMTPSender delivers e-mails to an SMTP server, one connection per message.
type SMTPSender struct {
	cfg  SMTPConfig
	host string
	port int
}

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
	return &SMTPSender{cfg: cfg, host: host, port: port}, nil
}

// Send delivers m over a new connection. The deadline of ctx, if sooner
// than Timeout, bounds each exchange.
func (s *SMTPSender) Send(ctx context.Context, m Message) error {
	msg, err := compose(s.cfg.From, m)
	if err != nil {
		return err
	}
	timeout := s.cfg.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = max(min(timeout, time.Until(dl)), time.Millisecond)
	}
	opts := []gomail.Option{gomail.WithPort(s.port), gomail.WithTimeout(timeout)}
	// go-mail leaves the socket open when the session fails after the
	// connect (a refused EHLO, STARTTLS or login): the dialer keeps it to
	// be closed here. Not for implicit TLS: go-mail takes a dial of its
	// own for an unencrypted one, and would then choose no login
	// mechanism but SCRAM, NTLM or CRAM-MD5 (never PLAIN or LOGIN).
	var d dialer
	if s.cfg.TLS != TLSImplicit {
		opts = append(opts, gomail.WithDialContextFunc(d.DialContext))
	}
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
		return fmt.Errorf("smtp client: %w", err)
	}
	addr := net.JoinHostPort(s.host, strconv.Itoa(s.port))
	conn, err := client.DialToSMTPClientWithContext(ctx)
	if err != nil {
		d.close()
		return fmt.Errorf("smtp %s: %w", addr, err)
	}
	// Once the server has accepted the message, nothing after it (the
	// RSET go-mail sends, QUIT) may turn that into an error, which would
	// send the message a second time.
	if err := client.SendWithSMTPClient(conn, msg); err != nil && !msg.IsDelivered() {
		quit(client, conn)
		return fmt.Errorf("smtp %s: %w", addr, err)
	}
	quit(client, conn)
	return nil
}

// dialer dials as go-mail does by default and keeps the connection.
type dialer struct{ conn net.Conn }

func (d *dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := new(net.Dialer).DialContext(ctx, network, addr)
	if err == nil {
		d.conn = c
	}
	return c, err
}

// close closes the connection d dialled, if any.
func (d *dialer) close() {
	if d.conn != nil {
		_ = d.conn.Close()
	}
}

// quit ends the session on conn. go-mail closes the socket only when
// QUIT succeeds; after a refused or timed-out QUIT it is closed here, so
// a server that answers QUIT badly cannot hold a connection per message.
func quit(client *gomail.Client, conn *smtp.Client) {
	if err := client.CloseWithSMTPClient(conn); err != nil {
		_ = conn.Close()
	}
}
