package caddymodule

// Storage is a webapi.storage.* guest module: where the webapi app keeps
// its data, loaded the way Caddy loads its own `storage` modules
// (`"storage": {"module": "bolt"}`), so a third backend can be a plugin.
// Configs whose storage names the same database (the same PoolKey) share
// one open database across reloads.
type Storage interface {
	// PoolKey names the database for the usage pool; it holds no secret.
	PoolKey(dataDir string) (string, error)
}
