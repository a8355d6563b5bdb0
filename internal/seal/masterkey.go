package seal

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// LoadOrCreateMasterKey reads the 32-byte master key at path, creating it
// with mode 0600 (and its directory with 0700) on first start. As ssh does
// with a private key, it refuses a file that group or others may read or
// write.
func LoadOrCreateMasterKey(path string) ([]byte, error) {
	key, err := LoadMasterKey(path)
	if !errors.Is(err, os.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating master key directory: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		// Another process created it between our read and open: use theirs.
		return LoadOrCreateMasterKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("creating master key: %w", err)
	}
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A short file would stop every later start; leave none.
		os.Remove(path)
		return nil, fmt.Errorf("writing master key: %w", err)
	}
	return key, nil
}

// LoadMasterKey reads the 32-byte master key at path, which must exist,
// under the rules of LoadOrCreateMasterKey; an error for a missing file
// wraps os.ErrNotExist. Tools that work on a gateway's data (caddy webapi
// migrate) use it: a new key would open nothing that gateway sealed.
func LoadMasterKey(path string) ([]byte, error) {
	key, err := readMasterKey(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("reading master key: %w", err)
		}
		return nil, err // names the file already
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("master key file %s holds %d bytes, want 32", path, len(key))
	}
	return key, nil
}

// readMasterKey reads the file at path once it has checked, on the open
// file, that it is a regular file that only its owner may use.
func readMasterKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("master key file %s is not a regular file (%s)", path, st.Mode().Type())
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("master key file %s has mode %04o: group and others must have no access (chmod 600 %s)", path, perm, path)
	}
	return io.ReadAll(f)
}
