// Package eventstest is an events.Sink for tests that keeps each event in
// the database, in the transaction that emits it, as the webhook outbox
// does: a test then reads back exactly the events of the changes that
// committed, in the order they committed. A rolled-back transaction, a
// failed call of a shared batch or the first run of a retried
// transaction leaves nothing.
package eventstest

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// table names the bbolt bucket and the PostgreSQL table of the events.
const table = "eventstest_events"

// Recorder is the Sink. Make it with New on the database of the stores
// under test.
type Recorder struct {
	db storage.DB
	// read is how many events Take has returned already.
	read int
}

// New makes the bucket or table of db that the Recorder writes to.
func New(tb testing.TB, db storage.DB) *Recorder {
	tb.Helper()
	var err error
	switch d := db.(type) {
	case *boltdb.DB:
		err = d.CreateBuckets([]byte(table))
	case *pgdb.DB:
		err = d.Update(context.Background(), func(tx storage.Tx) error {
			_, err := pgdb.Of(tx).Exec(context.Background(), `CREATE TABLE IF NOT EXISTS `+table+` (
				seq bigserial PRIMARY KEY, type text NOT NULL, owner text NOT NULL,
				at_ns bigint NOT NULL, data bytea NOT NULL)`)
			return err
		})
	default:
		err = fmt.Errorf("eventstest: no recorder for backend %s", db.Backend())
	}
	if err != nil {
		tb.Fatal(err)
	}
	return &Recorder{db: db}
}

// stored is an event as the bucket keeps it; Data as bytes (base64), so
// it reads back byte for byte.
type stored struct {
	Type  string `json:"type"`
	Owner string `json:"owner"`
	AtNS  int64  `json:"atNs"`
	Data  []byte `json:"data"`
}

// Emit implements events.Sink: a write in tx, like any other of tx's.
func (r *Recorder) Emit(tx storage.Tx, e events.Event) error {
	switch tx.Backend() {
	case boltdb.Name:
		b := boltdb.Of(tx).Bucket([]byte(table))
		seq, err := b.NextSequence()
		if err != nil {
			return err
		}
		v, err := json.Marshal(stored{Type: e.Type, Owner: e.Owner, AtNS: e.At.UnixNano(), Data: e.Data})
		if err != nil {
			return err
		}
		return b.Put(binary.BigEndian.AppendUint64(nil, seq), v)
	case pgdb.Name:
		pgdb.Queue(tx, `INSERT INTO `+table+` (type, owner, at_ns, data) VALUES ($1, $2, $3, $4)`,
			e.Type, e.Owner, e.At.UnixNano(), []byte(e.Data))
		return nil
	}
	return fmt.Errorf("eventstest: no recorder for backend %s", tx.Backend())
}

// All returns every committed event, oldest first.
func (r *Recorder) All(tb testing.TB) []events.Event {
	tb.Helper()
	var out []events.Event
	err := r.db.View(context.Background(), func(tx storage.Tx) error {
		switch tx.Backend() {
		case boltdb.Name:
			return boltdb.Of(tx).Bucket([]byte(table)).ForEach(func(_, v []byte) error {
				var s stored
				if err := json.Unmarshal(v, &s); err != nil {
					return err
				}
				out = append(out, event(s))
				return nil
			})
		case pgdb.Name:
			rows, err := pgdb.Of(tx).Query(context.Background(), `SELECT type, owner, at_ns, data FROM `+table+` ORDER BY seq`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var s stored
				if err := rows.Scan(&s.Type, &s.Owner, &s.AtNS, &s.Data); err != nil {
					return err
				}
				out = append(out, event(s))
			}
			return rows.Err()
		}
		return fmt.Errorf("eventstest: no recorder for backend %s", tx.Backend())
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// Take returns the events committed since the last Take, oldest first.
func (r *Recorder) Take(tb testing.TB) []events.Event {
	tb.Helper()
	all := r.All(tb)
	out := all[r.read:]
	r.read = len(all)
	return out
}

// Reset deletes every recorded event, for a test that compares the whole
// database before and after a change and its undoing, whose events stay.
func (r *Recorder) Reset(tb testing.TB) {
	tb.Helper()
	err := r.db.Update(context.Background(), func(tx storage.Tx) error {
		switch tx.Backend() {
		case boltdb.Name:
			t := boltdb.Of(tx)
			if err := t.DeleteBucket([]byte(table)); err != nil {
				return err
			}
			_, err := t.CreateBucket([]byte(table))
			return err
		case pgdb.Name:
			_, err := pgdb.Of(tx).Exec(context.Background(), `DELETE FROM `+table)
			return err
		}
		return fmt.Errorf("eventstest: no recorder for backend %s", tx.Backend())
	})
	if err != nil {
		tb.Fatal(err)
	}
	r.read = 0
}

func event(s stored) events.Event {
	return events.Event{Type: s.Type, Owner: s.Owner, At: time.Unix(0, s.AtNS).UTC(), Data: s.Data}
}

// Types lists the types of es, for comparing a sequence at a glance.
func Types(es []events.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Type
	}
	return out
}

// Data decodes the data of e into a map, failing tb if it is not a JSON
// object.
func Data(tb testing.TB, e events.Event) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Data, &m); err != nil {
		tb.Fatalf("event %s: data %q is not a JSON object: %v", e.Type, e.Data, err)
	}
	return m
}

var _ events.Sink = (*Recorder)(nil)
