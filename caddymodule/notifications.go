package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/notify"
)

// Notification delivery. The outbox and its worker belong to the shared
// state: one worker per database and process, because during a reload the
// new config starts before the old one stops, and two workers would send
// messages twice (the outbox refuses a second one). Each config builds its
// own senders from its smtp and sms options; the config that starts last
// installs them, and the worker's senders delegate to whatever is
// installed at the time of each attempt.

// senders are one config's ways to deliver: SMTP or .eml files for
// e-mail, the HTTP shipper (or nothing) for SMS.
type senders struct {
	email notify.Sender
	sms   notify.Sender
}

// delegate is the worker's sender of one channel: it sends through the
// sender of the config installed last.
type delegate struct {
	st      *state
	channel notify.Channel
}

func (d delegate) Send(ctx context.Context, m notify.Message) error {
	var s notify.Sender
	if cur := d.st.senders.Load(); cur != nil {
		if d.channel == notify.SMS {
			s = cur.sms
		} else {
			s = cur.email
		}
	}
	if s == nil {
		return fmt.Errorf("no %s sender is configured", d.channel)
	}
	return s.Send(ctx, m)
}

// newWorker makes the state's delivery worker, counting every attempt in
// keygate_notifications_total. It starts with the first installed senders.
func (s *state) newWorker(sendTimeout time.Duration, logger *zap.Logger) {
	s.worker = notify.NewWorker(s.outbox, notify.WorkerConfig{
		SendTimeout: sendTimeout,
		Email:       delegate{st: s, channel: notify.Email},
		SMS:         delegate{st: s, channel: notify.SMS},
		OnOutcome: func(channel, outcome string) {
			metrics.notifications.WithLabelValues(channel, outcome).Inc()
		},
		Logger: logger.Named("notify"),
	})
}

// useSenders installs a config's senders, returning the ones it replaced,
// and, the first time, starts the
// worker, so that messages left by an earlier process are first tried
// with a sender in place rather than failing for want of one.
func (s *state) useSenders(snd *senders) (previous *senders) {
	previous = s.senders.Swap(snd)
	s.startWorker.Do(func() {
		s.workerDone = make(chan struct{})
		s.delivering.Store(true)
		go func() {
			defer close(s.workerDone)
			defer s.delivering.Store(false)
			if err := s.worker.Run(context.Background()); err != nil {
				s.logger.Error("notification worker", zap.Error(err))
			}
		}()
	})
	return previous
}

// stopWorker ends delivery before the database closes; an attempt in
// flight finishes and is recorded.
func (s *state) stopWorker() {
	s.worker.Stop()
	if s.workerDone != nil {
		<-s.workerDone
	}
}

// buildSenders makes the senders of a's smtp and sms options, reading
// their secrets from files: SMTP when smtp is set, else .eml files in
// <data_dir>/mail/; the SMS shipper when sms is set.
func (a *App) buildSenders() (*senders, error) {
	snd := new(senders)
	if c := a.SMTP; c != nil {
		password, err := readSecret(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("smtp password_file: %w", err)
		}
		if c.Username != "" && password == "" {
			return nil, errors.New("smtp username needs a password_file")
		}
		if snd.email, err = notify.NewSMTPSender(notify.SMTPConfig{
			Addr: c.Address, Username: c.Username, Password: password, From: c.From, TLS: notify.TLSMode(c.TLS),
		}); err != nil {
			return nil, err
		}
	} else {
		dir, err := filepath.Abs(filepath.Join(a.DataDir, "mail"))
		if err != nil {
			return nil, err
		}
		if snd.email, err = notify.NewEMLSender(dir, emlFrom(a.PublicBaseURL)); err != nil {
			return nil, err
		}
	}
	if c := a.SMS; c != nil {
		token, err := readSecret(c.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("sms token_file: %w", err)
		}
		if snd.sms, err = notify.NewSMSSender(notify.SMSConfig{URL: c.URL, Token: token, From: c.From}); err != nil {
			return nil, err
		}
	}
	return snd, nil
}

// readSecret reads a secret file without its trailing line break; no
// file is no secret.
func readSecret(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// emlFrom is the sender of .eml files: keygate at the public host, or at
// localhost when that host makes no address.
func emlFrom(publicBaseURL string) string {
	if u, err := url.Parse(publicBaseURL); err == nil && u.Hostname() != "" {
		from := "Contracts <keygate@" + u.Hostname() + ">"
		if _, err := mail.ParseAddress(from); err == nil {
			return from
		}
	}
	return "Contracts <keygate@localhost>"
}

// dropSenders undoes useSenders when the config that installed snd stops
// while its senders are still the installed ones: a reload that failed
// after this config started leaves the running config's senders in place.
func (s *state) dropSenders(snd, previous *senders) {
	if previous != nil {
		s.senders.CompareAndSwap(snd, previous)
	}
}
