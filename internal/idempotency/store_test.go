package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var t0 = time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC)

func ctx() context.Context { return context.Background() }

// newBackend makes the backend of db's kind.
func newBackend(tb testing.TB, db storage.DB) Backend {
	return storetest.Pick[Backend](tb, db,
		func(d *boltdb.DB) (Backend, error) { return NewBoltBackend(d) },
		func(d *pgdb.DB) Backend { return NewPostgresBackend(d) })
}

func testSealer(t testing.TB) *seal.Sealer {
	s, err := seal.New(bytes.Repeat([]byte("m"), 32))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// record is a record of scope key saved at now with body.
func record(key string, now time.Time, body string) *Record {
	return &Record{ID: ScopeID("alice", "/webapi/contracts", key), RequestHash: sha256.Sum256([]byte(body)),
		Status: 201, Location: "/webapi/contracts/" + key, SealedBody: []byte("sealed " + body),
		Created: now, Expires: now.Add(TTL)}
}

func save(t *testing.T, db storage.DB, be Backend, r *Record, now time.Time) *Record {
	t.Helper()
	var live *Record
	err := db.Batch(ctx(), func(tx storage.Tx) error {
		var err error
		live, err = be.Save(ctx(), tx, r, now)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return live
}

func lookup(t *testing.T, db storage.DB, be Backend, id ID, now time.Time) *Record {
	t.Helper()
	var r *Record
	if err := db.View(ctx(), func(tx storage.Tx) error {
		var err error
		r, err = be.Record(ctx(), tx, id, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

func purge(t *testing.T, db storage.DB, be Backend, now time.Time, limit int) (expired bool, n int) {
	t.Helper()
	if err := db.View(ctx(), func(tx storage.Tx) error {
		var err error
		expired, err = be.Expired(ctx(), tx, now)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(ctx(), func(tx storage.Tx) error {
		var err error
		n, err = be.Purge(ctx(), tx, now, limit)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return expired, n
}

func sameRecord(t *testing.T, got, want *Record) {
	t.Helper()
	if got == nil {
		t.Fatalf("no record, want %+v", want)
	}
	if got.ID != want.ID || got.RequestHash != want.RequestHash || got.Status != want.Status || got.Location != want.Location ||
		!bytes.Equal(got.SealedBody, want.SealedBody) || !got.Created.Equal(want.Created) || !got.Expires.Equal(want.Expires) {
		t.Fatalf("record\n got %+v\nwant %+v", got, want)
	}
}

// The backends' conformance suite: one behaviour on bbolt and PostgreSQL.
func TestBackend(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		be := newBackend(t, db)
		first := record("k1", t0, "body one")

		t.Run("a saved record is read back whole until it expires", func(t *testing.T) {
			if live := save(t, db, be, first, t0); live != nil {
				t.Fatalf("first save found %+v", live)
			}
			sameRecord(t, lookup(t, db, be, first.ID, t0), first)
			sameRecord(t, lookup(t, db, be, first.ID, t0.Add(TTL-time.Microsecond)), first)
			if r := lookup(t, db, be, first.ID, t0.Add(TTL)); r != nil {
				t.Fatalf("a record at its expiry is still read: %+v", r)
			}
			if r := lookup(t, db, be, ScopeID("alice", "/webapi/contracts", "other"), t0); r != nil {
				t.Fatalf("another key reads %+v", r)
			}
		})

		t.Run("a second save of a live scope returns the first and stores nothing", func(t *testing.T) {
			before := storetest.Digest(t, db)
			second := record("k1", t0.Add(time.Hour), "body two")
			sameRecord(t, save(t, db, be, second, t0.Add(time.Hour)), first)
			if storetest.Digest(t, db) != before {
				t.Fatal("the refused save changed the database")
			}
		})

		t.Run("an expired record is replaced, and its purge entry does not purge the new one", func(t *testing.T) {
			later := t0.Add(TTL + time.Minute)
			again := record("k1", later, "body three")
			if live := save(t, db, be, again, later); live != nil {
				t.Fatalf("save over an expired record found %+v", live)
			}
			sameRecord(t, lookup(t, db, be, again.ID, later), again)
			if expired, n := purge(t, db, be, later, 0); expired || n != 0 {
				t.Fatalf("purge after the replace: expired %v, %d purged", expired, n)
			}
			sameRecord(t, lookup(t, db, be, again.ID, later), again)
		})
	})
}

// TestPurge: expired records go, oldest first and no more than the
// limit; live ones stay.
func TestPurge(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		be := newBackend(t, db)
		var recs []*Record
		for i, key := range []string{"a", "b", "c", "d"} {
			at := t0.Add(time.Duration(i) * time.Hour)
			r := record(key, at, key)
			save(t, db, be, r, at)
			recs = append(recs, r)
		}
		if expired, n := purge(t, db, be, t0.Add(TTL-time.Second), 0); expired || n != 0 {
			t.Fatalf("before any expiry: expired %v, %d purged", expired, n)
		}
		// a, b and c have expired at t0+26h; the limit takes a alone.
		now := t0.Add(TTL + 2*time.Hour)
		if expired, n := purge(t, db, be, now, 1); !expired || n != 1 {
			t.Fatalf("purge with limit 1: expired %v, %d purged", expired, n)
		}
		if r := lookup(t, db, be, recs[1].ID, recs[1].Created); r == nil {
			t.Fatal("the limit let the purge take b too")
		}
		if r := lookup(t, db, be, recs[0].ID, recs[0].Created); r != nil {
			t.Fatal("a, the oldest, was not purged")
		}
		if expired, n := purge(t, db, be, now, 0); !expired || n != 2 {
			t.Fatalf("purge of the rest: expired %v, %d purged", expired, n)
		}
		if expired, n := purge(t, db, be, now, 0); expired || n != 0 {
			t.Fatalf("purge with nothing due: expired %v, %d purged", expired, n)
		}
		// d, live, stays; read at a time it is live, it is whole.
		sameRecord(t, lookup(t, db, be, recs[3].ID, now), recs[3])
		for _, r := range recs[:3] {
			if got := lookup(t, db, be, r.ID, r.Created); got != nil {
				t.Errorf("record %x survived the purge", r.ID[:4])
			}
		}
	})
}
