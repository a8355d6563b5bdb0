package signing

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

// The lifecycle's tests run once per backend (storetest.Run): these
// helpers build the stores of whichever storage.DB a test is handed, and
// read what it holds in the same terms on both.

// contractBackend is what both contract backends implement.
type contractBackend interface {
	contracts.Backend
	contracts.TemplateBackend
}

// contractStores builds the contract backend and template registry of
// db's kind.
func contractStores(tb testing.TB, db storage.DB) (contractBackend, *contracts.Templates) {
	tb.Helper()
	b := storetest.Pick[contractBackend](tb, db,
		func(d *boltdb.DB) (contractBackend, error) { return contracts.NewBoltBackend(d) },
		func(d *pgdb.DB) contractBackend { return contracts.NewPostgresBackend(d) })
	tpl, err := contracts.NewTemplates(db, b)
	if err != nil {
		tb.Fatal(err)
	}
	return b, tpl
}

// newOutbox is the notification outbox of db's kind.
func newOutbox(tb testing.TB, db storage.DB, sealer *seal.Sealer) *notify.Outbox {
	tb.Helper()
	b := storetest.Pick[notify.Backend](tb, db,
		notify.NewBoltBackend,
		notify.NewPostgresBackend)
	ob, err := notify.NewOutbox(db, b, sealer)
	if err != nil {
		tb.Fatal(err)
	}
	return ob
}

// reopen stands for a restart of the process: it closes db and opens the
// bbolt file again, or the PostgreSQL schema with a new pool.
func reopen(tb testing.TB, db storage.DB) storage.DB {
	tb.Helper()
	switch d := db.(type) {
	case *boltdb.DB:
		path := d.Bolt.Path()
		if err := d.Close(); err != nil {
			tb.Fatal(err)
		}
		b, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { b.Close() })
		return boltdb.New(b)
	case *pgdb.DB:
		d.Close()
		other, err := pgdb.Open(context.Background(), pgdb.Config{DSN: pgtest.Shared(tb).DSN, Schema: d.Schema(), MaxConns: 8})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { other.Close() })
		return other
	}
	tb.Fatalf("cannot reopen %s", db.Backend())
	return nil
}

// A kind of stored record, counted alike on both backends: the keys of a
// bucket on bbolt, the rows of a table on PostgreSQL.
type storedKind struct {
	bucket [][]byte // the bucket's path from the root
	table  string
}

var (
	storedOTPs        = storedKind{[][]byte{bucketOTPs}, "signing_otps"}
	storedSignatures  = storedKind{[][]byte{bucketSignatures}, "signing_signatures"}
	storedAttachments = storedKind{[][]byte{[]byte("contract_attachments")}, "contract_attachments"}
	storedMessages    = storedKind{[][]byte{[]byte("notify_outbox"), []byte("msg")}, "outbox"}
	storedSealQueue   = storedKind{[][]byte{bucketSealQueue}, "signing_seal_queue"}
)

// count counts the records of kind in db.
func count(tb testing.TB, db storage.DB, kind storedKind) int {
	tb.Helper()
	n := 0
	ctx := context.Background()
	err := db.View(ctx, func(tx storage.Tx) error {
		switch tx.Backend() {
		case boltdb.Name:
			b := boltdb.Of(tx).Bucket(kind.bucket[0])
			for _, name := range kind.bucket[1:] {
				b = b.Bucket(name)
			}
			n = b.Stats().KeyN
			return nil
		case pgdb.Name:
			return pgdb.Of(tx).QueryRow(ctx, "SELECT count(*) FROM "+kind.table).Scan(&n)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// storedOTPBytes is every one-time password record as stored: the JSON
// value on bbolt; on PostgreSQL each column of the row, bytea as its
// bytes (not as hex text, where six digits turn up by chance).
func storedOTPBytes(tb testing.TB, db storage.DB) [][]byte {
	tb.Helper()
	var out [][]byte
	ctx := context.Background()
	err := db.View(ctx, func(tx storage.Tx) error {
		switch tx.Backend() {
		case boltdb.Name:
			return boltdb.Of(tx).Bucket(bucketOTPs).ForEach(func(_, v []byte) error {
				out = append(out, append([]byte(nil), v...))
				return nil
			})
		case pgdb.Name:
			rows, err := pgdb.Of(tx).Query(ctx, "SELECT signer_id::text, hash, salt, sent::text, expires::text, failures::text FROM signing_otps")
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var id, sent, expires, failures string
				var hash, salt []byte
				if err := rows.Scan(&id, &hash, &salt, &sent, &expires, &failures); err != nil {
					return err
				}
				rec := append(append([]byte(id+"|"), hash...), salt...)
				out = append(out, append(rec, "|"+sent+"|"+expires+"|"+failures...))
			}
			return rows.Err()
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
