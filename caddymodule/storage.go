package caddymodule

import (
	"github.com/keygate/keygate/internal/docseal"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/webhook"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
	"github.com/keygate/keygate/upstreams/signing"
)

// Storage is a webapi.storage.* guest module: where the webapi app keeps
// its data, loaded the way Caddy loads its own `storage` modules
// (`"storage": {"module": "bolt"}`), so a third backend can be a plugin.
// Configs whose storage names the same database (the same PoolKey) share
// one open database across reloads.
type Storage interface {
	// PoolKey names the database for the usage pool; it holds no secret.
	PoolKey(dataDir string) (string, error)
	// OpenStores opens the database and every store's backend on it,
	// once per PoolKey (a reload joins the open one). The stores above
	// see only the interfaces of Stores.
	OpenStores(env StorageEnv) (*Stores, error)
}

// StorageEnv is what a Storage may use to open.
type StorageEnv struct {
	// DataDir is the app's data_dir, absolute.
	DataDir string
	// MasterKey is the key that seals tokens; a shared database records
	// its check value and refuses another key.
	MasterKey []byte
	Logger    *zap.Logger
}

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
