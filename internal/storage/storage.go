// Package storage is the seam between keygate's domain packages and the
// databases they persist to. A backend (bbolt, PostgreSQL) is a DB that
// runs transactions; each domain package (keystore, contracts, signing,
// notify, share) defines the store it needs as an interface in its own
// words, with one implementation per backend side by side (bolt.go,
// postgres.go), whose methods take the Tx of a transaction in progress. So
// a change and the notifications it causes commit together on either
// backend, and nothing above the stores sees a *bbolt.Tx or a pgx type.
package storage

import (
	"context"
	"errors"
)

// Tx is a transaction in progress. Stores of one backend accept the Tx
// their backend's DB hands out and unwrap it (boltdb.Of, pgdb.Of); above
// the stores it is opaque.
type Tx interface {
	// Backend names the backend that made the transaction.
	Backend() string
}

// DB runs transactions on one backend.
type DB interface {
	// Backend is the backend's name: "bolt" or "postgres".
	Backend() string
	// View runs fn in a read-only transaction.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a read-write transaction and commits it: when
	// Update returns nil the change is durable. fn may run more than once
	// (a retried serialization failure), so it must not have effects
	// outside tx that a second run would repeat.
	Update(ctx context.Context, fn func(Tx) error) error
	// Batch is Update for writes that many clients make at once (creates):
	// concurrent calls may share one commit. fn may run more than once.
	Batch(ctx context.Context, fn func(Tx) error) error
	// Ping reports whether the database answers now: the readiness
	// check's question. It returns by ctx's deadline.
	Ping(ctx context.Context) error
	// Close releases the backend.
	Close() error
}

// ErrUnavailable wraps an error of a database that cannot be reached or
// does not answer in time: requests that need it are answered 503
// `unavailable` with Retry-After, never 500.
var ErrUnavailable = errors.New("database unavailable")
