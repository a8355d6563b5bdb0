package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// captured records what it is asked to send.
type captured struct {
	mu   sync.Mutex
	msgs []Message
}

func (c *captured) Send(_ context.Context, m Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
	return nil
}

func (c *captured) all() []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Message(nil), c.msgs...)
}

// TestOutboxSealsContent: a queued one-time password, signing link and
// attachment are nowhere in the database (file or rows), and the worker
// still delivers them as they were queued.
func TestOutboxSealsContent(t *testing.T) { storetest.Run(t, testOutboxSealsContent) }

func testOutboxSealsContent(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	const otp, link, subject = "493817", "https://sign.example.com/sign/0sEcReTlInK", "Your one-time password for NDA"
	pdf := bytes.Repeat([]byte("%PDF-signature-of-Zoe "), attChunk/8) // spans chunks
	sent := Message{Channel: Email, To: "zoe@example.org", Subject: subject, Ref: "c1",
		Text: "your one-time password is " + otp + "; your link is " + link, HTML: "<p>" + otp + "</p>",
		Attachments: []Attachment{{Name: "nda-signed.pdf", MediaType: "application/pdf", Data: pdf}}}
	sms := Message{Channel: SMS, To: "+15550100123", Text: otp + " is your password"}
	enqueue(t, db, ob, sent, sms)
	raw := stored(t, db)
	if !bytes.Contains(raw, []byte("zoe@example.org")) {
		t.Fatal("the dump does not hold the outbox")
	}
	for _, secret := range []string{otp, link, subject, "%PDF-signature-of-Zoe"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the database holds %q", secret)
		}
	}

	db = reopen(t, db)
	ob = newOutbox(t, db)
	var email, text captured
	runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: &email, SMS: &text})))
	testwait.For(t, testwait.Generous, "delivery", func() bool { return len(email.all()) == 1 && len(text.all()) == 1 })
	got := email.all()[0]
	if got.Subject != sent.Subject || got.Text != sent.Text || got.HTML != sent.HTML || got.To != sent.To ||
		len(got.Attachments) != 1 || !bytes.Equal(got.Attachments[0].Data, pdf) {
		t.Errorf("delivered e-mail differs from the queued one: %+v", got)
	}
	if got := text.all()[0]; got.Text != sms.Text {
		t.Errorf("delivered text %q, want %q", got.Text, sms.Text)
	}
}

// TestOutboxDeliversClearRecords: a message queued by a version that did
// not seal (body and attachment in clear) is delivered after the upgrade;
// on PostgreSQL, such a record as the migration copies it.
func TestOutboxDeliversClearRecords(t *testing.T) { storetest.Run(t, testOutboxDeliversClearRecords) }

func testOutboxDeliversClearRecords(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	queued := time.Now().UTC().Add(-time.Minute)
	old := map[string]any{
		"channel": "email", "to": "zoe@example.org", "subject": "Please sign", "text": "Open https://sign.example.com/sign/abc",
		"html": "<a>x</a>", "ref": "c1", "queued": queued, "attempts": 2, "next": queued.UnixNano(),
		"attachments": []map[string]any{{"name": "a.pdf", "mediaType": "application/pdf", "size": 4}},
	}
	rec, err := json.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = db.Update(ctx, func(tx storage.Tx) error {
		if db.Backend() == pgdb.Name {
			_, err := pgdb.Of(tx).Exec(ctx, `INSERT INTO outbox (id, channel, recipient, ref, subject, body_text, body_html, attachments, queued, attempts, next_attempt)
				VALUES (7, 'email', 'zoe@example.org', 'c1', $1, $2, $3, '[{"name": "a.pdf", "mediaType": "application/pdf", "size": 4}]', $4, 2, $4)`,
				old["subject"], old["text"], old["html"], queued)
			if err != nil {
				return err
			}
			_, err = pgdb.Of(tx).Exec(ctx, "INSERT INTO outbox_chunks (message_id, attachment, chunk, data) VALUES (7, 0, 0, '%PDF')")
			return err
		}
		b, err := openBuckets(tx)
		if err != nil {
			return err
		}
		id, _ := b.msg.NextSequence()
		if err := b.msg.Put(idKey(id), rec); err != nil {
			return err
		}
		if err := b.att.Put(attKey(id, 0, 0), []byte("%PDF")); err != nil {
			return err
		}
		if err := b.ref.Put(refKey("c1", id), nil); err != nil {
			return err
		}
		return b.due.Put(dueKey(queued.UnixNano(), id), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	var email captured
	runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: &email})))
	testwait.For(t, testwait.Generous, "delivery", func() bool { return pending(t, db) == 0 })
	got := email.all()
	if len(got) != 1 || got[0].Subject != "Please sign" || got[0].Text != old["text"] || got[0].HTML != "<a>x</a>" ||
		len(got[0].Attachments) != 1 || string(got[0].Attachments[0].Data) != "%PDF" {
		t.Fatalf("delivered %+v", got)
	}
	if n := counts(t, db); n["att"]+n["due"]+n["ref"] != 0 {
		t.Errorf("left behind %v", n)
	}
}

// TestOutboxOtherMasterKey: under another master key a sealed message is
// not sent but kept and retried, so a restart with the right key still
// delivers it.
func TestOutboxOtherMasterKey(t *testing.T) { storetest.Run(t, testOutboxOtherMasterKey) }

func testOutboxOtherMasterKey(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	enqueue(t, db, ob, Message{Channel: Email, To: "zoe@example.org", Subject: "s", Text: "123456"})

	db = reopen(t, db)
	other, _ := seal.New(bytes.Repeat([]byte{7}, 32))
	wrong, err := NewOutbox(db, newBackend(t, db), other)
	if err != nil {
		t.Fatal(err)
	}
	var email captured
	var oc outcomes
	w := NewWorker(wrong, fastConfig(WorkerConfig{Email: &email, OnOutcome: oc.record, MaxAttempts: 1000}))
	go w.Run(context.Background())
	testwait.For(t, testwait.Generous, "a retry", func() bool { return oc.get("email/retry") > 0 })
	w.Stop()
	if len(email.all()) != 0 || pending(t, db) != 1 {
		t.Fatalf("under another key: sent %d, pending %d; want 0 and 1", len(email.all()), pending(t, db))
	}

	db = reopen(t, db)
	ob = newOutbox(t, db)
	runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: &email})))
	testwait.For(t, testwait.Generous, "delivery", func() bool { return len(email.all()) == 1 })
	if got := email.all()[0].Text; got != "123456" {
		t.Errorf("delivered %q", got)
	}
}
