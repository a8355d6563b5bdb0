package notify

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/mail"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

func smtpSender(t *testing.T, ts *testSMTP, mode TLSMode, user, password string) *SMTPSender {
	t.Helper()
	cfg := SMTPConfig{Addr: ts.addr, Username: user, Password: password, From: "Contracts <contracts@example.com>", TLS: mode}
	if ts.roots != nil {
		cfg.TLSConfig = &tls.Config{RootCAs: ts.roots}
	}
	s, err := NewSMTPSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
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

// TestSMTPClosesItsConnection: however a session ends (a refused or
// unanswered QUIT, a refused RSET after the message, a refused login, a
// server without the STARTTLS the sender requires), the sender closes
// its socket; and a message the server accepted is sent, never an error
// that would send it again.
func TestSMTPClosesItsConnection(t *testing.T) {
	tests := []struct {
		name     string
		mode     TLSMode
		user     string
		replies  map[string]string // by command; "" never answers
		wantSent bool
	}{
		{"QUIT refused after the message", TLSNone, "", map[string]string{"QUIT": "500 no"}, true},
		{"QUIT refused after a refused recipient", TLSNone, "", map[string]string{"RCPT": "550 no such user", "QUIT": "500 no"}, false},
		{"QUIT never answered", TLSNone, "", map[string]string{"QUIT": ""}, true},
		{"RSET refused after the message", TLSNone, "", map[string]string{"RSET": "500 no"}, true},
		{"login refused", TLSNone, "bot", map[string]string{"AUTH": "535 bad credentials"}, false},
		{"STARTTLS required, not offered", TLSStartTLS, "", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, closed := scriptedSMTP(t, tt.replies)
			s, err := NewSMTPSender(SMTPConfig{Addr: addr, From: "contracts@example.com", TLS: tt.mode, Timeout: 3 * time.Second,
				Username: tt.user, Password: "pw"})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Send(context.Background(), Message{Channel: Email, To: "a@example.org", Subject: "s", Text: "x"})
			if (err == nil) != tt.wantSent {
				t.Errorf("Send = %v, want sent %v", err, tt.wantSent)
			}
			if !<-closed {
				t.Error("the sender left the connection open")
			}
		})
	}
}

// scriptedSMTP serves one SMTP session on a loopback port, answering each
// command as replies says ("" never answers) or else as a plain server
// does (EHLO offers AUTH PLAIN, no STARTTLS), and reports on closed
// whether the client closed the socket: false if it went ten seconds
// without a word or close.
func scriptedSMTP(t *testing.T, replies map[string]string) (addr string, closed <-chan bool) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	done := make(chan bool, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- false
			return
		}
		defer c.Close()
		r := bufio.NewReader(c)
		reply := func(s string) { fmt.Fprintf(c, "%s\r\n", s) }
		reply("220 localhost ESMTP")
		for inData := false; ; {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, err := r.ReadString('\n')
			if err != nil {
				done <- err == io.EOF
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if inData {
				if line == "." {
					inData = false
					reply("250 queued")
				}
				continue
			}
			cmd := strings.ToUpper(strings.SplitN(line, " ", 2)[0])
			if answer, ok := replies[cmd]; ok {
				if answer != "" {
					reply(answer)
				}
				continue
			}
			switch cmd {
			case "EHLO":
				reply("250-localhost")
				reply("250-AUTH PLAIN")
				reply("250 8BITMIME")
			case "DATA":
				inData = true
				reply("354 go on")
			case "QUIT":
				reply("221 bye")
			default: // MAIL, RCPT, NOOP, RSET
				reply("250 ok")
			}
		}
	}()
	return l.Addr().String(), done
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
