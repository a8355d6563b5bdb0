// Package stores is the one list of keygate's stores: for each, its
// name, its tables in PostgreSQL, how it opens on bbolt and on
// PostgreSQL, and how `caddy webapi migrate` copies its records from the
// one to the other, in the order they are copied. The storage modules of
// caddymodule open the stores by walking it (OpenBolt, OpenPostgres) and
// migrate copies by walking it (Copy), so that adding a store is its
// package, one entry of List and its numbered migration in pgdb.
//
// It knows nothing of Caddy: it composes the domain packages above the
// storage seam, as caddymodule and migrate do.
package stores

import (
	"context"
	"time"

	"github.com/keygate/keygate/internal/docseal"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/webhook"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
	"github.com/keygate/keygate/upstreams/signing"
)

// Stores are one open database and the backend of every store on it.
type Stores struct {
	DB        storage.DB
	Keys      keystore.Backend
	Templates contracts.TemplateBackend
	Contracts contracts.Backend
	Signing   signing.Backend
	Outbox    notify.Backend
	Shares    share.Backend
	Webhooks  webhook.Backend
	// Idempotency keeps the replies of creates sent with an
	// Idempotency-Key.
	Idempotency idempotency.Backend
	// DocumentSeal keeps the self-made seal certificate.
	DocumentSeal docseal.Backend
	// SealedDocuments finds a sealed document's contract by its hash.
	SealedDocuments docseal.Index
	// Where names the database in logs and errors, without a secret.
	Where string
}

// Store is one entry of List: a store of a domain package, whose
// bbolt and PostgreSQL backends stand side by side in that package
// (NewBoltBackend, NewPostgresBackend) beside its CopyToPostgres.
type Store struct {
	// Name names the store (in tests).
	Name string
	// Tables are the PostgreSQL tables that hold the store's records,
	// made by the numbered migrations of pgdb (a test checks that they
	// and pgdb's own tables are every table of a migrated schema).
	Tables []string
	// Bolt opens the store's backends on db, creating their buckets, and
	// sets them in st.
	Bolt func(db *boltdb.DB, st *Stores) error
	// Postgres opens the store's backends on db, already migrated, and
	// sets them in st.
	Postgres func(db *pgdb.DB, st *Stores)
	// Copy copies the store's records from from, a transaction of the
	// bbolt backend, into to, one of the PostgreSQL backend, as stored,
	// and reports what it copied.
	Copy func(ctx context.Context, from, to storage.Tx, env CopyEnv) ([]storage.Copied, error)
}

// CopyEnv is what a store's Copy may need besides the two transactions.
type CopyEnv struct {
	// Sealer holds the master key the records are sealed under; the
	// copy checks that every sealed token opens with it.
	Sealer *seal.Sealer
	// Now decides the effective statuses a report counts, and which
	// records have expired and are left behind.
	Now time.Time
}

// List is every store, in the order `caddy webapi migrate` copies them
// and lists them in its report.
var List = []Store{
	{
		Name: "keys",
		Tables: []string{"keys", "key_quota", "key_rate_counts", "key_usage_hourly",
			"rate_instances", "rate_demand", "plans", "consumers"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			st.Keys, err = keystore.NewBoltBackend(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) { st.Keys = keystore.NewPostgresBackend(db) },
		Copy: func(ctx context.Context, from, to storage.Tx, env CopyEnv) ([]storage.Copied, error) {
			return keystore.CopyToPostgres(ctx, from, to, env.Sealer)
		},
	},
	{
		Name: "contracts",
		Tables: []string{"templates", "contract_documents", "contracts", "contract_records",
			"signing_tokens", "contract_attachments"},
		Bolt: func(db *boltdb.DB, st *Stores) error {
			b, err := contracts.NewBoltBackend(db)
			st.Contracts, st.Templates = b, b
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) {
			b := contracts.NewPostgresBackend(db)
			st.Contracts, st.Templates = b, b
		},
		Copy: func(ctx context.Context, from, to storage.Tx, env CopyEnv) ([]storage.Copied, error) {
			return contracts.CopyToPostgres(ctx, from, to, env.Sealer, env.Now)
		},
	},
	{
		Name:   "signing",
		Tables: []string{"signing_otps", "signing_signatures", "signing_trail", "signing_seal_queue"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			st.Signing, err = signing.NewBoltBackend(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) { st.Signing = signing.NewPostgresBackend(db) },
		Copy: func(ctx context.Context, from, to storage.Tx, _ CopyEnv) ([]storage.Copied, error) {
			return signing.CopyToPostgres(ctx, from, to)
		},
	},
	{
		Name:   "outbox",
		Tables: []string{"outbox", "outbox_chunks"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			st.Outbox, err = notify.NewBoltBackend(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) { st.Outbox = notify.NewPostgresBackend(db) },
		Copy: func(ctx context.Context, from, to storage.Tx, _ CopyEnv) ([]storage.Copied, error) {
			return notify.CopyToPostgres(ctx, from, to)
		},
	},
	{
		Name:   "shares",
		Tables: []string{"shares", "share_counts", "share_activity", "share_unlocks"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			st.Shares, err = share.NewBoltBackend(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) { st.Shares = share.NewPostgresBackend(db) },
		Copy: func(ctx context.Context, from, to storage.Tx, _ CopyEnv) ([]storage.Copied, error) {
			return share.CopyToPostgres(ctx, from, to)
		},
	},
	{
		Name:   "webhooks",
		Tables: []string{"webhook_subscriptions", "webhook_events", "webhook_deliveries", "webhook_attempts"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			st.Webhooks, err = webhook.NewBoltBackend(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) { st.Webhooks = webhook.NewPostgresBackend(db) },
		Copy: func(ctx context.Context, from, to storage.Tx, _ CopyEnv) ([]storage.Copied, error) {
			return webhook.CopyToPostgres(ctx, from, to)
		},
	},
	{
		Name:   "idempotency",
		Tables: []string{"idempotency_records"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			st.Idempotency, err = idempotency.NewBoltBackend(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) { st.Idempotency = idempotency.NewPostgresBackend(db) },
		Copy: func(ctx context.Context, from, to storage.Tx, env CopyEnv) ([]storage.Copied, error) {
			return idempotency.CopyToPostgres(ctx, from, to, env.Now)
		},
	},
	{
		// The self-made seal certificate (a row of pgdb's meta table)
		// and the index of sealed documents.
		Name:   "document seal",
		Tables: []string{"sealed_documents"},
		Bolt: func(db *boltdb.DB, st *Stores) (err error) {
			if st.DocumentSeal, err = docseal.NewBoltBackend(db); err != nil {
				return err
			}
			st.SealedDocuments, err = docseal.NewBoltIndex(db)
			return err
		},
		Postgres: func(db *pgdb.DB, st *Stores) {
			st.DocumentSeal = docseal.NewPostgresBackend(db)
			st.SealedDocuments = docseal.NewPostgresIndex(db)
		},
		Copy: func(ctx context.Context, from, to storage.Tx, _ CopyEnv) ([]storage.Copied, error) {
			return docseal.CopyToPostgres(ctx, from, to)
		},
	},
}

// OpenBolt opens every store of List on db, creating their buckets.
// where names the database in logs and errors.
func OpenBolt(db *boltdb.DB, where string) (*Stores, error) {
	st := &Stores{DB: db, Where: where}
	for _, s := range List {
		if err := s.Bolt(db, st); err != nil {
			return nil, err
		}
	}
	return st, nil
}

// OpenPostgres opens every store of List on db, already migrated. where
// names the database in logs and errors, without a secret.
func OpenPostgres(db *pgdb.DB, where string) *Stores {
	st := &Stores{DB: db, Where: where}
	for _, s := range List {
		s.Postgres(db, st)
	}
	return st
}

// Copy runs the Copy of every store of List in turn, in one pair of
// transactions, and reports what each copied, in order.
func Copy(ctx context.Context, from, to storage.Tx, env CopyEnv) ([]storage.Copied, error) {
	var all []storage.Copied
	for _, s := range List {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		c, err := s.Copy(ctx, from, to, env)
		if err != nil {
			return nil, err
		}
		all = append(all, c...)
	}
	return all, nil
}
