package caddymodule

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/stores"
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

// lockTimeout bounds the wait for another process's lock on the database.
const lockTimeout = 5 * time.Second

// OpenStores implements Storage: it opens (or creates) the file, refuses
// one that is cut short, damaged or another program's, and opens every
// store on it.
func (s BoltStorage) OpenStores(env StorageEnv) (_ *stores.Stores, err error) {
	path, err := s.PoolKey(env.DataDir)
	if err != nil {
		return nil, err
	}
	if err := checkBeforeOpen(path); err != nil {
		return nil, err
	}
	// Open reads the freelist through the memory map already: a file cut
	// before it faults there, so it is read under boltdb.Guard too.
	var db *bbolt.DB
	err = boltdb.Guard(path, func() (err error) {
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: lockTimeout})
		return err
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, lockedError(path)
	}
	if errors.Is(err, bbolt.ErrInvalid) || errors.Is(err, bbolt.ErrChecksum) || errors.Is(err, bbolt.ErrVersionMismatch) {
		return nil, fmt.Errorf("database %s is not a bbolt file or its header is damaged (%w): restore it from a backup, or give keygate a data_dir of its own", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	var st *stores.Stores
	err = boltdb.Guard(path, func() error {
		if err := boltdb.Check(db, path); err != nil {
			return err
		}
		var openErr error
		st, openErr = stores.OpenBolt(boltdb.New(db), path)
		return openErr
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

func lockedError(path string) error {
	return fmt.Errorf("database %s is locked by another process (waited %s): stop the other gateway or give this one another data_dir", path, lockTimeout)
}

// checkBeforeOpen refuses an existing file that is cut short, damaged or
// another program's before bbolt.Open opens it for writing. That open
// reads the freelist page through its memory map, and a page past the
// end of a cut file is a fault (SIGBUS): boltdb.Guard makes it an
// error, but bbolt.Open then leaves the file mapped and locked by this
// process. A read-only open reads no freelist, so boltdb.Check refuses
// the file first; it is closed again at once.
func checkBeforeOpen(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Size() < 2*int64(os.Getpagesize()) {
		return nil // absent or empty (made by bbolt.Open), or too short (refused by it)
	}
	ro, err := boltdb.OpenReadOnly(path, lockTimeout)
	if errors.Is(err, boltdb.ErrLocked) {
		return lockedError(path)
	}
	if err != nil {
		return err
	}
	return ro.Close()
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
