package seal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadOrCreateMasterKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "master.key")
	k1, err := LoadOrCreateMasterKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != 32 || bytes.Equal(k1, make([]byte, 32)) {
		t.Fatalf("key %x", k1)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Errorf("file mode %v size %d, want 0600 and 32", fi.Mode().Perm(), fi.Size())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("directory mode %v, want 0700", di.Mode().Perm())
	}
	k2, err := LoadOrCreateMasterKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("second load = %x, %v; want %x", k2, err, k1)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("key directory holds %d entries, want only the key", len(entries))
	}
	for _, size := range []int{0, 31, 33} {
		bad := filepath.Join(dir, "bad.key")
		if err := os.WriteFile(bad, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadOrCreateMasterKey(bad); err == nil {
			t.Errorf("a %d-byte key file was accepted", size)
		}
	}
	// As ssh does with a private key: a key that group or others may
	// read or write is refused, with the file and its mode named.
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		loose := filepath.Join(dir, "loose.key")
		if err := os.WriteFile(loose, k1, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(loose, mode); err != nil {
			t.Fatal(err)
		}
		_, err := LoadOrCreateMasterKey(loose)
		if err == nil || !strings.Contains(err.Error(), loose) || !strings.Contains(err.Error(), fmt.Sprintf("%04o", mode)) {
			t.Errorf("a key file of mode %04o: %v; want an error naming the file and its mode", mode, err)
		}
		os.Remove(loose)
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateMasterKey(path); err != nil {
		t.Errorf("a key file of mode 0400: %v", err)
	}
}
