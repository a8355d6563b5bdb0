package idempotency

import (
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// TestCopyToPostgres: the live records of a bbolt file read the same on
// PostgreSQL after the copy; expired ones are left out.
func TestCopyToPostgres(t *testing.T) {
	src := storetest.OpenBolt(t)
	bolt := newBackend(t, src)
	live := []*Record{record("a", t0, "a"), record("b", t0.Add(time.Hour), "b")}
	gone := record("c", t0.Add(-TTL), "c")
	for _, r := range append(live, gone) {
		save(t, src, bolt, r, r.Created)
	}
	dst := storetest.OpenPostgres(t)
	pg := newBackend(t, dst)
	var copied []storage.Copied
	err := dst.Update(ctx(), func(to storage.Tx) error {
		if err := dst.(*pgdb.DB).ClaimEmpty(ctx(), to); err != nil {
			return err
		}
		return src.View(ctx(), func(from storage.Tx) error {
			var err error
			copied, err = CopyToPostgres(ctx(), from, to, t0.Add(time.Minute))
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(copied) != 1 || copied[0].Kind != "idempotent replies" || copied[0].N != 2 || !strings.Contains(copied[0].Note, "1 expired left out") {
		t.Fatalf("report %+v", copied)
	}
	for _, r := range live {
		sameRecord(t, lookup(t, dst, pg, r.ID, t0.Add(time.Minute)), r)
	}
	if r := lookup(t, dst, pg, gone.ID, gone.Created); r != nil {
		t.Fatalf("the expired record was copied: %+v", r)
	}

	// A file from before idempotency kept none: nothing to copy.
	old := storetest.OpenBolt(t)
	fresh := storetest.OpenPostgres(t)
	err = fresh.Update(ctx(), func(to storage.Tx) error {
		return old.View(ctx(), func(from storage.Tx) error {
			var err error
			copied, err = CopyToPostgres(ctx(), from, to, t0)
			return err
		})
	})
	if err != nil || len(copied) != 1 || copied[0].N != 0 {
		t.Fatalf("copy of a file without the buckets: %+v, %v", copied, err)
	}
}
