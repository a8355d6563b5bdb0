package notify

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveEMLLeftovers: what a crash leaves under a temporary name goes,
// delivered messages stay, and a directory not made yet is no error.
func TestRemoveEMLLeftovers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mail")
	if n, err := RemoveEMLLeftovers(dir); n != 0 || err != nil {
		t.Fatalf("missing dir: %d, %v", n, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".tmp-123", ".tmp-456", "20261123T080000.000000000Z-000000000001.eml"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("Subject: x\r\n\r\nhalf"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n, err := RemoveEMLLeftovers(dir)
	if n != 2 || err != nil {
		t.Fatalf("removed %d, %v; want 2", n, err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 || left[0].Name() != "20261123T080000.000000000Z-000000000001.eml" {
		t.Fatalf("left %v", left)
	}
}
