// Package boltdb is the bbolt backend of package storage: one file, one
// process, the embedded default.
package boltdb

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage"
)

// Name is the backend's name, as Tx.Backend and DB.Backend give it.
const Name = "bolt"

// DB runs storage transactions on a bbolt database.
type DB struct {
	// Bolt is the database. Stores of this backend use it directly for
	// work that is theirs alone (creating buckets at open).
	Bolt *bbolt.DB
}

// New wraps an open bbolt database. Closing the DB closes it.
func New(db *bbolt.DB) *DB { return &DB{Bolt: db} }

// CreateBuckets creates the top-level buckets a store keeps its data in,
// those that do not exist yet, in one transaction.
func (d *DB) CreateBuckets(names ...[]byte) error {
	return d.Bolt.Update(func(t *bbolt.Tx) error {
		for _, name := range names {
			if _, err := t.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("creating bucket %s: %w", name, err)
			}
		}
		return nil
	})
}

// tx is a bbolt transaction as a storage.Tx.
type tx struct{ *bbolt.Tx }

func (tx) Backend() string { return Name }

// Of unwraps a Tx that a DB of this package handed out. Any other Tx is a
// programming error (stores of two backends mixed) and panics.
func Of(t storage.Tx) *bbolt.Tx {
	return t.(tx).Tx
}

// Wrap makes a bbolt transaction a storage.Tx, for code that opened it
// through the bbolt API itself.
func Wrap(t *bbolt.Tx) storage.Tx { return tx{t} }

// Backend implements storage.DB.
func (d *DB) Backend() string { return Name }

// View implements storage.DB.
func (d *DB) View(ctx context.Context, fn func(storage.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.Bolt.View(func(t *bbolt.Tx) error { return fn(tx{t}) })
}

// Update implements storage.DB.
func (d *DB) Update(ctx context.Context, fn func(storage.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.Bolt.Update(func(t *bbolt.Tx) error { return fn(tx{t}) })
}

// Batch implements storage.DB with bbolt's group commit: concurrent calls
// share a transaction, and a call whose fn fails is retried alone.
func (d *DB) Batch(ctx context.Context, fn func(storage.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.Bolt.Batch(func(t *bbolt.Tx) error { return fn(tx{t}) })
}

// Ping implements storage.DB: the file is open (a read transaction
// starts; one on a closed database fails at once).
func (d *DB) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.Bolt.View(func(*bbolt.Tx) error { return nil })
}

// Close implements storage.DB.
func (d *DB) Close() error { return d.Bolt.Close() }

var _ storage.DB = (*DB)(nil)
