package notify

import (
	"bytes"
	"mime"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestEMLFiles: without SMTP, each message becomes one .eml file that
// net/mail parses back, with its attachment intact.
func TestEMLFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mail")
	sender, err := NewEMLSender(dir, "Contracts <contracts@example.com>")
	if err != nil {
		t.Fatal(err)
	}
	db, ob := tempDB(t)
	runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: sender})))

	pdf := append([]byte("%PDF-1.7\n"), bytes.Repeat([]byte{0, 1, 2, 0xff}, 200000)...)
	enqueue(t, db, ob,
		Message{Channel: Email, To: "Zoë Ångström <zoe@example.org>", Subject: "Contract “NDA” completed", Text: "Attached is the signed contract.", HTML: "<p>Attached</p>",
			Attachments: []Attachment{{Name: "NDA – signed.pdf", MediaType: "application/pdf", Data: pdf}}},
		Message{Channel: Email, To: "dmitry@example.org", Subject: "Invitation", Text: "Дмитрий, please sign."},
	)
	testwait.For(t, testwait.Generous, "delivery", func() bool { return pending(t, db) == 0 })

	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("files = %v, want 2 .eml files and no temporaries", files)
	}
	byTo := map[string]*mail.Message{}
	for _, f := range files {
		if !strings.HasSuffix(f, ".eml") {
			t.Errorf("unexpected file %s", f)
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := mail.ReadMessage(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		to, err := msg.Header.AddressList("To")
		if err != nil || len(to) != 1 {
			t.Fatalf("To: %v %v", to, err)
		}
		byTo[to[0].Address] = msg
		if from, err := msg.Header.AddressList("From"); err != nil || from[0].Address != "contracts@example.com" {
			t.Errorf("From: %v %v", from, err)
		}
		if _, err := msg.Header.Date(); err != nil {
			t.Errorf("Date: %v", err)
		}
		if id := msg.Header.Get("Message-Id"); !strings.HasSuffix(id, "@example.com>") {
			t.Errorf("Message-ID %q", id)
		}
	}
	zoe := byTo["zoe@example.org"]
	if zoe == nil {
		t.Fatal("no file for zoe@example.org")
	}
	if subj, _ := new(mime.WordDecoder).DecodeHeader(zoe.Header.Get("Subject")); subj != "Contract “NDA” completed" {
		t.Errorf("subject = %q", subj)
	}
	if got := findAttachment(t, zoe, "NDA – signed.pdf"); !bytes.Equal(got, pdf) {
		t.Errorf("attachment differs: %d bytes, want %d", len(got), len(pdf))
	}
	if byTo["dmitry@example.org"] == nil {
		t.Fatal("no file for dmitry@example.org")
	}
}

// TestEMLRedeliveryReplaces: sending the same outbox message again (after a
// crash between write and dequeue) rewrites its file instead of adding one.
func TestEMLRedeliveryReplaces(t *testing.T) {
	dir := t.TempDir()
	sender, err := NewEMLSender(dir, "contracts@example.com")
	if err != nil {
		t.Fatal(err)
	}
	m := Message{Channel: Email, To: "a@example.org", Subject: "s", Text: "t", ID: 7, Queued: time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)}
	for range 2 {
		if err := sender.Send(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "20261122T101500.000000000Z-000000000007.eml" {
		t.Fatalf("entries = %v", entries)
	}
}
