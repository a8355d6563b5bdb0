package signing

import (
	"testing"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/upstreams/contracts"
)

// boltContracts wraps db for the contract store: its storage.DB, backend
// and template registry.
// TODO(issue 9): the lifecycle tests run on bbolt only; run them on both backends.
func boltContracts(tb testing.TB, db *bbolt.DB) (*boltdb.DB, *contracts.BoltBackend, *contracts.Templates) {
	tb.Helper()
	sdb := boltdb.New(db)
	b, err := contracts.NewBoltBackend(sdb)
	if err != nil {
		tb.Fatal(err)
	}
	tpl, err := contracts.NewTemplates(sdb, b)
	if err != nil {
		tb.Fatal(err)
	}
	return sdb, b, tpl
}
