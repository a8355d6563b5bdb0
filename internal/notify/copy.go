package notify

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// CopyToPostgres copies the messages waiting in the outbox of from, a
// transaction of the bbolt backend, into to, one of the PostgreSQL backend
// whose outbox is empty (caddy webapi migrate). Each message keeps its id,
// to which its sealed body and attachment chunks are bound (and from
// which senders name the .eml file and Message-ID), its queue time,
// attempts, last error and the time of its next attempt; the id sequence
// then continues after the last id bbolt gave, so that no id is given
// twice. Nothing is unsealed: the gateway on PostgreSQL opens the
// messages with the same master key.
func CopyToPostgres(ctx context.Context, from, to storage.Tx) ([]storage.Copied, error) {
	root := boltdb.Of(from).Bucket(bucketRoot)
	if root == nil {
		return []storage.Copied{{Kind: "pending messages"}}, nil
	}
	msgs, att := root.Bucket(bucketMsg), root.Bucket(bucketAtt)
	if msgs == nil || att == nil {
		return nil, ErrNoOutbox
	}
	out := pgdb.NewCopier(ctx, to, "outbox", "id", "channel", "recipient", "ref", "sealed", "subject", "body_text",
		"body_html", "attachments", "queued", "attempts", "next_attempt", "last_error")
	ids := map[uint64]bool{}
	attachments := 0
	err := msgs.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("outbox message key %x: %d bytes, want 8", k, len(k))
		}
		id := binary.BigEndian.Uint64(k)
		var rec boltRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			// The worker would drop it as unreadable; a copy that drops
			// it silently would hide that a message was lost.
			return fmt.Errorf("outbox message %d: the stored record does not decode (%v): start the gateway on bbolt once, so that its worker drops it, then migrate again", id, err)
		}
		if id > 1<<63-1 {
			return fmt.Errorf("outbox message %d: id out of range", id)
		}
		atts, err := json.Marshal(rec.Attachments)
		if err != nil {
			return err
		}
		if rec.Attachments == nil {
			atts = []byte("[]")
		}
		ids[id] = true
		attachments += len(rec.Attachments)
		return out.Add(int64(id), string(rec.Channel), rec.To, rec.Ref, rec.Sealed, rec.Subject, rec.Text, rec.HTML,
			string(atts), rec.Queued, int32(rec.Attempts), time.Unix(0, rec.Next).UTC(), rec.LastError)
	})
	if err != nil {
		return nil, err
	}
	n, err := out.Close()
	if err != nil {
		return nil, err
	}
	chunks := pgdb.NewCopier(ctx, to, "outbox_chunks", "message_id", "attachment", "chunk", "data")
	orphans := 0
	err = att.ForEach(func(k, v []byte) error {
		if len(k) != 14 {
			return fmt.Errorf("outbox attachment key %x: %d bytes, want 14", k, len(k))
		}
		id := binary.BigEndian.Uint64(k[:8])
		if !ids[id] {
			// A chunk whose message is gone: nothing reads it, and the
			// foreign key of outbox_chunks refuses it.
			orphans++
			return nil
		}
		return chunks.Add(int64(id), int16(binary.BigEndian.Uint16(k[8:10])), int32(binary.BigEndian.Uint32(k[10:14])), v)
	})
	if err != nil {
		return nil, err
	}
	nc, err := chunks.Close()
	if err != nil {
		return nil, err
	}
	if err := pgdb.AdvanceSequence(ctx, to, "pg_get_serial_sequence('outbox', 'id')", msgs.Sequence()); err != nil {
		return nil, err
	}
	note := fmt.Sprintf("%d attachments in %d chunks", attachments, nc)
	if orphans > 0 {
		note += fmt.Sprintf("; %d chunks of no message left out", orphans)
	}
	return []storage.Copied{{Kind: "pending messages", N: n, Note: note}}, nil
}
