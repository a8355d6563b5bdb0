package caddymodule

import (
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/stores"
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
	// see only the interfaces of stores.Stores, opened by walking the one
	// list of stores (internal/stores).
	OpenStores(env StorageEnv) (*stores.Stores, error)
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
