package boltdb

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/bbolt"
)

// ErrLocked marks a database file that another process holds (a gateway
// still running on it).
var ErrLocked = errors.New("database is locked by another process")

// OpenReadOnly opens the keygate database at path for reading only, as a
// copy to another backend does (caddy webapi migrate): the file is not
// created, written or grown, and its lock is shared, so the open waits at
// most lockTimeout for a process that holds the file (a running gateway)
// and then fails with an error wrapping ErrLocked; while it is open, a
// gateway that starts on the file waits in turn. The file must be whole
// and keygate's (Check); a damaged one is an error naming it.
func OpenReadOnly(path string, lockTimeout time.Duration) (*DB, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("database %s is not a regular file", path)
	}
	// Every bbolt file starts with two meta pages (keygate's hold four
	// pages at least); bbolt itself says only "file size too small".
	if least := 2 * int64(os.Getpagesize()); st.Size() < least {
		return nil, fmt.Errorf("database %s is not a bbolt file or is cut short: %d bytes, fewer than the %d of its two meta pages", path, st.Size(), least)
	}
	var db *bbolt.DB
	err = Guard(path, func() error {
		var err error
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: lockTimeout})
		return err
	})
	switch {
	case errors.Is(err, bbolt.ErrTimeout):
		return nil, fmt.Errorf("database %s: %w (waited %s): a gateway still runs on it; stop it first", path, ErrLocked, lockTimeout)
	case errors.Is(err, bbolt.ErrInvalid) || errors.Is(err, bbolt.ErrChecksum) || errors.Is(err, bbolt.ErrVersionMismatch):
		return nil, fmt.Errorf("database %s is not a bbolt file or its header is damaged (%w)", path, err)
	case err != nil:
		return nil, fmt.Errorf("opening database %s: %w", path, err)
	}
	if err := Guard(path, func() error { return Check(db, path) }); err != nil {
		db.Close()
		return nil, err
	}
	return New(db), nil
}

// Guard runs fn, which reads the database at path, turning a fault of a
// page that cannot be read into an error naming the file. bbolt reads the
// file through a memory map and panics on a page it cannot make sense of;
// a page past the end of a cut file is a fault (SIGBUS) that would end
// the process. Only what fn reads in its own goroutine is guarded.
func Guard(path string, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("database %s is damaged (%v): restore it from a backup", path, r)
		}
	}()
	return fn()
}

// Check refuses a database file that is cut short or that is not
// keygate's. A file shorter than the pages its last commit counts (a cut
// copy, a disk that lost its tail) cannot be read safely at all. A file
// that holds buckets, none of them keygate's, is another program's:
// keygate would fill it with its own buckets beside the other program's
// data, or copy nothing from it.
func Check(db *bbolt.DB, path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	return db.View(func(tx *bbolt.Tx) error {
		if want := tx.Size(); st.Size() < want {
			return fmt.Errorf("database %s is truncated: %d bytes, its pages need %d: restore it from a backup", path, st.Size(), want)
		}
		if tx.Bucket(ownBucket) != nil {
			return nil
		}
		var names []string
		err := tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
			if len(names) < 5 {
				names = append(names, strconv.Quote(string(name)))
			}
			return nil
		})
		if err != nil || len(names) == 0 {
			return err
		}
		return fmt.Errorf("database %s is not a keygate database: it holds buckets of another program (%s) and none of keygate's; give keygate a data_dir of its own", path, strings.Join(names, ", "))
	})
}

// ownBucket is the bucket that keygate creates first, in the first
// transaction it ever commits to a file: a keygate database without it
// is empty.
var ownBucket = []byte("keys")
