package notify

import (
	"context"
	"encoding/base64"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/sealtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// TestMain stops the throwaway PostgreSQL that storetest starts.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var testSealer = sealtest.Sealer

// newBackend is the outbox Backend of db's kind.
func newBackend(t testing.TB, db storage.DB) Backend {
	t.Helper()
	return storetest.Pick[Backend](t, db,
		func(d *boltdb.DB) (Backend, error) { return NewBoltBackend(d) },
		func(d *pgdb.DB) Backend { return NewPostgresBackend(d) })
}

// newOutbox prepares the outbox on db, sealing with testSealer.
func newOutbox(t testing.TB, db storage.DB) *Outbox {
	t.Helper()
	ob, err := NewOutbox(db, newBackend(t, db), testSealer)
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

// tempDB is an outbox on a fresh bbolt file, for the tests of senders.
func tempDB(t *testing.T) (storage.DB, *Outbox) {
	t.Helper()
	db := storetest.OpenBolt(t)
	return db, newOutbox(t, db)
}

// reopen stands for a restart of the process: on bbolt the file is closed
// and opened again; a PostgreSQL schema is opened by a new pool.
func reopen(t *testing.T, db storage.DB) storage.DB {
	t.Helper()
	switch d := db.(type) {
	case *boltdb.DB:
		path := d.Bolt.Path()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return boltdb.New(b)
	case *pgdb.DB:
		d.Close()
		return openInstance(t, d)
	}
	t.Fatalf("cannot reopen %s", db.Backend())
	return nil
}

// openInstance opens the schema of db again, as another gateway instance
// of the same deployment does.
func openInstance(t *testing.T, db *pgdb.DB) *pgdb.DB {
	t.Helper()
	other, err := pgdb.Open(context.Background(), pgdb.Config{DSN: pgtest.Shared(t).DSN, Schema: db.Schema(), MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	return other
}

// enqueue commits msgs in one transaction.
func enqueue(t *testing.T, db storage.DB, ob *Outbox, msgs ...Message) {
	t.Helper()
	err := db.Update(context.Background(), func(tx storage.Tx) error {
		for _, m := range msgs {
			if err := ob.Enqueue(tx, m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// counts returns the number of entries of each kind in the outbox, in the
// names of the bbolt buckets: msg (messages), att (attachment chunks), due
// (schedule entries: one per message on PostgreSQL) and ref (messages
// with a ref).
func counts(t *testing.T, db storage.DB) map[string]int {
	t.Helper()
	n := map[string]int{}
	ctx := context.Background()
	err := db.View(ctx, func(tx storage.Tx) error {
		switch db.Backend() {
		case boltdb.Name:
			root := boltdb.Of(tx).Bucket(bucketRoot)
			for _, name := range [][]byte{bucketMsg, bucketAtt, bucketDue, bucketRef} {
				n[string(name)] = root.Bucket(name).Stats().KeyN
			}
			return nil
		default:
			var msg, att, ref int
			err := pgdb.Of(tx).QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox), (SELECT count(*) FROM outbox_chunks),
				(SELECT count(*) FROM outbox WHERE ref <> '')`).Scan(&msg, &att, &ref)
			n["msg"], n["att"], n["due"], n["ref"] = msg, att, msg, ref
			return err
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func pending(t *testing.T, db storage.DB) int {
	t.Helper()
	return counts(t, db)["msg"]
}

// stored is everything the outbox keeps, as bytes: the whole database
// file on bbolt; on PostgreSQL every row of the outbox tables as text
// (bytea columns left out) and every bytea column's raw bytes.
func stored(t *testing.T, db storage.DB) []byte {
	t.Helper()
	switch d := db.(type) {
	case *boltdb.DB:
		raw, err := os.ReadFile(d.Bolt.Path())
		if err != nil {
			t.Fatal(err)
		}
		return raw
	case *pgdb.DB:
		var out []byte
		ctx := context.Background()
		for _, q := range []string{
			// bytea columns as their raw bytes only: their hex text
			// would hold any six-digit password by chance now and then.
			"SELECT (to_jsonb(o) - 'sealed')::text, coalesce(o.sealed, ''::bytea) FROM outbox o",
			"SELECT (to_jsonb(c) - 'data')::text, c.data FROM outbox_chunks c",
		} {
			rows, err := d.Pool.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var text string
				var raw []byte
				if err := rows.Scan(&text, &raw); err != nil {
					t.Fatal(err)
				}
				out = append(append(append(out, text...), raw...), '\n')
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	t.Fatalf("cannot dump %s", db.Backend())
	return nil
}

// outcomes records OnOutcome calls.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) record(channel, outcome string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[channel+"/"+outcome]++
}

func (o *outcomes) get(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[key]
}

// fastConfig retries within milliseconds.
func fastConfig(cfg WorkerConfig) WorkerConfig {
	cfg.BaseDelay = 5 * time.Millisecond
	cfg.MaxDelay = 20 * time.Millisecond
	cfg.SendTimeout = 10 * time.Second
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Hour // only wake-ups and the schedule drive the tests
	}
	return cfg
}

// runWorker starts w and stops it at the end of the test.
func runWorker(t *testing.T, w *Worker) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	t.Cleanup(func() {
		w.Stop()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func decodeBase64(t *testing.T, raw []byte) []byte {
	t.Helper()
	data, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(raw)), ""))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
