package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	gomail "github.com/wneessen/go-mail"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

func smtpSender(t testing.TB, ts *testSMTP, mode TLSMode, user, password string) *SMTPSender {
	t.Helper()
	cfg := SMTPConfig{Addr: ts.addr, Username: user, Password: password, From: "Contracts <contracts@example.com>", TLS: mode}
	if ts.roots != nil {
		cfg.TLSConfig = &tls.Config{RootCAs: ts.roots}
	}
	s, err := NewSMTPSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestSMTPDeliversEachMessageOnce sends through a real SMTP server in each
// TLS mode, with and without AUTH PLAIN.
func TestSMTPDeliversEachMessageOnce(t *testing.T) {
	tests := []struct {
		name    string
		mode    TLSMode
		user    string
		wantTLS bool
	}{
		{"plain without auth", TLSNone, "", false},
		{"plain with AUTH PLAIN", TLSNone, "bot", false},
		{"starttls with AUTH PLAIN", TLSStartTLS, "bot", true},
		{"implicit tls with AUTH PLAIN", TLSImplicit, "bot", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := startSMTP(t, smtpSetup{mode: tt.mode, user: tt.user, password: "s3cret"})
			db, ob := tempDB(t)
			var oc outcomes
			w := NewWorker(ob, fastConfig(WorkerConfig{Email: smtpSender(t, ts, tt.mode, tt.user, "s3cret"), OnOutcome: oc.record}))
			runWorker(t, w)

			const n = 5
			pdf := bytes.Repeat([]byte("%PDF-1.7 finalized contract "), 40000) // > one attachment chunk
			for i := range n {
				m := Message{Channel: Email, To: fmt.Sprintf("signer%d@example.org", i), Subject: fmt.Sprintf("Contract %d – Zoë", i), Text: "Hello Zoë,\nplease sign.", Ref: "c1"}
				if i == 0 {
					m.HTML = "<p>Hello Zoë</p>"
					m.Attachments = []Attachment{{Name: "contract.pdf", MediaType: "application/pdf", Data: pdf}}
				}
				enqueue(t, db, ob, m)
			}
			testwait.For(t, testwait.Generous, "outbox to empty", func() bool { return pending(t, db) == 0 })

			got := ts.mails()
			if len(got) != n {
				t.Fatalf("server received %d messages, want %d", len(got), n)
			}
			seen := map[string]int{}
			for _, r := range got {
				seen[strings.Join(r.to, ",")]++
				if r.tls != tt.wantTLS {
					t.Errorf("tls = %v, want %v", r.tls, tt.wantTLS)
				}
				if r.user != tt.user {
					t.Errorf("authenticated as %q, want %q", r.user, tt.user)
				}
				if r.from != "contracts@example.com" {
					t.Errorf("MAIL FROM %q", r.from)
				}
			}
			for i := range n {
				if c := seen[fmt.Sprintf("signer%d@example.org", i)]; c != 1 {
					t.Errorf("signer%d received %d copies", i, c)
				}
			}
			if oc.get("email/sent") != n || oc.get("email/retry") != 0 {
				t.Errorf("outcomes = %v", oc.n)
			}
			if c := counts(t, db); c["att"]+c["due"]+c["ref"] != 0 {
				t.Errorf("outbox left entries behind: %v", c)
			}

			// The message with the attachment arrives whole.
			for _, r := range got {
				if r.to[0] != "signer0@example.org" {
					continue
				}
				subj, err := new(mime.WordDecoder).DecodeHeader(r.msg.Header.Get("Subject"))
				if err != nil || subj != "Contract 0 – Zoë" {
					t.Errorf("subject = %q, %v", subj, err)
				}
				att := findAttachment(t, r.msg, "contract.pdf")
				if !bytes.Equal(att, pdf) {
					t.Errorf("attachment differs: %d bytes, want %d", len(att), len(pdf))
				}
			}
		})
	}
}

// TestSMTPWrongPasswordFails: a refused login is a failed attempt (which
// the worker retries), never a message sent unauthenticated.
func TestSMTPWrongPasswordFails(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSStartTLS, user: "bot", password: "right"})
	s := smtpSender(t, ts, TLSStartTLS, "bot", "wrong")
	err := s.Send(context.Background(), Message{Channel: Email, To: "a@example.org", Text: "x"})
	if err == nil {
		t.Fatal("send with a wrong password succeeded")
	}
	if len(ts.mails()) != 0 {
		t.Fatal("message accepted without authentication")
	}
}

// TestSMTPStartTLSRequired: starttls mode refuses a server without STARTTLS
// instead of sending the password and the message in the clear.
func TestSMTPStartTLSRequired(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	s := smtpSender(t, ts, TLSStartTLS, "", "")
	if err := s.Send(context.Background(), Message{Channel: Email, To: "a@example.org", Text: "x"}); err == nil {
		t.Fatal("starttls mode sent over a server without STARTTLS")
	}
	if len(ts.mails()) != 0 {
		t.Fatal("message sent in the clear")
	}
}

// TestSMTPKeepsTheConnection: messages sent one after another share one
// connection (one TLS handshake, one AUTH), each delivered once; a
// connection the server hung up is replaced without the message being
// lost or sent twice; an idle one is closed after keepIdle, and Close
// ends it and keeps none after.
func TestSMTPKeepsTheConnection(t *testing.T) {
	for _, mode := range []TLSMode{TLSNone, TLSStartTLS} {
		t.Run(string(mode), func(t *testing.T) {
			ts := startSMTP(t, smtpSetup{mode: mode, user: "bot", password: "s3cret"})
			s := smtpSender(t, ts, mode, "bot", "s3cret")
			s.keepIdle = time.Hour // closed by the steps below, not by time
			ctx := context.Background()
			send := func(to string) {
				t.Helper()
				if err := s.Send(ctx, Message{Channel: Email, To: to, Subject: "Contract", Text: "please sign"}); err != nil {
					t.Fatalf("send to %s: %v", to, err)
				}
			}
			want := func(step string, mails, opened, closed int) {
				t.Helper()
				testwait.For(t, testwait.Generous, step, func() bool {
					o, c := ts.connections()
					return len(ts.mails()) == mails && o == opened && c == closed
				})
				if n := ts.dataAttempts(); n != mails {
					t.Fatalf("%s: %d DATA commands for %d mails", step, n, mails)
				}
			}

			for i := range 5 {
				send(fmt.Sprintf("signer%d@example.org", i))
			}
			want("five mails on one connection", 5, 1, 0)

			ts.hangUp() // as a server does with a connection idle too long
			want("the server hung up", 5, 1, 1)
			send("after@example.org")
			want("a new connection, the mail sent once", 6, 2, 1)

			s.Close()
			want("Close ends the connection", 6, 2, 2)
			send("closed1@example.org")
			send("closed2@example.org")
			want("after Close, a connection a mail", 8, 4, 4)
		})
	}
}

// TestSMTPClosesAnIdleConnection: a kept connection is closed once it
// has been idle for keepIdle, and the next mail opens another.
func TestSMTPClosesAnIdleConnection(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	s := smtpSender(t, ts, TLSNone, "", "")
	s.keepIdle = 50 * time.Millisecond
	for i := range 2 {
		if err := s.Send(context.Background(), Message{Channel: Email, To: "a@example.org", Text: "x"}); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, testwait.Generous, "the idle connection closed", func() bool {
			o, c := ts.connections()
			return o == i+1 && c == i+1
		})
	}
	if n := len(ts.mails()); n != 2 {
		t.Fatalf("%d mails", n)
	}
}

// TestSMTPRefusedOnAKeptConnection: a message the server refuses on a
// kept connection is an error (the worker retries it later), sent once,
// and the connection is not kept.
func TestSMTPRefusedOnAKeptConnection(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	s := smtpSender(t, ts, TLSNone, "", "")
	s.keepIdle = time.Hour
	ctx := context.Background()
	if err := s.Send(ctx, Message{Channel: Email, To: "a@example.org", Text: "x"}); err != nil {
		t.Fatal(err)
	}
	ts.failNext(1, 451)
	if err := s.Send(ctx, Message{Channel: Email, To: "b@example.org", Text: "x"}); err == nil {
		t.Fatal("a refused message reported sent")
	}
	if n := ts.dataAttempts(); n != 2 {
		t.Fatalf("%d DATA commands, want 2: the refused message was tried again", n)
	}
	if err := s.Send(ctx, Message{Channel: Email, To: "b@example.org", Text: "x"}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, testwait.Generous, "a new connection after the refusal", func() bool {
		o, c := ts.connections()
		return o == 2 && c == 1
	})
	if n := len(ts.mails()); n != 2 {
		t.Fatalf("%d mails", n)
	}
}

// TestSMTPKeptConnectionRefusesBeforeData: a kept connection that
// refuses MAIL FROM (a relay's limit of messages a connection) has sent
// nothing of the message, which a new connection then delivers, once.
func TestSMTPKeptConnectionRefusesBeforeData(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	s := smtpSender(t, ts, TLSNone, "", "")
	s.keepIdle = time.Hour
	ctx := context.Background()
	for _, to := range []string{"a@example.org", "b@example.org"} {
		if to == "b@example.org" {
			ts.mu.Lock()
			ts.failMail = 1
			ts.mu.Unlock()
		}
		if err := s.Send(ctx, Message{Channel: Email, To: to, Text: "x"}); err != nil {
			t.Fatalf("send to %s: %v", to, err)
		}
	}
	if n, d := len(ts.mails()), ts.dataAttempts(); n != 2 || d != 2 {
		t.Fatalf("%d mails in %d DATA commands, want 2 in 2", n, d)
	}
	testwait.For(t, testwait.Generous, "the refusing connection replaced", func() bool {
		o, c := ts.connections()
		return o == 2 && c == 1
	})
}

// TestSMTPShortDeadlineKeepsNothing: a send whose context ends sooner
// than Timeout neither uses the kept connection (whose exchanges go-mail
// bounds by Timeout) nor keeps its own.
func TestSMTPShortDeadlineKeepsNothing(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	s := smtpSender(t, ts, TLSNone, "", "")
	s.keepIdle = time.Hour
	if err := s.Send(context.Background(), Message{Channel: Email, To: "a@example.org", Text: "x"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.Send(ctx, Message{Channel: Email, To: "b@example.org", Text: "x"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The first connection stays kept; each short send had its own.
	testwait.For(t, testwait.Generous, "two connections of their own, closed", func() bool {
		o, c := ts.connections()
		return o == 3 && c == 2
	})
}

// TestSMTPSendsAlongsideTheIdleTimer: sends from two goroutines while
// kept connections expire almost at once deliver every message once (run
// with -race to see the timer, take, put and Close agree).
func TestSMTPSendsAlongsideTheIdleTimer(t *testing.T) {
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	s := smtpSender(t, ts, TLSNone, "", "")
	s.keepIdle = time.Microsecond
	const each = 40
	var wg sync.WaitGroup
	errs := make(chan error, 2*each)
	for g := range 2 {
		wg.Go(func() {
			for i := range each {
				if i == each/2 && g == 1 {
					s.Close() // the rest a connection each
				}
				errs <- s.Send(context.Background(), Message{Channel: Email, To: fmt.Sprintf("r%d-%d@example.org", g, i), Text: "x"})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	for _, r := range ts.mails() {
		seen[r.to[0]]++
	}
	if len(seen) != 2*each || ts.dataAttempts() != 2*each {
		t.Fatalf("%d recipients, %d DATA commands, want %d each", len(seen), ts.dataAttempts(), 2*each)
	}
	testwait.For(t, testwait.Generous, "every connection closed", func() bool {
		o, c := ts.connections()
		return o == c
	})
}

// TestSMTPAccepted: only a failed RSET after the DATA the server
// accepted counts as sent; any other failure is retried.
func TestSMTPAccepted(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no error", nil, true},
		{"RSET after DATA failed", &gomail.SendError{Reason: gomail.ErrSMTPReset}, true},
		{"RSET failure among joined errors", errors.Join(&gomail.SendError{Reason: gomail.ErrSMTPReset}), true},
		{"DATA refused", &gomail.SendError{Reason: gomail.ErrSMTPDataClose}, false},
		{"connection gone", &gomail.SendError{Reason: gomail.ErrConnCheck}, false},
		{"MAIL FROM refused", &gomail.SendError{Reason: gomail.ErrSMTPMailFrom}, false},
		{"not a send error", errors.New("dial tcp: refused"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := accepted(tt.err); got != tt.want {
				t.Fatalf("accepted = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewSMTPSenderRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  SMTPConfig
	}{
		{"unknown tls mode", SMTPConfig{Addr: "mail.example.com:587", From: "a@example.com", TLS: "ssl"}},
		{"bad port", SMTPConfig{Addr: "mail.example.com:x", From: "a@example.com"}},
		{"no host", SMTPConfig{Addr: ":587", From: "a@example.com"}},
		{"bad from", SMTPConfig{Addr: "mail.example.com:587", From: "not an address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewSMTPSender(tt.cfg); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// findAttachment returns the decoded body of the MIME part named name.
func findAttachment(t *testing.T, msg *mail.Message, name string) []byte {
	t.Helper()
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		t.Fatalf("message is %q, not multipart: %v", mt, err)
	}
	data, ok := walkParts(t, multipart.NewReader(msg.Body, params["boundary"]), name)
	if !ok {
		t.Fatalf("no attachment %q", name)
	}
	return data
}

func walkParts(t *testing.T, mr *multipart.Reader, name string) ([]byte, bool) {
	t.Helper()
	for {
		p, err := mr.NextPart() // decodes quoted-printable, not base64
		if err == io.EOF {
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		mt, params, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if strings.HasPrefix(mt, "multipart/") {
			if data, ok := walkParts(t, multipart.NewReader(p, params["boundary"]), name); ok {
				return data, true
			}
			continue
		}
		// go-mail writes a non-ASCII file name as an RFC 2047 word, as most
		// mail clients expect.
		if fn, err := new(mime.WordDecoder).DecodeHeader(p.FileName()); err != nil || fn != name {
			continue
		}
		raw, err := io.ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.EqualFold(p.Header.Get("Content-Transfer-Encoding"), "base64") {
			return decodeBase64(t, raw), true
		}
		return raw, true
	}
}

// BenchmarkSMTPSend: a message over the kept connection against one over
// a connection of its own (a closed sender keeps none), both to the test
// server on loopback, in plain SMTP and with STARTTLS.
func BenchmarkSMTPSend(b *testing.B) {
	for _, mode := range []TLSMode{TLSNone, TLSStartTLS} {
		for _, keep := range []bool{true, false} {
			name := string(mode) + "/a connection each"
			if keep {
				name = string(mode) + "/kept"
			}
			b.Run(name, func(b *testing.B) {
				ts := startSMTP(b, smtpSetup{mode: mode, user: "bot", password: "s3cret"})
				s := smtpSender(b, ts, mode, "bot", "s3cret")
				if !keep {
					s.Close()
				}
				m := Message{Channel: Email, To: "signer@example.org", Subject: "Contract", Text: "please sign"}
				b.ReportAllocs()
				for b.Loop() {
					if err := s.Send(context.Background(), m); err != nil {
						b.Fatal(err)
					}
				}
				s.Close()
			})
		}
	}
}
