// Package migrate moves a gateway from bbolt to PostgreSQL (spec
// docs/operators.md, "Moving from one box to several"; `caddy webapi migrate`):
// it copies a stopped gateway's database file into an empty PostgreSQL
// schema in one transaction. Each store copies its own records (their
// CopyToPostgres functions), as stored: ids, timestamps, token hashes,
// sealed tokens and sealed messages stay what they were, so every token,
// signing link, share password, search and list gives what it gave, under
// the same master key. The stores and their order are the one list of
// internal/stores; this package owns the transaction.
package migrate

import (
	"context"
	"errors"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/stores"
)

// DefaultLockTimeout bounds the wait for the database file's lock: a
// stopped gateway holds none, so a longer wait would only delay the
// message that one still runs.
const DefaultLockTimeout = 2 * time.Second

// Config says what to copy where.
type Config struct {
	// BoltPath is the database file of the stopped gateway:
	// <data_dir>/webapi.db.
	BoltPath string
	// MasterKey is the master key that gateway ran with. Every sealed
	// token must open with it, and the schema records its check value:
	// the gateways on PostgreSQL run with the same key.
	MasterKey []byte
	// Postgres is the target. Its Timeout is not used: the copy takes as
	// long as the data needs.
	Postgres pgdb.Config
	// LockTimeout bounds the wait for the file's lock;
	// DefaultLockTimeout if 0.
	LockTimeout time.Duration
	// Now is the clock that decides the effective statuses the report
	// counts; time.Now if nil.
	Now func() time.Time
}

// Report is what a copy moved.
type Report struct {
	// Schema is the PostgreSQL schema written.
	Schema string
	// Copied lists every kind of record in the order copied, with zero
	// counts too, so the report always has the same lines.
	Copied []storage.Copied
}

// BoltToPostgres copies the bbolt database at cfg.BoltPath into the
// schema of cfg.Postgres, which it creates and migrates if needed, and
// which must hold no data. Everything is written in one transaction: an
// error leaves the schema as empty as it was. The bbolt file is opened
// read-only and not changed.
func BoltToPostgres(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.BoltPath == "" {
		return nil, errors.New("migrate: no database file given")
	}
	sealer, err := seal.New(cfg.MasterKey)
	if err != nil {
		return nil, err
	}
	if cfg.LockTimeout == 0 {
		cfg.LockTimeout = DefaultLockTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	src, err := boltdb.OpenReadOnly(cfg.BoltPath, cfg.LockTimeout)
	if err != nil {
		return nil, err
	}
	defer src.Close()

	pc := cfg.Postgres
	pc.Timeout = -1
	pc.MaxConns = 2
	dst, err := pgdb.Open(ctx, pc)
	if err != nil {
		return nil, err
	}
	defer dst.Close()

	rep := &Report{Schema: dst.Schema()}
	err = dst.Update(ctx, func(to storage.Tx) error {
		rep.Copied = nil // a retried transaction starts over
		if err := dst.ClaimEmpty(ctx, to); err != nil {
			return err
		}
		if err := dst.CheckMasterKeyIn(ctx, to, cfg.MasterKey); err != nil {
			return err
		}
		return boltdb.Guard(cfg.BoltPath, func() error {
			return src.View(ctx, func(from storage.Tx) error {
				var err error
				rep.Copied, err = stores.Copy(ctx, from, to, stores.CopyEnv{Sealer: sealer, Now: cfg.Now()})
				return err
			})
		})
	})
	if err != nil {
		return nil, err
	}
	return rep, nil
}
