package caddymodule

import (
	"path/filepath"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func init() {
	caddy.RegisterModule(BoltStorage{})
}

// BoltStorage is the embedded default: one bbolt file,
// <data_dir>/webapi.db, that one process holds (webapi.storage.bolt).
//
//	storage bolt
type BoltStorage struct{}

// CaddyModule returns the Caddy module information.
func (BoltStorage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "webapi.storage.bolt",
		New: func() caddy.Module { return new(BoltStorage) },
	}
}

// PoolKey implements Storage: the file's absolute path.
func (BoltStorage) PoolKey(dataDir string) (string, error) {
	return filepath.Abs(filepath.Join(dataDir, "webapi.db"))
}

// UnmarshalCaddyfile reads `storage bolt`, which takes no options.
func (s *BoltStorage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() || d.NextBlock(d.Nesting()) {
		return d.Err("storage bolt takes no options: the file is <data_dir>/webapi.db")
	}
	return nil
}

// Interface guards
var (
	_ Storage               = (*BoltStorage)(nil)
	_ caddyfile.Unmarshaler = (*BoltStorage)(nil)
)
