package webhook

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// BenchmarkCreateTx is what Emit adds to a create: concurrent
// transactions through db.Batch (group commit, as creates run) that each
// write a contract-sized record, without and with an event emitted into
// the outbox. go test -run '^$' -bench CreateTx -cpu 2 ./internal/webhook
func BenchmarkCreateTx(b *testing.B) {
	data := []byte(`{"id":"0190f3c2-7d7e-7cc0-8f3e-5a1b2c3d4e5f","name":"` + strings.Repeat("n", 900) + `"}`)
	for _, be := range storetest.Backends {
		for _, emit := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/emit=%v", be.Name, emit), func(b *testing.B) {
				db := be.Open(b)
				s := newStore(b, db, nil)
				put := recordPut(b, db)
				var seq atomic.Uint64
				ev := events.Event{Type: events.ContractCreated, Owner: "alice", At: time.Now(), Data: data}
				b.SetParallelism(16) // 16 × GOMAXPROCS clients
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						n := seq.Add(1)
						err := db.Batch(context.Background(), func(tx storage.Tx) error {
							if err := put(tx, n, data); err != nil {
								return err
							}
							if emit {
								return s.Emit(tx, ev)
							}
							return nil
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// recordPut is a put of one record of db's backend: a bucket's key, or a
// row's INSERT queued with the commit, as the stores write.
func recordPut(b *testing.B, db storage.DB) func(tx storage.Tx, n uint64, v []byte) error {
	switch d := db.(type) {
	case *boltdb.DB:
		if err := d.CreateBuckets([]byte("bench")); err != nil {
			b.Fatal(err)
		}
		return func(tx storage.Tx, n uint64, v []byte) error {
			return boltdb.Of(tx).Bucket([]byte("bench")).Put(binary.BigEndian.AppendUint64(nil, n), v)
		}
	case *pgdb.DB:
		if _, err := d.Pool.Exec(context.Background(), "CREATE TABLE bench (id bigint PRIMARY KEY, data bytea)"); err != nil {
			b.Fatal(err)
		}
		return func(tx storage.Tx, n uint64, v []byte) error {
			pgdb.Queue(tx, "INSERT INTO bench (id, data) VALUES ($1, $2)", int64(n), v)
			return nil
		}
	}
	b.Fatalf("no records for %s", db.Backend())
	return nil
}
