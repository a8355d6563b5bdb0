package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestDropRef removes the pending messages of a deleted contract, with
// their attachment chunks and index entries, and leaves the others.
func TestDropRef(t *testing.T) { storetest.Run(t, testDropRef) }

func testDropRef(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	big := bytes.Repeat([]byte{0x42}, 3*attChunk+17)
	enqueue(t, db, ob,
		Message{Channel: Email, To: "a@example.org", Text: "1", Ref: "contract-a", Attachments: []Attachment{{Name: "f.pdf", MediaType: "application/pdf", Data: big}}},
		Message{Channel: SMS, To: "+15550100123", Text: "2", Ref: "contract-a"},
		Message{Channel: Email, To: "b@example.org", Text: "3", Ref: "contract-ab"}, // a ref that extends "contract-a"
		Message{Channel: Email, To: "c@example.org", Text: "4"},
	)
	if c := counts(t, db); c["msg"] != 4 || c["att"] != 4 || c["due"] != 4 || c["ref"] != 3 {
		t.Fatalf("before: %v", c)
	}
	if err := db.Update(context.Background(), func(tx storage.Tx) error { return ob.DropRef(tx, "contract-a") }); err != nil {
		t.Fatal(err)
	}
	if c := counts(t, db); c["msg"] != 2 || c["att"] != 0 || c["due"] != 2 || c["ref"] != 1 {
		t.Fatalf("after: %v", c)
	}

	// Only the others are delivered.
	ts := startSMTP(t, smtpSetup{mode: TLSNone})
	runWorker(t, NewWorker(ob, fastConfig(WorkerConfig{Email: smtpSender(t, ts, TLSNone, "", "")})))
	testwait.For(t, testwait.Generous, "delivery", func() bool { return pending(t, db) == 0 })
	var to []string
	for _, r := range ts.mails() {
		to = append(to, r.to...)
	}
	if strings.Join(to, " ") != "b@example.org c@example.org" {
		t.Fatalf("delivered to %v", to)
	}
}

// TestAttachmentsRoundTrip stores attachments across chunk boundaries and
// reads them back byte for byte.
func TestAttachmentsRoundTrip(t *testing.T) { storetest.Run(t, testAttachmentsRoundTrip) }

func testAttachmentsRoundTrip(t *testing.T, db storage.DB) {
	ob := newOutbox(t, db)
	var atts []Attachment
	for i, size := range []int{0, 1, attChunk - 1, attChunk, attChunk + 1, 2*attChunk + 5} {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(i*31 + j)
		}
		atts = append(atts, Attachment{Name: fmt.Sprintf("f%d.bin", i), MediaType: "application/octet-stream", Data: data})
	}
	enqueue(t, db, ob, Message{Channel: Email, To: "a@example.org", Subject: "s", Text: "t", HTML: "<b>t</b>", Ref: "r", Attachments: atts})
	err := db.View(context.Background(), func(tx storage.Tx) error {
		r, err := ob.backend.Load(tx, 1)
		if err != nil || r == nil {
			t.Fatalf("load: %v %v", r, err)
		}
		m, err := ob.open(r)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		if m.ID != 1 || m.Queued.IsZero() || m.Ref != "r" || m.HTML != "<b>t</b>" || len(m.Attachments) != len(atts) {
			t.Fatalf("loaded %+v", m)
		}
		for i := range atts {
			if m.Attachments[i].Name != atts[i].Name || !bytes.Equal(m.Attachments[i].Data, atts[i].Data) {
				t.Errorf("attachment %d differs", i)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEnqueueValidates(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
	}{
		{"unknown channel", Message{Channel: "fax", To: "a@example.org"}},
		{"email without address", Message{Channel: Email, To: "not an address"}},
		{"subject with line break", Message{Channel: Email, To: "a@example.org", Subject: "a\r\nBcc: x@example.org"}},
		{"attachment without name", Message{Channel: Email, To: "a@example.org", Attachments: []Attachment{{MediaType: "application/pdf"}}}},
		{"attachment with a path", Message{Channel: Email, To: "a@example.org", Attachments: []Attachment{{Name: "../x.pdf", MediaType: "application/pdf"}}}},
		{"attachment without media type", Message{Channel: Email, To: "a@example.org", Attachments: []Attachment{{Name: "x.pdf"}}}},
		{"sms to a non E.164 number", Message{Channel: SMS, To: "0555 0100", Text: "x"}},
		{"sms without text", Message{Channel: SMS, To: "+15550100123"}},
		{"sms with an attachment", Message{Channel: SMS, To: "+15550100123", Text: "x", Attachments: []Attachment{{Name: "a", MediaType: "text/plain"}}}},
		{"ref with NUL", Message{Channel: Email, To: "a@example.org", Ref: "a\x00b"}},
	}
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		ob := newOutbox(t, db)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				err := db.Update(context.Background(), func(tx storage.Tx) error { return ob.Enqueue(tx, tt.msg) })
				if err == nil {
					t.Fatal("accepted")
				}
			})
		}
		if got := pending(t, db); got != 0 {
			t.Fatalf("pending = %d", got)
		}
	})
}

// TestEnqueueNeedsOutbox: a database never prepared by NewOutbox is an
// error, not a panic (bbolt only: PostgreSQL's tables come with the
// migrations).
func TestEnqueueNeedsOutbox(t *testing.T) {
	db, ob := tempDB(t)
	err := db.Update(context.Background(), func(tx storage.Tx) error {
		if err := boltdb.Of(tx).DeleteBucket(bucketRoot); err != nil {
			return err
		}
		return ob.Enqueue(tx, Message{Channel: Email, To: "a@example.org"})
	})
	if !errors.Is(err, ErrNoOutbox) {
		t.Fatalf("err = %v, want ErrNoOutbox", err)
	}
}

// TestBoltFormat pins the bbolt layout that existing webapi.db files hold:
// a JSON record under the 8-byte id, the due key (next attempt, id), the
// ref key (ref, NUL, id) and the sealed chunks under (id, index, chunk).
func TestBoltFormat(t *testing.T) {
	db, ob := tempDB(t)
	enqueue(t, db, ob, Message{Channel: Email, To: "a@example.org", Subject: "s", Text: "t", Ref: "c1",
		Attachments: []Attachment{{Name: "a.pdf", MediaType: "application/pdf", Data: bytes.Repeat([]byte{1}, attChunk+1)}}})
	err := db.View(context.Background(), func(tx storage.Tx) error {
		b, err := openBuckets(tx)
		if err != nil {
			return err
		}
		var rec map[string]any
		if err := json.Unmarshal(b.msg.Get(idKey(1)), &rec); err != nil {
			return err
		}
		var keys []string
		for k := range rec {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if got := strings.Join(keys, ","); got != "attachments,attempts,channel,next,queued,ref,sealed,to" {
			t.Errorf("record fields %s", got)
		}
		c := b.due.Cursor()
		k, _ := c.First()
		if len(k) != 16 || !bytes.Equal(k[8:], idKey(1)) {
			t.Errorf("due key %x", k)
		}
		if k, _ := b.ref.Cursor().First(); !bytes.Equal(k, refKey("c1", 1)) {
			t.Errorf("ref key %q", k)
		}
		for ch := range 2 {
			if b.att.Get(attKey(1, 0, ch)) == nil {
				t.Errorf("chunk %d missing", ch)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
